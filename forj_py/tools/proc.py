"""``proc_list``: the user's processes, read from ``/proc``.

By default only forj's own processes (the worker and every command it
started) and those working inside the project (their current directory
under the project root) are listed: that is what the model needs to see
whether a server it started still runs, and nothing of the user's other
work.  ``scope: "user"`` lists every process of the user and is always
reviewed.  Processes of other users are never listed.

Command lines are redacted and sanitized before the filter sees them, so
a filter cannot probe a secret one character at a time: first by
argument position (:mod:`forj_py.safety.cmdline`: the value after
``--password``, ``--token``, ``-p``, ``sshpass -p``, the password of
``-u user:pass``, credential headers, ``KEY=value`` named like a secret,
URL passwords), then by shape (well-known token formats).  A process forj
did not start shows its program by name only (``python3``, not the path
it was run from), followed by its redacted arguments.  ``cpu``
is the share of one core used since the process started, in percent;
``mem_mb`` its resident memory.  No dependency: ``/proc`` has it all
(psutil would add a compiled package for a few files read here).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any, Literal

import regex
from pydantic import BaseModel, ConfigDict, Field, field_validator

from .. import errors
from ..output import redact, sanitize
from ..protocol import DenialReason
from ..safety.cmdline import redact_argv
from .registry import Tool, ToolContext

DEFAULT_LIMIT = 50  # a screenful: enough to find a runaway, little context spent
REGEX_TIMEOUT = 1.0
MAX_CMD_CHARS = 2000
_PROC = "/proc"


class ProcListArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    filter: str | None = Field(
        default=None,
        max_length=500,
        description="A regex the (redacted) command line must match, e.g. 'cargo|node'",
    )
    limit: int = Field(default=DEFAULT_LIMIT, ge=1, le=1000, description="At most this many rows")
    scope: Literal["project", "user"] = Field(
        default="project",
        description="'project': forj's own processes and those working inside the project; "
        "'user': every process of the user (always reviewed)",
    )

    @field_validator("filter")
    @classmethod
    def _compiles(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                regex.compile(value)
            except regex.error as exc:
                raise ValueError(f"filter is not a valid regex: {exc}") from None
        return value


@dataclass
class Proc:
    pid: int
    ppid: int
    uid: int
    cmd: str  # the name in brackets when there is no argv (kernel threads, zombies)
    argv: list[str] | None
    cwd: str | None
    cpu: float
    mem_mb: float


def _read(path: str) -> bytes | None:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return None


def _boot_uptime() -> float:
    data = _read(f"{_PROC}/uptime")
    return float(data.split()[0]) if data else time.monotonic()


def read_process(pid: int, uptime: float, tick: int, page: int) -> Proc | None:
    """One process from ``/proc/<pid>``; None when it is gone or not readable."""
    base = f"{_PROC}/{pid}"
    try:
        uid = os.stat(base).st_uid
    except OSError:
        return None
    stat = _read(f"{base}/stat")
    raw_cmd = _read(f"{base}/cmdline")
    if stat is None or raw_cmd is None:
        return None
    # The name in parentheses may hold spaces and parentheses: split after the last ')'.
    rest = stat[stat.rfind(b")") + 2 :].split()
    if len(rest) < 22:
        return None
    ppid = int(rest[1])
    cpu_seconds = (int(rest[11]) + int(rest[12])) / tick
    age = max(uptime - int(rest[19]) / tick, 1e-3)
    statm = _read(f"{base}/statm")
    rss = int(statm.split()[1]) * page if statm else 0
    argv: list[str] | None = None
    if raw_cmd:
        argv = [w.decode("utf-8", "replace") for w in raw_cmd.rstrip(b"\0").split(b"\0")]
        cmd = " ".join(argv)
    else:  # a kernel thread, or a zombie: its name only
        name = stat[stat.find(b"(") + 1 : stat.rfind(b")")].decode("utf-8", "replace")
        cmd = f"[{name}]"
    try:
        cwd: str | None = os.readlink(f"{base}/cwd")
    except OSError:
        cwd = None
    return Proc(pid, ppid, uid, cmd, argv, cwd, round(100 * cpu_seconds / age, 1), rss / (1 << 20))


def all_processes() -> list[Proc]:
    uptime = _boot_uptime()
    tick = os.sysconf("SC_CLK_TCK")
    page = os.sysconf("SC_PAGE_SIZE")
    found = []
    for name in os.listdir(_PROC):
        if name.isdigit():
            proc = read_process(int(name), uptime, tick, page)
            if proc is not None:
                found.append(proc)
    return found


def descendants(procs: list[Proc], root_pid: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for p in procs:
        children.setdefault(p.ppid, []).append(p.pid)
    seen = {root_pid}
    todo = [root_pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in seen:
                seen.add(child)
                todo.append(child)
    return seen


def shown_command(proc: Proc, own: bool) -> str:
    """``proc``'s command line as listed: redacted by position, then by shape.

    A process forj did not start shows its program by name only.
    """
    if proc.argv is None:
        text = proc.cmd
    else:
        words = redact_argv(proc.argv)
        if not own:
            words[0] = os.path.basename(words[0]) or words[0]
        text = " ".join(words)
    return sanitize(redact(text))[:MAX_CMD_CHARS]


def _inside(path: str | None, root: str) -> bool:
    if path is None:
        return False
    path = path.removesuffix(" (deleted)")
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


class ProcList(Tool[ProcListArgs]):
    name = "proc_list"
    description = (
        "List processes: {processes: [{pid, ppid, cmd, cpu, mem_mb, cwd, forj}], total, "
        "truncated}. By default forj's own (forj: 'worker' or 'command') and those working "
        "inside the project; scope 'user' lists all of the user's processes and is reviewed. "
        "Command lines are redacted; filter is a regex over them; at most limit (50) rows. "
        "cpu: percent of one core since the process started."
    )
    Args = ProcListArgs

    def summary(self, args: ProcListArgs) -> str:
        what = "all your processes" if args.scope == "user" else "forj's and the project's"
        return f"proc_list {what}" + (f" matching {args.filter!r}" if args.filter else "")

    def review_notes(self, args: ProcListArgs, ctx: ToolContext) -> list[str]:
        if args.scope == "user":
            return [
                "This call lists every process you run, outside the project too (their "
                "command lines redacted)."
            ]
        return []

    def preview(self, args: ProcListArgs, ctx: ToolContext) -> str | None:
        if args.scope != "user":
            return None
        shown = f" whose command line matches {args.filter!r}" if args.filter else ""
        return (
            f"Lists up to {args.limit} of your processes{shown}, outside the project too: "
            "pid, redacted command line, cpu, memory.\n"
        )

    def execute(self, args: ProcListArgs, ctx: ToolContext) -> Any:
        if args.scope == "user" and ctx.approved_preview is None:
            # The review note makes scope "user" a forced review; a call
            # that got here without one was not reviewed.
            raise errors.denied_by_policy(
                "proc_list with scope 'user' runs only after the user's review; nothing was listed",
                DenialReason.NOT_ALLOWLISTED,
            )
        pattern = regex.compile(args.filter) if args.filter else None
        me = os.getuid()
        root = ctx.sandbox.project_root
        procs = [p for p in all_processes() if p.uid == me]
        worker = os.getpid()
        ours = descendants(procs, worker)
        rows: list[dict[str, Any]] = []
        for p in sorted(procs, key=lambda p: (p.pid not in ours, p.pid)):
            inside = _inside(p.cwd, root)
            if args.scope == "project" and p.pid not in ours and not inside:
                continue
            cmd = shown_command(p, p.pid in ours)
            if pattern is not None:
                try:
                    if pattern.search(cmd, timeout=REGEX_TIMEOUT) is None:
                        continue
                except TimeoutError:
                    raise errors.bad_args(
                        f"the filter took more than {REGEX_TIMEOUT:g} s on one command line",
                        recovery=["Use a simpler regex (plain words joined with '|')"],
                    ) from None
            row: dict[str, Any] = {
                "pid": p.pid,
                "ppid": p.ppid,
                "cmd": cmd,
                "cpu": p.cpu,
                "mem_mb": round(p.mem_mb, 1),
            }
            if inside and p.cwd is not None:
                rel = os.path.relpath(p.cwd.removesuffix(" (deleted)"), root)
                row["cwd"] = "." if rel == os.curdir else rel
            if p.pid in ours:
                row["forj"] = "worker" if p.pid == worker else "command"
            rows.append(row)
        shown = rows[: args.limit]
        result: dict[str, Any] = {
            "processes": shown,
            "total": len(rows),
            "truncated": len(rows) > len(shown),
            "scope": args.scope,
        }
        if result["truncated"]:
            result["note"] = (
                f"{len(rows) - len(shown)} more processes matched; narrow the filter or raise limit"
            )
        return result
