"""The ``diagnostics`` tool at the worker's boundary.

What Emacs answers is covered against a real Emacs and a real checker in
test-el/forj-diagnostics-test.el; here, what the worker does around the
question: no editor, an answer it cannot read, a path outside the project
(refused before the editor is asked).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from conftest import MakeWorker, call, run, write_tree


def _result(worker: Any, path: str) -> dict[str, Any]:
    _, reply = run(worker, [call("d1", "diagnostics", path=path)])
    result: dict[str, Any] = reply["results"][0]
    return result


def test_diagnostics_without_an_editor_says_so_and_what_to_do(
    make_worker: MakeWorker, project: Path
) -> None:
    write_tree(project, {"lib.py": "x = 1\n"})
    result = _result(make_worker(), "lib.py")
    assert result["ok"] is False
    assert "No Emacs is connected" in result["error"]["message"]
    assert result["error"]["recovery"]


def test_diagnostics_returns_what_the_editor_answers_for_the_canonical_path(
    make_worker: MakeWorker, project: Path
) -> None:
    write_tree(project, {"lib.py": "x = 1\n"})
    worker = make_worker()
    asked: list[tuple[str, dict[str, Any]]] = []

    def editor(method: str, body: dict[str, Any], timeout: float) -> Any:
        asked.append((method, body))
        return {
            "checker": "flymake",
            "diagnostics": [
                {"line": 1, "column": 0, "severity": "error", "message": "bad", "source": "x"}
            ],
            "note": "",
        }

    worker.runner.editor = editor
    plan, reply = run(worker, [call("d1", "diagnostics", path="lib.py")])
    # It only reads: it runs unasked, like read_file.
    assert plan["items"][0]["disposition"] == "execute"
    result = reply["results"][0]
    assert result["ok"] is True, result
    assert result["result"]["path"] == "lib.py"
    assert result["result"]["diagnostics"][0]["message"] == "bad"
    assert asked == [("diagnostics", {"path": str((project / "lib.py").resolve())})]


def test_diagnostics_answer_the_worker_cannot_read_is_an_error(
    make_worker: MakeWorker, project: Path
) -> None:
    write_tree(project, {"lib.py": "x = 1\n"})
    worker = make_worker()
    worker.runner.editor = lambda method, body, timeout: {"diagnostics": [{"line": "one"}]}
    result = _result(worker, "lib.py")
    assert result["ok"] is False
    assert "cannot read" in result["error"]["message"]


def test_attack_diagnostics_of_a_path_outside_the_project_never_reaches_the_editor(
    make_worker: MakeWorker, project: Path
) -> None:
    worker = make_worker()
    asked: list[Any] = []
    worker.runner.editor = lambda method, body, timeout: asked.append(body)
    for path in ("../outside.py", "/etc/passwd"):
        result = _result(worker, path)
        assert result["ok"] is False
    assert asked == []
