"""Generated edits over real files, each with its ideal outcome defined.

Files come from this repository's history (``git show`` of files its
commits touched), the Python standard library, and files in the
languages forj ships grammars for that the machine holds (C headers and
sources, JavaScript, Go, Rust).  From a file and a seeded choice of lines,
:func:`make_case` builds one edit the way a model sends it, with one
shape of trouble, and says what must come of it:

``clean``, ``trailing``, ``drift``, ``region``
    a legitimate edit (as copied, with trailing blanks lost, a level too
    deep; ``edit_region`` with ``expected``): the intended file, or a
    refusal (counted, the refusal rate);
``twin``, ``twin-trailing``
    the copy, drifted or stripped, equals a twin block put elsewhere in the
    file while a looser pass finds the block meant: a refusal, or the
    intended file;
``fence``, ``markers``, ``gutter``, ``whole-file``, ``escaped``,
``placeholder``, ``blank-start``, ``region-whole-file``, ``region-escaped``
    new text carrying what surrounds an edit, escaped twice, abbreviated,
    or an old text starting with an empty line the file lacks: a refusal.

The tests (``test_edit_properties.py``) run cases through the real worker
and assert no wrong write; the benchmark runs many more and reports the
refusal rate on legitimate edits.
"""

from __future__ import annotations

import json
import random
import subprocess
import sysconfig
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
MAX_BYTES = 60_000
LEGIT = ("clean", "trailing", "drift", "region")
MUST_REFUSE = (
    "region-whole-file",
    "region-escaped",
    "fence",
    "markers",
    "gutter",
    "whole-file",
    "escaped",
    "placeholder",
    "blank-start",
)
SHAPES = (*LEGIT, "twin", "twin-trailing", *MUST_REFUSE)
COMMENT = {
    ".py": "#",
    ".sh": "#",
    ".toml": "#",
    ".el": ";;",
    ".c": "//",
    ".h": "//",
    ".js": "//",
    ".go": "//",
    ".rs": "//",
    ".md": "<!--",
}


@dataclass(frozen=True)
class Source:
    origin: str  # "history", "stdlib" or "grammar"
    name: str  # file name in the test project (its suffix matters)
    text: str


@dataclass(frozen=True)
class Case:
    shape: str
    source: Source
    text: str  # the file as the model read it
    args: dict[str, Any]  # the edit's arguments, path included
    intended: str | None  # the file as meant; None: only a refusal is right
    refusal_ok: bool = True


# --- real files ------------------------------------------------------------------------


def _usable(text: str) -> bool:
    return "\r" not in text and "\ufeff" not in text and text.count("\n") >= 20


