"""A run directory owned by one run: locked, checked before the engine loads, and never losing a record.

`claimed` takes each directory's lock (`specbench.run_lock`) and checks it can take the run (a directory we can
write; records only when resuming; a torn last line set aside) before anything slow happens, and releases
the locks when the run ends. `RunDir.open` then writes a new run's manifest, or checks that a resumed run's
settings match. A resumed run changes nothing on disk until its first record arrives, which proves the
engine or server ready: only then is the manifest stamped `resumed`, and records of retried requests are
appended after the ones they supersede (`specbench.records`), so a run that stops early keeps every record.
"""

from __future__ import annotations

import sys
from contextlib import ExitStack, contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable, Iterator

from specbench.errors import SpecbenchError
from specbench.records import (MANIFEST_FILE, RECORDS_FILE, RecordWriter, compact_records, iter_finished_ids,
                               read_manifest, set_aside_torn_tail, write_manifest)
from specbench.run_lock import RunLock

# Settings that must match for `--resume` to append to an existing run. Of `options`, only those that change what
# a run measures count: a runner's `operational_options` (timeouts, retries, port, ...) may change.
RESUME_KEYS = ("method", "budget", "concurrency", "max_new_tokens", "temperature", "top_p", "top_k", "seed",
               "options", "dataset", "categories", "target", "dtype", "engine", "prefix_cache", "request_rate",
               "burstiness")


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def check_resumable(run_dir: Path, expected: dict[str, Any], operational: Iterable[str] = ()) -> None:
    """Refuse to append records made under different settings to an existing run."""
    old = read_manifest(run_dir)
    skip = set(operational)

    def key(meta: dict[str, Any], k: str) -> Any:
        value = meta.get(k)
        if k == "options" and isinstance(value, dict):
            return {o: v for o, v in value.items() if o not in skip}
        return value

    diff = [k for k in RESUME_KEYS if key(old, k) != key(expected, k)]
    if diff:
        shown = ", ".join(f"{k}: {key(old, k)!r} there, {key(expected, k)!r} now" for k in diff)
        raise SpecbenchError(f"{run_dir}: cannot resume, settings differ ({shown})")


def _has_records(path: Path) -> bool:
    rec = path / RECORDS_FILE
    return rec.is_file() and rec.stat().st_size > 0


class RunDir:
    """One run directory this process owns: its lock, manifest, record writer, and the ids it still needs."""

    def __init__(self, path: Path, resume: bool) -> None:
        self.path = path
        self.resume = resume
        self.meta: dict[str, Any] = {}
        self.todo: set[str] = set()
        self.writer: RecordWriter | None = None
        self._lock = RunLock(path)
        self._made: list[Path] = []              # folders this claim created, deepest first
        self._resumption: dict[str, Any] | None = None

    # -- before the engine loads ----------------------------------------------------------------------
    def claim(self, missing_ok: bool = False) -> None:
        """Lock the directory and check it can take the run. missing_ok: a directory with no manifest and no
        records starts fresh under --resume (a comparison interrupted before reaching that variant)."""
        path = self.path
        if path.exists() and not path.is_dir():
            raise SpecbenchError(f"{path}: a file is there, not a run directory; pass another --out")
        try:
            missing = [p for p in (path, *path.parents) if not p.exists()]
            path.mkdir(parents=True, exist_ok=True)
            self._made = missing
            self._lock.acquire()
        except OSError as err:
            self.release()
            raise SpecbenchError(f"{path}: cannot write a run directory there ({err.strerror or err})") from None
        try:
            self._check(missing_ok)
        except BaseException:
            self.release()
            raise

    def _check(self, missing_ok: bool) -> None:
        path = self.path
        if self.resume and not (path / MANIFEST_FILE).exists():
            if missing_ok and not _has_records(path):
                self.resume = False
            else:
                raise SpecbenchError(f"{path}: nothing to resume (no manifest.json)")
        elif not self.resume and _has_records(path):
            raise SpecbenchError(f"{path} already holds records: pass --resume to continue it, or another --out")
        if self.resume:
            try:
                note = set_aside_torn_tail(path)
            except OSError as err:
                raise SpecbenchError(f"{path / RECORDS_FILE}: cannot repair it ({err.strerror})") from None
            if note:
                print(note, file=sys.stderr)

    # -- once the runner has prepared the variant -------------------------------------------------------
    def open(self, meta: dict[str, Any], all_ids: list[str], operational: Iterable[str] = ()) -> None:
        """Write a new run's manifest, or check a resumed one's settings; work out the ids still to run."""
        if self.resume:
            check_resumable(self.path, meta, operational)
            self.meta = read_manifest(self.path)
            self._resumption = {"at": None, "command": meta.get("command"), "options": meta.get("options")}
        else:
            write_manifest(self.path, meta)
            self.meta = meta
        done = set(iter_finished_ids(self.path))
        self.todo = {i for i in all_ids if i not in done}
        try:
            self.writer = RecordWriter(self.path)
        except OSError as err:
            raise SpecbenchError(f"{self.path / RECORDS_FILE}: cannot append to it ({err.strerror})") from None

    def write(self, record: dict[str, Any]) -> None:
        """Append a record; the first of a resumed run stamps the manifest (the engine proved ready)."""
        assert self.writer is not None
        self.writer.write(record)
        self.todo.discard(record["question_id"])
        if self._resumption is not None:
            self._resumption["at"] = _now()
            meta = read_manifest(self.path)
            meta["resumed"] = self._resumption["at"]
            meta["resumptions"] = [*meta.get("resumptions", []), self._resumption]
            write_manifest(self.path, meta)
            self.meta, self._resumption = meta, None

    # -- at the end ------------------------------------------------------------------------------------
    def close_records(self) -> None:
        """Close the writer and drop records superseded by this run's retries from the file."""
        if self.writer is not None:
            self.writer.close()
            self.writer = None
            compact_records(self.path)

    def release(self) -> None:
        """Drop the lock; remove the folders this claim made if the run never wrote into them."""
        self._lock.release()
        for folder in self._made:
            try:
                folder.rmdir()
            except OSError:
                break


@contextmanager
def claimed(paths: list[Path], resume: bool, missing_ok: bool = False) -> Iterator[list[RunDir]]:
    """Claim every run directory (all or none), and release them all when the block ends."""
    with ExitStack() as stack:
        dirs = []
        for path in paths:
            d = RunDir(path, resume)
            d.claim(missing_ok)
            stack.callback(d.release)
            dirs.append(d)
        yield dirs
