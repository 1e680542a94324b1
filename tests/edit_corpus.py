"""A corpus of real edits, sent the way models send them, run through the real worker.

Before/after pairs come from real files:

* this repository's own history (``git show COMMIT^:PATH`` against
  ``COMMIT:PATH`` for every text file a commit modified);
* the Python standard library of the running interpreter, with edits of
  the kinds commits make (a line inserted, removed or changed inside a
  function, taken and placed with the seeded random generator), and some
  of the same files indented with tabs, as a tab-indented project keeps
  them;
* where a second copy of the same standard library version is installed
  (a distribution's patched build beside another), the files that differ
  between the two.

Each changed stretch becomes the calls a model would send (``edit``,
``edit_region``, ``multi_edit``, ``write_file``), clean and with the noise
models add: trailing whitespace, indentation one level off, tabs typed as
spaces, typographic punctuation, a line missing or changed, line numbers
off by a few (with and without ``expected``), numbers taken from before an
earlier call of the batch, content escaped twice, and lazy placeholders.
Every case runs through a real :class:`forj_py.service.Worker` (plan,
approve, execute) on a real file, and is scored: applied correctly,
written wrong, refused with a pointer to the right lines, refused without.

An edit's stretch is widened with unchanged lines until it occurs once in
the file (as text, and ignoring whitespace), as a model adds context; a
noisy copy that happens to be, as it is, text found elsewhere in the file
is left out (it names another place, so the one meant cannot be
recovered).  Content escaped twice comes both JSON-escaped and with only
its newlines escaped, and always holds at least two literal ``\n``.

The test (``tests/test_edit_corpus.py``) runs a fixed seeded sample; the
benchmark (``bench/edit_corpus.py``) runs the whole corpus and prints the
table.
"""

from __future__ import annotations

import difflib
import json
import random
import re
import subprocess
import sys
import sysconfig
import tempfile
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
TEXT_SUFFIXES = {".py", ".el", ".md", ".toml", ".txt", ".cfg", ".sh", ".c", ".h", ".go", ".js"}
TEXT_NAMES = {"Makefile"}
MAX_FILE_BYTES = 120_000
MAX_HUNK_LINES = 24

OUTCOMES = ("correct", "wrong", "refused with pointer", "refused without pointer")


@dataclass(frozen=True)
class Pair:
    source: str  # "history", "stdlib" or "stdlib-versions"
    name: str
    filename: str  # the name the file gets in the test project
    before: str
    after: str


@dataclass(frozen=True)
class Hunk:
    i1: int  # before lines [i1, i2) become after lines [j1, j2) (0-based)
    i2: int
    j1: int
    j2: int


@dataclass
class Case:
    tool: str
    noise: str
    pair: Pair
    batches: list[list[dict[str, Any]]]  # calls, batch by batch
    expected: str | None  # the file afterwards if applied as meant; None: must be refused
    target: tuple[int, int]  # the lines meant, in the file before (1-based, inclusive)
    recoverable: bool


@dataclass
class Tally:
    counts: dict[tuple[str, str], Counter[str]] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)

    def add(self, case: Case, outcome: str, note: str = "") -> None:
        self.counts.setdefault((case.tool, case.noise), Counter())[outcome] += 1
        if note:
            self.failures.append(f"{case.tool}/{case.noise} {case.pair.name}: {note}")

    def table(self) -> str:
        head = "| tool | noise | cases | " + " | ".join(OUTCOMES) + " |"
        rows = [head, "|" + " --- |" * (3 + len(OUTCOMES))]
        for (tool, noise), c in sorted(self.counts.items(), key=lambda kv: _order(kv[0])):
            total = sum(c.values())
            cells = [f"{c[o]} ({100 * c[o] / total:.0f}%)" if c[o] else "0" for o in OUTCOMES]
            rows.append(f"| {tool} | {noise} | {total} | " + " | ".join(cells) + " |")
        return "\n".join(rows)

    def rate(
        self, outcome: str, *, noises: set[str] | None = None, tools: set[str] | None = None
    ) -> float:
        hit = total = 0
        for (tool, noise), c in self.counts.items():
            if (noises is None or noise in noises) and (tools is None or tool in tools):
                hit += sum(c[o] for o in OUTCOMES if o == outcome)
                total += sum(c.values())
        return hit / total if total else 1.0

    def total(self, *, noises: set[str] | None = None) -> int:
        return sum(
            sum(c.values())
            for (_, noise), c in self.counts.items()
            if noises is None or noise in noises
        )


