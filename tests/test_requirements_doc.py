"""Every test that docs/requirements.md names exists.

A row that cites a renamed or deleted test claims a proof the suite no
longer has.  The check reads the last cell of every table row (the tests
column) and resolves each backticked reference there:

- ``file.py::name`` and ``file.py::prefix_*``: a pytest test function in
  ``tests/file.py`` (a glob must match at least one);
- ``::name``: the same, in the file named last before it in the cell;
- ``file.py`` / ``file.el``: a test file in ``tests/`` / ``test-el/``;
- ``forj-test-...``: an ``ert-deftest`` somewhere in ``test-el/``.

Other backticked text in that cell (option names, commands) is prose.
"""

from __future__ import annotations

import ast
import fnmatch
import re
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DOC = REPO / "docs" / "requirements.md"

_PYTEST_REF = re.compile(r"^(?P<file>test_[A-Za-z0-9_]+\.py)?::(?P<name>[A-Za-z0-9_*\[\]-]+)$")
_PYTEST_FILE = re.compile(r"^test_[A-Za-z0-9_]+\.py$")
_ERT_FILE = re.compile(r"^[A-Za-z0-9_-]+-test\.el$")
_ERT_NAME = re.compile(r"^forj-test-[A-Za-z0-9-]+$")
# A shortened ERT name (`-broken-streams` after a full one): the check
# cannot tell which prefix was meant, so the doc spells names out.
_SHORTENED = re.compile(r"^-[a-z0-9][a-z0-9-]*$")
_ERT_DEFTEST = re.compile(r"\(ert-deftest\s+([^\s()]+)")


@dataclass
class Suite:
    """What the suite holds: pytest test functions per file, ERT tests and files."""

    pytest: dict[str, set[str]] = field(default_factory=dict)
    ert: set[str] = field(default_factory=set)
    ert_files: set[str] = field(default_factory=set)


def collect(tests_dir: Path, ert_dir: Path) -> Suite:
    suite = Suite()
    for path in sorted(tests_dir.glob("test_*.py")):
        names: set[str] = set()
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if node.name.startswith("test"):
                    names.add(node.name)
            elif isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
                names.update(
                    f"{node.name}::{item.name}"
                    for item in node.body
                    if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef))
                    and item.name.startswith("test")
                )
        suite.pytest[path.name] = names
    for path in sorted(ert_dir.glob("*.el")):
        suite.ert_files.add(path.name)
        suite.ert.update(_ERT_DEFTEST.findall(path.read_text(encoding="utf-8")))
    return suite


def _cells(line: str) -> list[str]:
    """A table row's cells; a ``|`` inside backticks does not split them."""
    cells, current, quoted = [], [], False
    for char in line.strip().strip("|"):
        if char == "`":
            quoted = not quoted
        if char == "|" and not quoted:
            cells.append("".join(current))
            current = []
        else:
            current.append(char)
    cells.append("".join(current))
    return [c.strip() for c in cells]


def _is_separator(cells: list[str]) -> bool:
    return all(re.fullmatch(r":?-{3,}:?", c) for c in cells)


def problems(doc: str, suite: Suite) -> list[str]:
    """One line per reference in a tests column that names nothing in the suite."""
    found: list[str] = []
    header = True
    for number, line in enumerate(doc.splitlines(), start=1):
        if not line.lstrip().startswith("|"):
            header = True  # the next table starts with its header row
            continue
        cells = _cells(line)
        if header or _is_separator(cells):
            header = False
            continue
        where = f"docs/requirements.md:{number}"
        current_file: str | None = None
        for ref in re.findall(r"`([^`]+)`", cells[-1]):
            match = _PYTEST_REF.match(ref)
            if match:
                current_file = match["file"] or current_file
                name = re.sub(r"\[.*\]$", "", match["name"])
                if current_file is None:
                    found.append(f"{where}: `{ref}` names no file before it")
                elif current_file not in suite.pytest:
                    found.append(f"{where}: tests/{current_file} does not exist (`{ref}`)")
                elif not fnmatch.filter(sorted(suite.pytest[current_file]), name):
                    found.append(f"{where}: no test {name} in tests/{current_file}")
            elif _PYTEST_FILE.match(ref):
                current_file = ref
                if not suite.pytest.get(ref):
                    found.append(f"{where}: tests/{ref} does not exist or holds no tests")
            elif _ERT_FILE.match(ref):
                if ref not in suite.ert_files:
                    found.append(f"{where}: test-el/{ref} does not exist")
            elif _ERT_NAME.match(ref):
                if ref not in suite.ert:
                    found.append(f"{where}: no ert-deftest {ref} in test-el/")
            elif _SHORTENED.match(ref):
                found.append(f"{where}: `{ref}` is a shortened name; write the whole test name")
    return found


