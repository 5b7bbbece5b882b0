"""A run directory has one owner: a second claim refuses naming the holder, a killed holder's lock is taken over."""

import errno
import json
import os
import signal
import socket
import subprocess
import sys

import pytest

from specbench import run_lock
from specbench.errors import SpecbenchError
from specbench.run_lock import LOCK_FILE, RunLock


def test_a_second_lock_refuses_naming_the_directory_and_the_holder(tmp_path):
    first = RunLock(tmp_path)
    first.acquire()
    holder = json.loads((tmp_path / LOCK_FILE).read_text())
    assert (holder["pid"], holder["host"]) == (os.getpid(), socket.gethostname())
    with pytest.raises(SpecbenchError) as err:
        RunLock(tmp_path).acquire()
    msg = str(err.value)
    assert msg.startswith(f"{tmp_path} is in use by another run (pid {os.getpid()} on {socket.gethostname()}")
    assert "\n" not in msg
    first.release()
    assert not (tmp_path / LOCK_FILE).exists()
    second = RunLock(tmp_path)
    second.acquire()                                        # free again once released
    second.release()


def test_the_lock_of_a_killed_run_is_taken_over(tmp_path):
    """SIGKILL leaves the lock file behind, naming a dead pid; the kernel has dropped the flock itself."""
    code = ("import os, signal, sys; from pathlib import Path; from specbench.run_lock import RunLock; "
            "RunLock(Path(sys.argv[1])).acquire(); os.kill(os.getpid(), signal.SIGKILL)")
    res = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True)
    assert res.returncode == -signal.SIGKILL, res.stderr
    dead = json.loads((tmp_path / LOCK_FILE).read_text())["pid"]
    assert not run_lock.pid_alive(dead)
    lock = RunLock(tmp_path)
    lock.acquire()
    assert json.loads((tmp_path / LOCK_FILE).read_text())["pid"] == os.getpid()
    lock.release()


def test_without_flock_the_pid_and_host_in_the_file_decide(tmp_path, monkeypatch):
    def no_flock(fd, op):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(run_lock.fcntl, "flock", no_flock)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    stale = {"pid": int(dead.stdout), "host": socket.gethostname(), "since": "then", "command": "specbench run"}
    (tmp_path / LOCK_FILE).write_text(json.dumps(stale))
    lock = RunLock(tmp_path)
    lock.acquire()                                          # a dead pid on this host: stale
    with pytest.raises(SpecbenchError, match=f"pid {os.getpid()}"):
        RunLock(tmp_path).acquire()                         # a live one (ours) holds it
    lock.release()
    (tmp_path / LOCK_FILE).write_text(json.dumps({**stale, "host": "elsewhere"}))
    with pytest.raises(SpecbenchError, match="on elsewhere"):
        RunLock(tmp_path).acquire()                         # another host's pid cannot be checked: held
