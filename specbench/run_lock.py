"""An exclusive lock on a run directory, so two runs never append to one records file.

The lock is an `flock` on RUN_DIR/run.lock, taken without waiting and held by the process for the whole run.
The kernel drops it when the process ends, however it ends, so a killed run leaves no live lock behind: its
file, still naming the dead pid, is simply taken over. The file holds the holder's pid, host, start time and
command, which the refusal names. On a filesystem without `flock` the file alone decides: a holder that is
another live process, or one on another host, keeps the directory; a dead pid on this host is a stale lock.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import shlex
import socket
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from specbench.errors import SpecbenchError

LOCK_FILE = "run.lock"
_NO_FLOCK = (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL)


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid exists on this host."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:              # it exists, owned by another user
        return True
    return True


class RunLock:
    """The lock of one run directory: `acquire` refuses (SpecbenchError naming the directory and the holder)
    while another run holds it; `release` removes the lock file."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.path = run_dir / LOCK_FILE
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> None:
        """Take the lock; OSError when the directory cannot hold a lock file (the caller names the path)."""
        for _ in range(10):
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                self._lock(fd)
                # The file may have been removed by a holder releasing it between our open and our lock: then
                # we locked a file nobody else sees, and try again on the one now at the path.
                if self._is_current(fd):
                    self._fd = fd
                    self._write_holder()
                    return
            except BaseException:
                os.close(fd)
                raise
            os.close(fd)
        raise SpecbenchError(f"{self.run_dir}: could not take its lock {self.path} (other runs keep taking it)")

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            if self._is_current(fd):
                self.path.unlink()
        except OSError:
            pass
        os.close(fd)                      # closing drops the flock

    def _lock(self, fd: int) -> None:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise self._refusal(self._holder()) from None
        except OSError as err:
            if err.errno not in _NO_FLOCK:
                raise
            holder = self._holder()
            if holder and self._holder_alive(holder):
                raise self._refusal(holder) from None

    def _is_current(self, fd: int) -> bool:
        try:
            return os.stat(self.path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            return False

    @staticmethod
    def _holder_alive(holder: dict[str, Any]) -> bool:
        pid = holder.get("pid")
        if holder.get("host") != socket.gethostname():
            return True                   # another host's pid cannot be checked from here
        return isinstance(pid, int) and pid_alive(pid)

    def _holder(self) -> dict[str, Any]:
        try:
            holder = json.loads(self.path.read_text() or "{}")
        except (OSError, ValueError):
            return {}
        return holder if isinstance(holder, dict) else {}

    def _refusal(self, holder: dict[str, Any]) -> SpecbenchError:
        who = (f"pid {holder.get('pid')} on {holder.get('host')} since {holder.get('since')}: "
               f"{holder.get('command')}") if holder else "holder not yet recorded"
        return SpecbenchError(f"{self.run_dir} is in use by another run ({who}); wait for it to end or pass "
                              "another --out")

    def _write_holder(self) -> None:
        assert self._fd is not None
        info = {"pid": os.getpid(), "host": socket.gethostname(),
                "since": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                "command": shlex.join(["specbench", *sys.argv[1:]])}
        data = (json.dumps(info) + "\n").encode()
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, data, 0)
        os.fsync(self._fd)