TOOL_ORDER = ("edit", "edit_region", "multi_edit", "write_file")
NOISE_ORDER = (
    "clean",
    "clean, without expected",
    "trailing whitespace",
    "indent off by a level",
    "tabs as spaces",
    "typographic punctuation",
    "off by N, with expected",
    "expected with whitespace noise",
    "numbered before an earlier call",
    "off by N, without expected",
    "line missing",
    "line changed",
    "double-escaped",
    "placeholder",
)
RECOVERABLE = set(NOISE_ORDER[:9])
MISSED_MATCH = {"line missing", "line changed"}


def _order(key: tuple[str, str]) -> tuple[int, int]:
    tool, noise = key
    return TOOL_ORDER.index(tool), NOISE_ORDER.index(noise)


# --- pairs ---------------------------------------------------------------------------


def _is_text_name(path: str) -> bool:
    p = Path(path)
    return p.suffix in TEXT_SUFFIXES or p.name in TEXT_NAMES


def history_pairs(limit: int | None = None) -> list[Pair]:
    """Modified text files of this repository's commits, oldest first."""
    try:
        log = subprocess.run(
            ["git", "-C", str(ROOT), "log", "--format=%H", "--no-merges", "--reverse"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
    except (OSError, subprocess.CalledProcessError):
        return []
    pairs = []
    for commit in log:
        changed = subprocess.run(
            [
                "git",
                "-C",
                str(ROOT),
                "diff-tree",
                "--no-commit-id",
                "-r",
                "--diff-filter=M",
                "--name-only",
                f"{commit}^",
                commit,
            ],
            capture_output=True,
            text=True,
        ).stdout.split("\n")
        for path in filter(None, changed):
            if not _is_text_name(path):
                continue
            before = _git_show(f"{commit}^:{path}")
            after = _git_show(f"{commit}:{path}")
            if before is None or after is None or before == after:
                continue
            if max(len(before), len(after)) > MAX_FILE_BYTES:
                continue
            pairs.append(Pair("history", f"{commit[:8]}:{path}", Path(path).name, before, after))
            if limit is not None and len(pairs) >= limit:
                return pairs
    return pairs


def _git_show(spec: str) -> str | None:
    out = subprocess.run(["git", "-C", str(ROOT), "show", spec], capture_output=True)
    if out.returncode != 0:
        return None
    try:
        return out.stdout.decode("utf-8")
    except UnicodeDecodeError:
        return None


def stdlib_files() -> list[Path]:
    lib = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(p for p in lib.glob("*.py") if 2_000 < p.stat().st_size <= MAX_FILE_BYTES)
    return files


def stdlib_pairs(rng: random.Random, count: int) -> list[Pair]:
    """Standard library files with one to three edits of the kinds commits make."""
    files = stdlib_files()
    pairs = []
    for path in rng.sample(files, min(count, len(files))):
        try:
            before = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        after = _commit_like_edit(before, rng)
        if after is not None and after != before:
            pairs.append(Pair("stdlib", path.name, path.name, before, after))
    return pairs


def _tabs(text: str) -> str:
    return re.sub(r"(?m)^(?:    )+", lambda m: "\t" * (len(m.group()) // 4), text)


def tabbed(pair: Pair) -> Pair:
    """A pair with each leading four spaces as a tab."""
    return Pair(
        "stdlib-tabs", pair.name + " (tabs)", pair.filename, _tabs(pair.before), _tabs(pair.after)
    )


_IDENT = re.compile(r"\b[a-z_][a-z0-9_]{3,}\b")


def _commit_like_edit(text: str, rng: random.Random) -> str | None:
    """Change one to three spots inside function bodies, as a commit would."""
    lines = text.split("\n")
    body = [
        i
        for i, line in enumerate(lines)
        if line.startswith("        ")
        and line.strip()
        and not line.strip().startswith(("#", '"', "'"))
    ]
    if len(body) < 20:
        return None
    spots = sorted(rng.sample(body, rng.randint(1, 3)), reverse=True)
    for i in spots:
        line = lines[i]
        kind = rng.choice(("change", "insert", "delete", "change"))
        if kind == "change":
            names = _IDENT.findall(line)
            if not names:
                continue
            name = rng.choice(names)
            lines[i] = re.sub(rf"\b{name}\b", f"{name}_value", line, count=1)
        elif kind == "insert":
            indent = line[: len(line) - len(line.lstrip())]
            names = _IDENT.findall(line) or ["self"]
            name = rng.choice(names)
            lines[i + 1 : i + 1] = [f"{indent}# {name} must be set here", f"{indent}assert {name}"]
        else:
            del lines[i]
    return "\n".join(lines)


def stdlib_version_pairs() -> list[Pair]:
    """Files that differ between two installed copies of one standard library version."""
    here = Path(sysconfig.get_paths()["stdlib"]).resolve()
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    others = [
        Path(p) / version
        for p in ("/usr/lib", "/usr/local/lib", "/opt/homebrew/lib")
        if (Path(p) / version).is_dir() and (Path(p) / version).resolve() != here
    ]
    pairs = []
    for other in others[:1]:
        for path in sorted(here.glob("*.py")):
            twin = other / path.name
            if not twin.is_file() or path.stat().st_size > MAX_FILE_BYTES:
                continue
            try:
                a, b = twin.read_text(encoding="utf-8"), path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError):
                continue
            if a != b:
                pairs.append(Pair("stdlib-versions", path.name, path.name, a, b))
    return pairs


# --- hunks and calls -------------------------------------------------------------------


def split(text: str) -> list[str]:
    """Lines with their ends, as forj counts them."""
    parts = text.split("\n")
    out = [p + "\n" for p in parts[:-1]]
    if parts[-1]:
        out.append(parts[-1])
    return out


def hunks(pair: Pair) -> list[Hunk]:
    a, b = split(pair.before), split(pair.after)
    out = []
    matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        if i2 - i1 > MAX_HUNK_LINES or j2 - j1 > MAX_HUNK_LINES:
            continue
        out.append(Hunk(i1, i2, j1, j2))
    return out


def apply_hunks(pair: Pair, chosen: list[Hunk]) -> str:
    a, b = split(pair.before), split(pair.after)
    for h in sorted(chosen, key=lambda h: h.i1, reverse=True):
        a[h.i1 : h.i2] = b[h.j1 : h.j2]
    return "".join(a)


def _key(line: str) -> str:
    return line.strip()


def _occurrences(lines: list[str], window: list[str]) -> int:
    want = [_key(x) for x in window]
    keys = [_key(x) for x in lines]
    n = len(want)
    return sum(1 for i in range(len(keys) - n + 1) if keys[i : i + n] == want)


def widen(pair: Pair, h: Hunk) -> tuple[int, int] | None:
    """Before lines [top, bottom) around the hunk that occur once, whitespace aside."""
    a = split(pair.before)
    top, bottom = h.i1, h.i2
    if top == bottom:  # a pure insertion: anchor on the line above or below
        if top > 0:
            top -= 1
        elif bottom < len(a):
            bottom += 1
        else:
            return None
    for _ in range(8):
        window = a[top:bottom]
        if (
            any(x.strip() for x in window)
            and _occurrences(a, window) == 1
            and pair.before.count("".join(window)) == 1
        ):
            # Models send complete lines: the last one with its newline.
            return top, bottom
        if top > 0:
            top -= 1
        if bottom < len(a):
            bottom += 1
    return None


@dataclass
class Stretch:
    """One hunk with the unchanged lines around it that make it unique."""

    top: int
    bottom: int
    old: list[str]  # before[top:bottom]
    new: list[str]  # the same stretch after the hunk
    hunk: Hunk


def stretch(pair: Pair, h: Hunk) -> Stretch | None:
    span = widen(pair, h)
    if span is None:
        return None
    top, bottom = span
    a, b = split(pair.before), split(pair.after)
    old = a[top:bottom]
    new = a[top : h.i1] + b[h.j1 : h.j2] + a[h.i2 : bottom]
    if not all(x.endswith("\n") for x in old + new):
        return None  # at the end of a file without a final newline: left out
    return Stretch(top, bottom, old, new, h)


def grown(pair: Pair, s: Stretch, lines: int = 4) -> Stretch:
    """The stretch with unchanged lines added around it until it has ``lines`` lines."""
    a, b = split(pair.before), split(pair.after)
    top, bottom = s.top, s.bottom
    while bottom - top < lines and (top > 0 or bottom < len(a)):
        if top > 0:
            top -= 1
        if bottom < len(a) and bottom - top < lines:
            bottom += 1
    h = s.hunk
    old = a[top:bottom]
    new = a[top : h.i1] + b[h.j1 : h.j2] + a[h.i2 : bottom]
    if not all(x.endswith("\n") for x in old + new):
        return s
    return Stretch(top, bottom, old, new, h)


def _noisy_lines(lines: list[str], noise: str, rng: random.Random) -> list[str] | None:
    """The same lines as a model with this habit would copy them; None if it does not apply."""
    out = []
    if noise == "trailing whitespace":
        for k, line in enumerate(lines):
            body = line.rstrip("\n")
            out.append(
                (body.rstrip() if body != body.rstrip() else body + (" " if k % 2 == 0 else ""))
                + "\n"
            )
        return out
    if noise in ("indent off by a level", "dedent"):
        if noise == "dedent":
            return [x[4:] if x.strip() else x for x in lines]
        return ["    " + x if x.strip() else x for x in lines]
    if noise == "tabs as spaces":
        if not any(x.startswith("\t") for x in lines):
            return None
        return [re.sub(r"^\t+", lambda m: "    " * len(m.group()), x) for x in lines]
    if noise == "typographic punctuation":
        changed = [_typographic(x) for x in lines]
        return changed if changed != lines else None
    raise ValueError(noise)


def _can_dedent(lines: list[str]) -> bool:
    return all(x.startswith("    ") for x in lines if x.strip())


def _typographic(line: str) -> str:
    line = re.sub(r'"([^"\n]*)"', "\u201c\\1\u201d", line)
    line = re.sub(r"(?<=\w)'(?=\w)", "\u2019", line)
    line = re.sub(r"'([^'\n]*)'", "\u2018\\1\u2019", line)
    line = line.replace(" -- ", " \u2013 ").replace("...", "\u2026")
    return line


PLACEHOLDERS = {
    ".py": "# ... existing code ...",
    ".toml": "# ... rest unchanged ...",
    ".sh": "# ... existing code ...",
    ".el": ";; ... rest of the function unchanged",
    ".md": "<!-- ... rest of the section unchanged ... -->",
    ".c": "/* ... */",
    ".h": "/* ... */",
    ".go": "// ... existing code ...",
    ".js": "// rest of the file unchanged",
}


def placeholder_for(filename: str) -> str:
    return PLACEHOLDERS.get(Path(filename).suffix, "# ... existing code ...")


def double_escaped(lines: list[str], rng: random.Random) -> str | None:
    """The text as a model that escaped it twice sends it: JSON-escaped, or only its newlines."""
    text = "".join(lines)
    if text.count("\n") < 2 or "\\n" in text:
        return None
    if rng.random() < 0.5:
        return json.dumps(text, ensure_ascii=False)[1:-1]
    return text.replace("\n", "\\n")


def _call(i: int, name: str, **args: Any) -> dict[str, Any]:
    return {"id": f"c{i}", "name": name, "args": args}


def cases_for(pair: Pair, rng: random.Random, max_hunks: int = 3) -> Iterator[Case]:
    all_hunks = hunks(pair)
    if not all_hunks:
        return
    chosen = rng.sample(all_hunks, min(max_hunks, len(all_hunks)))
    path = pair.filename
    for h in chosen:
        s = stretch(pair, h)
        if s is None:
            continue
        expected = apply_hunks(pair, [h])
        target = (s.top + 1, max(s.bottom, s.top + 1))
        yield from _edit_cases(pair, path, s, expected, target, rng)
        yield from _region_cases(pair, path, s, expected, target, rng)
    yield from _multi_cases(pair, path, all_hunks, rng)
    yield from _write_cases(pair, path, rng)


def _edit_cases(
    pair: Pair, path: str, s: Stretch, expected: str, target: tuple[int, int], rng: random.Random
) -> Iterator[Case]:
    old, new = "".join(s.old), "".join(s.new)

    def case(noise: str, o: str, n: str, exp: str | None, recoverable: bool) -> Case:
        call = _call(0, "edit", path=path, old_string=o, new_string=n)
        return Case("edit", noise, pair, [[call]], exp, target, recoverable)

    yield case("clean", old, new, expected, True)
    for noise in (
        "trailing whitespace",
        "indent off by a level",
        "tabs as spaces",
        "typographic punctuation",
    ):
        o = _noisy_lines(s.old, noise, rng)
        if o is None:
            continue
        if noise == "indent off by a level" and rng.random() < 0.5 and _can_dedent(s.old + s.new):
            o = _noisy_lines(s.old, "dedent", rng)
            n = _noisy_lines(s.new, "dedent", rng) or s.new
        elif noise == "trailing whitespace":
            # Context lines copied the same way; changed lines as the model wrote them.
            kept = dict(zip(s.old, o, strict=True))
            n = [kept.get(x, x) for x in s.new]
        else:
            n = _noisy_lines(s.new, noise, rng) or s.new
        assert o is not None
        if pair.before.count("".join(o)):
            continue  # the noisy copy is text found elsewhere as it is: the place is lost
        yield case(noise, "".join(o), "".join(n), expected, True)
    g = grown(pair, s)
    body = [k for k, x in enumerate(g.old) if x.strip()]
    if len(body) >= 3:
        k = rng.choice(body[1:-1])
        missing = g.old[:k] + g.old[k + 1 :]
        wide = (g.top + 1, g.bottom)
        a = split(pair.before)
        # What is left may be code found elsewhere as it is: then it is no miss.
        if not (_occurrences(a, missing) or pair.before.count("".join(missing))):
            call = _call(
                0, "edit", path=path, old_string="".join(missing), new_string="".join(g.new)
            )
            yield Case("edit", "line missing", pair, [[call]], None, wide, False)
        changed = list(g.old)
        changed[k] = _change_line(changed[k], rng)
        if changed[k] != g.old[k] and not _occurrences(a, changed):
            yield Case(
                "edit",
                "line changed",
                pair,
                [
                    [
                        _call(
                            0,
                            "edit",
                            path=path,
                            old_string="".join(changed),
                            new_string="".join(g.new),
                        )
                    ]
                ],
                None,
                wide,
                False,
            )
            args = _region_args(g, g.top + 1, g.bottom, expected=True)
            args["expected"] = "".join(changed)
            yield Case(
                "edit_region",
                "line changed",
                pair,
                [[_call(0, "edit_region", path=path, **args)]],
                None,
                wide,
                False,
            )
    escaped = double_escaped(s.new, rng)
    if escaped is not None and len(s.old) >= 2 and "\\n" not in old:
        yield case("double-escaped", old, escaped, None, False)
    yield from _placeholder_edit(pair, path, s, target)


def _change_line(line: str, rng: random.Random) -> str:
    names = _IDENT.findall(line)
    if names:
        name = rng.choice(names)
        return re.sub(rf"\b{name}\b", name[::-1] + "x", line, count=1)
    body = line.rstrip("\n")
    return body + " changed\n"


def _placeholder_edit(pair: Pair, path: str, s: Stretch, target: tuple[int, int]) -> Iterator[Case]:
    """old_string reaches a few lines past the change; new_string abbreviates them."""
    a = split(pair.before)
    extra = a[s.bottom : s.bottom + 4]
    if (
        len(extra) < 3
        or sum(1 for x in extra if x.strip()) < 2
        or not all(x.endswith("\n") for x in extra)
    ):
        return
    indent = next((x[: len(x) - len(x.lstrip())] for x in extra if x.strip()), "")
    old = "".join(s.old + extra)
    new = "".join(s.new) + indent + placeholder_for(path) + "\n"
    call = _call(0, "edit", path=path, old_string=old, new_string=new)
    yield Case(
        "edit", "placeholder", pair, [[call]], None, (target[0], s.bottom + len(extra)), False
    )


def _region_args(s: Stretch, start: int, end: int, *, expected: bool) -> dict[str, Any]:
    args: dict[str, Any] = {"start_line": start, "end_line": end, "new_content": "".join(s.new)}
    if expected:
        args["expected"] = "".join(s.old)
    return args


def _region_cases(
    pair: Pair, path: str, s: Stretch, expected: str, target: tuple[int, int], rng: random.Random
) -> Iterator[Case]:
    start, end = s.top + 1, s.bottom
    total = len(split(pair.before))

    def case(noise: str, args: dict[str, Any], exp: str | None, recoverable: bool) -> Case:
        call = _call(0, "edit_region", path=path, **args)
        return Case("edit_region", noise, pair, [[call]], exp, target, recoverable)

    yield case("clean", _region_args(s, start, end, expected=True), expected, True)
    yield case(
        "clean, without expected", _region_args(s, start, end, expected=False), expected, True
    )
    shift = rng.choice((-3, -2, -1, 1, 2, 3, 5))
    if start + shift >= 1 and end + shift <= total:
        yield case(
            "off by N, with expected",
            _region_args(s, start + shift, end + shift, expected=True),
            expected,
            True,
        )
        yield case(
            "off by N, without expected",
            _region_args(s, start + shift, end + shift, expected=False),
            expected,
            False,
        )
    # The model copies the lines with a habit, and writes its new lines the same way.
    habit = rng.choice(("trailing whitespace", "indent off by a level"))
    noisy = _noisy_lines(s.old, habit, rng)
    if noisy is not None:
        args = _region_args(s, start, end, expected=True)
        args["expected"] = "".join(noisy)
        if habit == "indent off by a level":
            args["new_content"] = "".join(_noisy_lines(s.new, habit, rng) or s.new)
        yield case("expected with whitespace noise", args, expected, True)
    escaped = double_escaped(s.new, rng)
    if escaped is not None and len(s.old) >= 2 and "\\n" not in "".join(s.old):
        args = _region_args(s, start, end, expected=True)
        args["new_content"] = escaped
        yield case("double-escaped", args, None, False)
    a = split(pair.before)
    extra = a[s.bottom : s.bottom + 4]
    if (
        len(extra) >= 3
        and sum(1 for x in extra if x.strip()) >= 2
        and all(x.endswith("\n") for x in extra)
    ):
        indent = next((x[: len(x) - len(x.lstrip())] for x in extra if x.strip()), "")
        args = {
            "start_line": start,
            "end_line": end + len(extra),
            "new_content": "".join(s.new) + indent + placeholder_for(path) + "\n",
            "expected": "".join(s.old + extra),
        }
        yield Case(
            "edit_region",
            "placeholder",
            pair,
            [[_call(0, "edit_region", path=path, **args)]],
            None,
            (start, end + len(extra)),
            False,
        )


def _multi_cases(
    pair: Pair, path: str, all_hunks: list[Hunk], rng: random.Random
) -> Iterator[Case]:
    stretches: list[Stretch] = []
    for h in all_hunks:
        s = stretch(pair, h)
        if s is None or any(s.top < o.bottom + 1 and o.top < s.bottom + 1 for o in stretches):
            continue
        stretches.append(s)
        if len(stretches) == 4:
            break
    if len(stretches) < 2:
        return
    stretches.sort(key=lambda s: s.top)
    expected = apply_hunks(pair, [s.hunk for s in stretches])
    target = (stretches[0].top + 1, stretches[-1].bottom)
    total = len(split(pair.before))
    edits = [
        {"path": path, **_region_args(s, s.top + 1, s.bottom, expected=True)} for s in stretches
    ]
    yield Case(
        "multi_edit", "clean", pair, [[_call(0, "multi_edit", edits=edits)]], expected, target, True
    )
    shift = rng.choice((-2, -1, 1, 2, 3))
    if all(s.top + 1 + shift >= 1 and s.bottom + shift <= total for s in stretches):
        shifted = [
            {"path": path, **_region_args(s, s.top + 1 + shift, s.bottom + shift, expected=True)}
            for s in stretches
        ]
        yield Case(
            "multi_edit",
            "off by N, with expected",
            pair,
            [[_call(0, "multi_edit", edits=shifted)]],
            expected,
            target,
            True,
        )
    # Two calls in one batch, both numbered in the file as read: the first
    # changes the line count above the second.
    first, second = stretches[0], stretches[-1]
    pair_expected = apply_hunks(pair, [first.hunk, second.hunk])
    calls = [
        _call(
            0,
            "edit_region",
            path=path,
            **_region_args(first, first.top + 1, first.bottom, expected=False),
        ),
        _call(
            1,
            "multi_edit",
            edits=[
                {
                    "path": path,
                    **_region_args(second, second.top + 1, second.bottom, expected=False),
                }
            ],
        ),
    ]
    yield Case(
        "multi_edit", "numbered before an earlier call", pair, [calls], pair_expected, target, True
    )
    calls = [
        _call(
            0,
            "edit_region",
            path=path,
            **_region_args(first, first.top + 1, first.bottom, expected=False),
        ),
        _call(
            1,
            "edit_region",
            path=path,
            **_region_args(second, second.top + 1, second.bottom, expected=False),
        ),
    ]
    yield Case(
        "edit_region", "numbered before an earlier call", pair, [calls], pair_expected, target, True
    )
    escaped = double_escaped(second.new, rng)
    if escaped is not None and len(second.old) >= 2 and "\\n" not in "".join(second.old):
        bad = [dict(e) for e in edits]
        bad[-1]["new_content"] = escaped
        yield Case(
            "multi_edit",
            "double-escaped",
            pair,
            [[_call(0, "multi_edit", edits=bad)]],
            None,
            (second.top + 1, second.bottom),
            False,
        )


def _write_cases(pair: Pair, path: str, rng: random.Random) -> Iterator[Case]:
    a, b = split(pair.before), split(pair.after)
    whole = (1, len(a))
    call = _call(0, "write_file", path=path, content=pair.after)
    yield Case("write_file", "clean", pair, [[call]], pair.after, whole, True)
    escaped = double_escaped(b, rng)
    if escaped is not None and "\\n" not in pair.before and len(a) >= 2:
        call = _call(0, "write_file", path=path, content=escaped)
        yield Case("write_file", "double-escaped", pair, [[call]], None, whole, False)
    # An unchanged stretch of five or more real lines, abbreviated.
    matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
    runs = [
        (i1, j1, i2 - i1)
        for tag, i1, i2, j1, j2 in matcher.get_opcodes()
        if tag == "equal" and i2 - i1 >= 6 and sum(1 for x in a[i1:i2] if x.strip()) >= 4
    ]
    if not runs:
        return
    i1, j1, n = rng.choice(runs)
    keep = 1
    indent = next((x[: len(x) - len(x.lstrip())] for x in a[i1 + keep : i1 + n] if x.strip()), "")
    content = [*b[: j1 + keep], indent + placeholder_for(path) + "\n", *b[j1 + n :]]
    call = _call(0, "write_file", path=path, content="".join(content))
    yield Case("write_file", "placeholder", pair, [[call]], None, (i1 + keep + 1, i1 + n), False)


# --- running ---------------------------------------------------------------------------


class Runner:
    """One real worker over a scratch project; each case starts from the pair's before text."""

    def __init__(self) -> None:
        from forj_py.config import load
        from forj_py.service import Worker
        from forj_py.store.journal import Journal
        from forj_py.tools import builtin_registry

        self._tmp = tempfile.TemporaryDirectory()
        base = Path(self._tmp.name)
        self.root = base / "project"
        self.root.mkdir()
        # Its own configuration (the defaults) and state: nothing of the user's.
        config = base / "config.toml"
        config.write_text("", encoding="utf-8")
        state = base / "state"
        state.mkdir()
        self.journal = Journal(state / "journal.sqlite3")
        loaded = load(self.root, user_file=str(config))
        # The registry the worker serves: tools imported on their first call.
        self.worker = Worker(self.root, loaded, builtin_registry(), self.journal, state)

    def close(self) -> None:
        self.journal.close()
        self._tmp.cleanup()

    def _batch(self, calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
        plan = self.worker.plan({"calls": calls})
        approved = [i["id"] for i in plan["items"] if i["disposition"] == "confirm"]
        result = self.worker.execute(
            {"batch_id": plan["batch_id"], "approved": approved}, lambda event: None
        )
        return list(result["results"])

    def run(self, case: Case) -> tuple[str, str]:
        """The outcome, and a note for cases that went wrong."""
        path = self.root / case.pair.filename
        path.write_bytes(case.pair.before.encode("utf-8"))
        (read,) = self._batch([_call(0, "read_file", path=case.pair.filename, end_line=1)])
        assert read["ok"], read
        errors = []
        for calls in case.batches:
            errors += [r["error"] for r in self._batch(calls) if not r["ok"]]
        now = path.read_bytes().decode("utf-8")
        if not errors:
            if case.expected is not None and now == case.expected:
                return "correct", ""
            return "wrong", _first_difference(case.expected or case.pair.before, now)
        if case.expected is not None and now == case.expected:
            return "correct", ""
        if now != case.pair.before and len(case.batches[0]) == 1:
            return "wrong", "refused, yet the file changed"
        if points_at(errors[-1], case.target):
            return "refused with pointer", ""
        return "refused without pointer", errors[-1]["message"][:300]


def _first_difference(want: str, got: str) -> str:
    diff = list(
        difflib.unified_diff(
            want.splitlines(), got.splitlines(), "meant", "written", n=0, lineterm=""
        )
    )
    return "\n".join(diff[:12])


def points_at(error: dict[str, Any], target: tuple[int, int]) -> bool:
    """Whether a refusal names lines of the stretch the model meant (or the problem itself)."""
    details = error.get("details") or {}
    lo, hi = target[0] - 1, target[1] + 1
    ranges: list[tuple[int, int]] = []
    for key in ("closest", "suggested"):
        if isinstance(details.get(key), dict):
            ranges.append((details[key]["start_line"], details[key]["end_line"]))
    for place in (details.get("matches") or []) + (details.get("also_alike") or []):
        ranges.append((place["start_line"], place["end_line"]))
    for line in details.get("dropped_lines") or []:
        ranges.append((line, line))
    if details.get("problem") == "double-escaped":
        return True
    return any(a <= hi and b >= lo for a, b in ranges)


def build(seed: int, *, history: int | None, stdlib: int, versions: bool) -> list[Case]:
    rng = random.Random(seed)
    # The oldest commits first: later history does not change the sample.
    pairs = history_pairs(limit=history)
    plain = stdlib_pairs(rng, stdlib)
    # Projects indented with tabs: the same files as such a project keeps them.
    pairs += plain + [tabbed(p) for p in plain[::2]]
    if versions:
        pairs += stdlib_version_pairs()
    cases = []
    for pair in pairs:
        cases.extend(cases_for(pair, rng))
    return cases


def run_all(cases: list[Case]) -> Tally:
    tally = Tally()
    runner = Runner()
    try:
        for case in cases:
            outcome, note = runner.run(case)
            bad = (
                outcome == "wrong"
                or (case.recoverable and outcome != "correct")
                or (case.noise in MISSED_MATCH and outcome != "refused with pointer")
            )
            tally.add(case, outcome, note if bad else "")
    finally:
        runner.close()
    return tally
