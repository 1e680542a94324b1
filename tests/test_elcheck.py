"""The Emacs Lisp check (seed 001's forj-paren-check), judged by Emacs's own reader."""

from __future__ import annotations

import glob
import gzip
import json
import random
import shutil
import subprocess
from pathlib import Path

import pytest

from forj_py.tools._elcheck import check

EMACS = shutil.which("emacs")
needs_emacs = pytest.mark.skipif(EMACS is None, reason="Emacs is not installed")


@pytest.mark.parametrize(
    ("text", "message", "line", "column"),
    [
        ('(defun f ()\n  (message "x")', "'(' is never closed", 1, 0),
        ("(a))", "unmatched closing ')'", 1, 3),
        ("(a]", "']' closes '(' opened at line 1, column 0", 1, 2),
        ('(message "open)\n', "unterminated string", 1, 9),
        ("(list ?ab)", "bad character literal", 1, 6),
        ("(list ?\\C-)", "'(' is never closed", 1, 0),  # ?\C-) is control-paren
        ("(list ?\\()", None, 0, 0),
        ("(list ?( ?) ?[ ?])", None, 0, 0),
        ('(list "a \\" ( b" ; ) comment (\n)', None, 0, 0),
        ("(foo\\( bar)", None, 0, 0),
        ("[1 2 (3 4)]", None, 0, 0),
        ("(list ?\\M-\\C-a ?\\^I ?\\x41 ?\\N{LATIN SMALL LETTER A})", None, 0, 0),
        ('(rx (? ?-) (? (or "a")))', None, 0, 0),
    ],
)
def test_elisp_check_cases(text: str, message: str | None, line: int, column: int) -> None:
    problem = check(text)
    if message is None:
        assert problem is None, problem
    else:
        assert problem is not None
        assert (problem.message, problem.line, problem.column) == (message, line, column)


def _emacs_sources() -> list[str]:
    if EMACS is None:
        return []
    out = subprocess.run(
        [EMACS, "-Q", "--batch", "--eval", "(princ data-directory)"],
        capture_output=True,
        text=True,
        check=False,
    )
    lisp = Path(out.stdout.strip()).parent / "lisp"
    names = glob.glob(str(lisp / "**" / "*.el"), recursive=True)
    names += glob.glob(str(lisp / "**" / "*.el.gz"), recursive=True)
    return sorted(names)


@needs_emacs
def test_every_emacs_source_file_passes() -> None:
    files = _emacs_sources()
    if not files:
        pytest.skip("Emacs's Lisp sources are not installed")
    checked = 0
    for name in files:
        raw = (
            gzip.decompress(Path(name).read_bytes())
            if name.endswith(".gz")
            else Path(name).read_bytes()
        )
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            continue  # a few files are in legacy encodings
        problem = check(text)
        assert problem is None, f"{name}: {problem and problem.describe()}"
        checked += 1
    assert checked > 100


_SNIPPETS = [
    '(defun f (x) "Doc with (parens) and \\"quotes\\"." (if (eq x ?\\() [1 2] (list ?a ?\\s)))\n',
    '(let ((s "a;b")) ; comment with ( and "\n  (message "%s" s))\n',
    "(define-key map [?\\C-c ?a] #'cmd)\n(setq v '(1 . 2))\n",
    '(cond ((memq c \'(?\\( ?\\))) t) (t (string-match "\\\\(x\\\\)" s)))\n',
]


@needs_emacs
def test_agrees_with_emacs_read_on_mutated_code(tmp_path: Path) -> None:
    """Delete or insert one syntax character at random; Emacs's read is the judge."""
    rng = random.Random(4242)
    cases = []
    for _ in range(600):
        text = rng.choice(_SNIPPETS)
        pos = rng.randrange(len(text))
        if rng.random() < 0.5:
            text = text[:pos] + text[pos + 1 :]
        else:
            text = text[:pos] + rng.choice('()[]"?\\;') + text[pos:]
        cases.append(text)
    data = tmp_path / "cases.json"
    data.write_text(json.dumps(cases))
    script = tmp_path / "judge.el"
    script.write_text(
        """
(let* ((cases (json-parse-string
               (with-temp-buffer (insert-file-contents (car command-line-args-left))
                                 (buffer-string))
               :array-type 'list)))
  (dolist (text cases)
    (princ
     (condition-case nil
         (with-temp-buffer
           (insert text)
           (set-syntax-table emacs-lisp-mode-syntax-table)
           (goto-char (point-min))
           (while (progn (forward-comment (buffer-size)) (not (eobp)))
             (read (current-buffer)))
           "ok\\n")
       (error "error\\n")))))
"""
    )
    out = subprocess.run(
        [EMACS, "-Q", "--batch", "-l", str(script), str(data)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert len(out) == len(cases)
    disagreements = [
        (text, verdict)
        for text, verdict in zip(cases, out, strict=True)
        if (check(text) is None) != (verdict == "ok")
    ]
    assert disagreements == [], "\n".join(f"{v}: {t!r}" for t, v in disagreements)