def test_every_test_cited_in_the_requirements_exists() -> None:
    suite = collect(REPO / "tests", REPO / "test-el")
    missing = problems(DOC.read_text(encoding="utf-8"), suite)
    assert not missing, "docs/requirements.md cites tests that do not exist:\n" + "\n".join(missing)


def test_the_check_reads_the_doc_it_guards() -> None:
    """The doc's rows are found at all: a parser that saw nothing would pass anything."""
    suite = collect(REPO / "tests", REPO / "test-el")
    seen = Suite(pytest={name: set() for name in suite.pytest}, ert_files=suite.ert_files)
    cited = problems(DOC.read_text(encoding="utf-8"), seen)
    # With no tests known, every pytest and ERT name in the doc is reported.
    assert any("test_t_mode_01_disabled_mode_rejects_tool_calls" in p for p in cited)
    assert any("forj-test-chat-it-e2e-01-full-loop" in p for p in cited)
    assert len(cited) > 100


def test_each_kind_of_missing_reference_is_named(tmp_path: Path) -> None:
    tests_dir, ert_dir = tmp_path / "tests", tmp_path / "test-el"
    tests_dir.mkdir()
    ert_dir.mkdir()
    (tests_dir / "test_a.py").write_text(
        "def test_there():\n    assert 1\n\n\ndef test_glob_one():\n    assert 1\n\n\n"
        "class TestGroup:\n    def test_inside(self):\n        assert 1\n\n\n"
        "def helper_not_a_test():\n    pass\n",
        encoding="utf-8",
    )
    (ert_dir / "forj-a-test.el").write_text(
        "(ert-deftest forj-test-a-there () (should (= 1 1)))\n", encoding="utf-8"
    )
    doc = "\n".join(
        [
            "# Title",
            "",
            "| ID | requirement | test |",
            "| --- | --- | --- |",
            "| R-1 | fine, `not_a_ref` in the requirement | `test_a.py::test_there`, "
            "`::test_glob_*`, `::TestGroup::test_inside`, `test_a.py`, `forj-a-test.el`: "
            "`forj-test-a-there` (`--option`, `sort -k`) |",
            "| R-2 | gone | `test_a.py::test_gone`, `::test_nothing_*`, `::helper_not_a_test` |",
            "| R-3 | no file | `::test_there`, `test_b.py::test_x`, `test_c.py` |",
            "| R-4 | ERT | `forj-b-test.el`: `forj-test-a-gone`, `-there` |",
            "",
            "| requirement | test |",
            "| --- | --- |",
            "| `forj-test-a-gone` in a requirement cell is prose | `forj-test-a-there` |",
        ]
    )
    found = problems(doc, collect(tests_dir, ert_dir))
    assert found == [
        "docs/requirements.md:6: no test test_gone in tests/test_a.py",
        "docs/requirements.md:6: no test test_nothing_* in tests/test_a.py",
        "docs/requirements.md:6: no test helper_not_a_test in tests/test_a.py",
        "docs/requirements.md:7: `::test_there` names no file before it",
        "docs/requirements.md:7: tests/test_b.py does not exist (`test_b.py::test_x`)",
        "docs/requirements.md:7: tests/test_c.py does not exist or holds no tests",
        "docs/requirements.md:8: test-el/forj-b-test.el does not exist",
        "docs/requirements.md:8: no ert-deftest forj-test-a-gone in test-el/",
        "docs/requirements.md:8: `-there` is a shortened name; write the whole test name",
    ]