@cache
def history_sources(limit: int = 40) -> tuple[Source, ...]:
    """Files as this repository's commits left them (``git log`` / ``git show``)."""
    try:
        log = subprocess.run(
            ["git", "log", "--format=%H", "--name-only", "--diff-filter=M", "-n", "300"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return ()
    out: list[Source] = []
    commit = ""
    seen: set[str] = set()
    for line in log.splitlines():
        if len(line) == 40 and all(c in "0123456789abcdef" for c in line):
            commit = line
            continue
        path = line.strip()
        if not path or path in seen or Path(path).suffix not in COMMENT:
            continue
        shown = subprocess.run(
            ["git", "show", f"{commit}:{path}"], cwd=ROOT, capture_output=True, check=False
        )
        try:
            text = shown.stdout.decode("utf-8")
        except UnicodeDecodeError:
            continue
        if shown.returncode == 0 and _usable(text) and len(shown.stdout) <= MAX_BYTES:
            seen.add(path)
            out.append(Source("history", Path(path).name, text))
        if len(out) >= limit:
            break
    return tuple(out)


def _read(path: Path) -> str | None:
    try:
        data = path.read_bytes()
        text = data.decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    return text if len(data) <= MAX_BYTES and _usable(text) else None


@cache
def stdlib_sources(limit: int = 40) -> tuple[Source, ...]:
    lib = Path(sysconfig.get_paths()["stdlib"])
    out = []
    for path in sorted(lib.glob("*.py")):
        text = _read(path)
        if text is not None:
            out.append(Source("stdlib", path.name, text))
        if len(out) >= limit:
            break
    return tuple(out)


def _grammar_roots() -> list[Path]:
    venv = Path(sysconfig.get_paths()["purelib"])
    return [
        venv,
        Path("/usr/include"),
        Path("/usr/share/doc/git/contrib"),
        *Path.home().glob(".rustup/toolchains/*/share/doc/rust"),
    ]


@cache
def grammar_sources(per_language: int = 6) -> tuple[Source, ...]:
    """Files in the languages forj ships grammars for, wherever the machine has them."""
    out: list[Source] = []
    for suffix in (".c", ".h", ".js", ".go", ".rs"):
        found = 0
        for root in _grammar_roots():
            if not root.is_dir() or found >= per_language:
                continue
            for path in sorted(root.rglob(f"*{suffix}"))[:400]:
                text = _read(path)
                if text is None or ".min." in path.name:
                    continue
                out.append(Source("grammar", f"{path.stem}{suffix}", text))
                found += 1
                if found >= per_language:
                    break
    return tuple(out)


def all_sources() -> tuple[Source, ...]:
    return history_sources() + stdlib_sources() + grammar_sources()


# --- building one case ------------------------------------------------------------------


def _indent(line: str) -> str:
    return line[: len(line) - len(line.lstrip(" \t"))]


def _telling(line: str) -> bool:
    text = line.strip()
    return len(text) >= 6 and any(c.isalnum() for c in text)


def _key_count(lines: list[str], block: list[str]) -> int:
    """Places where ``block`` matches ignoring all whitespace at line ends."""
    want = [x.strip() for x in block]
    keys = [x.strip() for x in lines]
    n = len(want)
    return sum(1 for i in range(len(keys) - n + 1) if keys[i : i + n] == want)


def _pick_block(lines: list[str], rng: random.Random, min_len: int = 2) -> tuple[int, int] | None:
    """A stretch of lines, unique in the file even ignoring whitespace, mostly telling."""
    for _ in range(30):
        i = rng.randrange(len(lines))
        if not _telling(lines[i]) or "***" in lines[i]:
            continue
        j = i + min_len
        while j <= min(len(lines), i + 8):
            block = lines[i:j]
            if (
                sum(_telling(x) for x in block) >= min_len
                and _key_count(lines, block) == 1
                and "***" not in _join(block)  # redacted credentials are another matter
                and not block[-1].rstrip().endswith("\\")  # a comment after it would join lines
            ):
                return i, j
            j += 1
    return None


def _note(path: str, words: str) -> str:
    """A comment in the file's own comment style, so the edit keeps the file valid."""
    leader = COMMENT.get(Path(path).suffix, "#")
    return f"{leader} {words}" + (" -->" if leader == "<!--" else "")


def _changed(block: list[str], rng: random.Random, path: str) -> list[str]:
    """The block as a commit changes it: one telling line edited, maybe one added."""
    out = list(block)
    targets = [k for k, x in enumerate(out) if _telling(x)]
    k = rng.choice(targets)
    line = out[k]
    out[k] = line.rstrip() + "  " + _note(path, "changed") + "\n"
    if rng.random() < 0.5:
        out.insert(k + 1, _indent(line) + _note(path, "added line") + "\n")
    return out


def _join(lines: list[str]) -> str:
    return "".join(lines)


def _deeper(lines: list[str]) -> list[str]:
    return [("    " + x) if x.strip() else x for x in lines]


def make_case(source: Source, shape: str, rng: random.Random) -> Case | None:
    text = source.text
    lines = text.splitlines(keepends=True)
    if not lines or not all(x.endswith("\n") for x in lines):
        return None
    picked = _pick_block(lines, rng)
    if picked is None:
        return None
    i, j = picked
    block = lines[i:j]
    new = _changed(block, rng, source.name)
    intended = _join(lines[:i] + new + lines[j:])
    path = source.name

    def edit(old: str, new_text: str) -> dict[str, Any]:
        return {"tool": "edit", "path": path, "old_string": old, "new_string": new_text}

    if shape == "clean":
        return Case(shape, source, text, edit(_join(block), _join(new)), intended)
    if shape.startswith("region"):
        content = {
            "region": _join(new),
            "region-whole-file": intended,
            "region-escaped": "\\n".join(x.rstrip("\n") for x in new),
        }[shape]
        region = {
            "tool": "edit_region",
            "path": path,
            "start_line": i + 1,
            "end_line": j,
            "expected": _join(block),
            "new_content": content,
        }
        return Case(shape, source, text, region, intended if shape == "region" else None)
    if shape == "trailing":
        if not any(x.rstrip("\n") != x.rstrip() for x in block):
            padded = [x.rstrip("\n") + "  \n" for x in block]
            return Case(shape, source, text, edit(_join(padded), _join(new)), intended)
        stripped = [x.rstrip() + "\n" for x in block]
        return Case(shape, source, text, edit(_join(stripped), _join(new)), intended)
    if shape == "drift":
        if "\t" in _join(block):
            return None
        old, new_text = _join(_deeper(block)), _join(_deeper(new))
        if _join(lines).count(old):
            return None  # the drifted copy is text of the file itself: another place
        return Case(shape, source, text, edit(old, new_text), intended)
    if shape in ("twin", "twin-trailing"):
        return _twin_case(source, shape, lines, i, j, new, rng)
    if shape == "fence":
        if path.endswith(".md"):
            return None
        fenced = "```" + path.rsplit(".", 1)[-1] + "\n" + _join(new) + "```\n"
        return Case(shape, source, text, edit(_join(block), fenced), None, True)
    if shape == "markers":
        marked = [" " + x for x in block[:1]] + ["-" + x for x in block[1:]]
        marked += ["+" + x for x in new[1:]]
        return Case(shape, source, text, edit(_join(block), _join(marked)), None)
    if shape == "gutter":
        numbered = [f"{i + 1 + k:6}\t{x}" for k, x in enumerate(new)]
        return Case(shape, source, text, edit(_join(block), _join(numbered)), None)
    if shape == "whole-file":
        return Case(shape, source, text, edit(_join(block), intended), None)
    if shape == "escaped":
        one = "\\n".join(x.rstrip("\n") for x in new)
        return Case(shape, source, text, edit(_join(block), one), None)
    if shape == "placeholder":
        if len(block) < 3:
            j = min(len(lines), j + 2)
            block = lines[i:j]
            if len(block) < 3 or _key_count(lines, block) != 1:
                return None
        dropped = [x for x in block[1:-1] if _telling(x)]
        if not dropped:
            return None
        leader = COMMENT.get(Path(path).suffix, "#")
        close = " -->" if leader == "<!--" else ""
        lazy = _indent(block[1]) + f"{leader} ... existing code ...{close}\n"
        return Case(
            shape, source, text, edit(_join(block), _join([block[0], lazy, block[-1]])), None
        )
    if shape == "blank-start":
        if i == 0 or not lines[i - 1].strip():
            return None
        old = "\n" + _join(block)
        # Only where no empty line stands before these lines anywhere.
        if ("\n" + old) in "\n" + text:
            return None
        return Case(shape, source, text, edit(old, "\n" + _join(new)), None)
    raise ValueError(shape)


def _twin_case(
    source: Source,
    shape: str,
    lines: list[str],
    i: int,
    j: int,
    new: list[str],
    rng: random.Random,
) -> Case | None:
    """A twin of the block meant, elsewhere, equal to the model's noisy copy."""
    block = lines[i:j]
    if "\t" in _join(block):
        return None
    if shape == "twin":
        copy, new_copy = _deeper(block), _deeper(new)
        meant = block
    else:
        if len(block) < 2:
            return None
        # The block meant has trailing blanks the copy lost; the twin has none.
        k = next((k for k, x in enumerate(block) if x.strip()), 0)
        meant = list(block)
        meant[k] = block[k].rstrip("\n") + "  \n"
        copy, new_copy = block, new
    # The twin goes at a line boundary outside the block, before or after it.
    spots = [s for s in range(len(lines) + 1) if s <= i - 1 or s >= j + 1]
    if not spots:
        return None
    at = rng.choice(spots)
    before = list(lines)
    before[i:j] = meant
    text = _join(before[:at] + copy + before[at:])
    shift = len(copy) if at <= i else 0
    intended_lines = before[:at] + copy + before[at:]
    # The intended file: the block meant changed (at the file's depth), the twin kept.
    # With the trailing twin the intended file is no better defined than the
    # copy: only a refusal is right.
    intended_lines[i + shift : j + shift] = new
    intended = _join(intended_lines) if shape == "twin" else None
    args = {
        "tool": "edit",
        "path": source.name,
        "old_string": _join(copy),
        "new_string": _join(new_copy),
    }
    # Anything but a refusal or the block meant (at its own depth) is wrong.
    return Case(shape, source, text, args, intended)


# --- running -------------------------------------------------------------------------------


@dataclass
class Outcome:
    kind: str  # "intended", "refused", "wrong", "unchanged"
    detail: str = ""


def run_case(
    case: Case, project: Path, run_calls: Callable[[list[dict[str, Any]]], list[dict[str, Any]]]
) -> Outcome:
    """Write the file, read it, send the edit through the worker, judge the file."""
    target = project / case.source.name
    target.write_text(case.text, encoding="utf-8")
    (read,) = run_calls([{"id": "r", "name": "read_file", "args": {"path": case.source.name}}])
    assert read["ok"], read
    args = {k: v for k, v in case.args.items() if k != "tool"}
    (result,) = run_calls([{"id": "e", "name": case.args["tool"], "args": args}])
    after = target.read_text(encoding="utf-8")
    if not result["ok"]:
        if after != case.text:
            return Outcome("wrong", "refused, yet the file changed")
        return Outcome("refused", json.dumps(result["error"].get("details", {}))[:200])
    if case.intended is not None and after == case.intended:
        return Outcome("intended")
    return Outcome("wrong", _diff(case.intended or case.text, after))


def _diff(want: str, got: str) -> str:
    import difflib

    return "".join(
        list(
            difflib.unified_diff(
                want.splitlines(keepends=True),
                got.splitlines(keepends=True),
                "meant",
                "written",
                n=1,
            )
        )[:30]
    )
