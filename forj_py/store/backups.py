"""Backups: a copy of every file before forj changes it.

:class:`Backups` keeps the copies under the user's state directory (outside
every project, so the model can neither list nor overwrite them), and
prunes old copies by age and total size.
"""

from __future__ import annotations

import errno
import hashlib
import os
import secrets
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from ..errors import ToolFailure
from ..protocol import ErrorKind, ErrorType
from ..safety.paths import SafePath

_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


@dataclass
class Backups:
    """Timestamped copies of files before they change, outside the project."""

    directory: Path
    max_age_seconds: float
    max_total_bytes: int

    @classmethod
    def for_project(
        cls, state_dir: Path, project_root: str, max_age_days: float, max_total_mb: float
    ) -> Backups:
        key = hashlib.sha256(project_root.encode("utf-8", "surrogateescape")).hexdigest()[:16]
        name = f"{Path(project_root).name or 'root'}-{key}"
        return cls(
            state_dir / "backups" / name,
            max_age_days * 86400,
            int(max_total_mb * 1024 * 1024),
        )

    def save(self, sp: SafePath, data: bytes) -> str:
        """Store ``data`` (the file's content before a change); return the copy's path."""
        stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
        target = self.directory / f"{stamp}-{secrets.token_hex(3)}" / sp.display.lstrip("/")
        try:
            target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_CLOEXEC, 0o600)
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
        except OSError as exc:
            raise ToolFailure(
                ErrorType.FILE,
                f"Could not back up {sp.display} before changing it ({exc.strerror}); "
                "nothing was changed",
                kind=ErrorKind.EXECUTION_FAILED,
                recovery=["Tell the user the backup directory is not writable", "Do not retry"],
                path=sp.display,
                errno=exc.errno or errno.EIO,
            ) from None
        return str(target)

    def prune(self) -> None:
        """Drop backups older than the age limit, then the oldest past the size limit."""
        if not self.directory.is_dir():
            return
        now = time.time()
        batches = sorted(p for p in self.directory.iterdir() if p.is_dir())
        sizes = []
        for batch in batches:
            try:
                age = now - batch.stat().st_mtime
            except OSError:
                continue
            if age > self.max_age_seconds:
                shutil.rmtree(batch, ignore_errors=True)
                continue
            size = sum(f.stat().st_size for f in batch.rglob("*") if f.is_file())
            sizes.append((batch, size))
        total = sum(size for _, size in sizes)
        for batch, size in sizes:  # oldest first
            if total <= self.max_total_bytes:
                break
            shutil.rmtree(batch, ignore_errors=True)
            total -= size
