"""Per-request records: the one format every runner writes and every analysis reads.

A run directory holds `manifest.json` and `records.jsonl`. Each line of `records.jsonl` is one finished
(or failed) request:

    question_id       str     row id from the dataset
    category          str     row category
    method            str     method name (e.g. "ngram")
    concurrency       int     sequences in flight (C)
    status            str     "ok" or "failed"
    error             str     why it failed ("" when ok)
    prompt_token_ids  [int]
    output_token_ids  [int]   every output token, the one sampled from the prefill's logits included
    output_text       str
    steps             [obj]   one per target verification step of this sequence:
        emitted   int   tokens output by the step (accepted drafts + bonus, cut by EOS / max_new_tokens)
        accepted  int   drafted tokens accepted (depth of the accepted path); per-position hits use it
        drafted   int   drafted tokens verified (tree nodes without the root)
        budget    int   budget L: tokens the target processed for this sequence, root included
        depth     int   deepest drafted node in the verified tree (0 for vanilla)
        draft_ms  float the step's drafting time, ms (optional: the reference engine records it; in a batched
                        step the batch's, the same in every sequence's record)
        verify_ms float the step's verification forward of the target, ms (optional, as draft_ms)
        (other extra keys, e.g. draft levels or predicted acceptance, may follow; analysis ignores them)
    mean_entropy      float   mean target next-token entropy (nats) over generated positions
    entropy_source    str     optional (server engines): "exact" (the server gave it) or "top-20 logprobs"
                              (estimated, runners/server_entropy.py); null when there is none
    entropy_estimate  float   optional: the top-20 estimate where the exact value is known too (specbench serve)
    t_start, t_end    float   wall-clock seconds (time.time()) when the request was admitted / finished
    ttft_s            float   admission to first output token (prefill included)
    latency_s         float   admission to last output token
    itl_s             [float] optional (server engines): seconds between consecutive stream chunks carrying output

Aggregate throughput is computed from the union of [t_start, t_end] intervals, which stays right for
interleaved comparisons and resumed runs.

Durability. A record is appended with one `write` of the whole line and fsynced, so a crash leaves at most the
last line torn (cut short, without its newline). Readers ignore a torn last line (saying so once) and `--resume`
moves it to `records.jsonl.torn`; a bad line anywhere else is an error naming file and line. A retried request
appends its new record after the failed one, so no record is removed before its replacement is written: the LAST
record of a question id is the one that counts (`read_records` returns only those), and a finished run rewrites
the file without the superseded lines (`compact_records`, an atomic replace).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any, Iterator

from specbench.errors import SpecbenchError

RECORDS_FILE = "records.jsonl"
TORN_FILE = "records.jsonl.torn"
MANIFEST_FILE = "manifest.json"

REQUIRED_KEYS = (
    "question_id", "category", "method", "status", "output_token_ids", "steps",
    "mean_entropy", "t_start", "t_end", "ttft_s", "latency_s",
)

_torn_reported: set[Path] = set()        # records files whose torn tail this process has already reported


def _split(data: bytes) -> tuple[list[bytes], bytes]:
    """The complete lines of a records file and what follows its last newline (empty when it ends in one)."""
    body, newline, tail = data.rpartition(b"\n")
    return (body.split(b"\n") if newline else []), tail


def _parse(path: Path, lineno: int, line: bytes) -> dict[str, Any]:
    try:
        rec = json.loads(line.decode("utf-8"))
    except UnicodeDecodeError:
        raise SpecbenchError(f"{path}:{lineno}: not valid UTF-8") from None
    except json.JSONDecodeError as err:
        raise SpecbenchError(f"{path}:{lineno}: not valid JSON ({err.msg})") from None
    if not isinstance(rec, dict):
        raise SpecbenchError(f"{path}:{lineno}: not a JSON object")
    missing = [k for k in REQUIRED_KEYS if k not in rec]
    if missing:
        raise SpecbenchError(f"{path}:{lineno}: record lacks {', '.join(missing)}")
    return rec


def _complete_record(tail: bytes) -> bool:
    """A last line that lacks only its newline (the write got every byte but that one)."""
    try:
        rec = json.loads(tail.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        return False
    return isinstance(rec, dict) and all(k in rec for k in REQUIRED_KEYS)


def read_all_records(run_dir: str | Path) -> list[dict[str, Any]]:
    """Every record line of a run in file order, superseded ones included; a torn last line is left out (and
    reported once), any other malformed line is an error naming file and line, never skipped."""
    path = Path(run_dir) / RECORDS_FILE
    if not path.exists():
        raise SpecbenchError(f"{path}: no records file (is {run_dir} a run directory?)")
    try:
        data = path.read_bytes()
    except OSError as err:
        raise SpecbenchError(f"{path}: cannot read it ({err.strerror})") from None
    lines, tail = _split(data)
    records = [_parse(path, n, line) for n, line in enumerate(lines, 1) if line.strip()]
    if tail.strip():
        if _complete_record(tail):
            records.append(_parse(path, len(lines) + 1, tail))
        elif path not in _torn_reported:
            _torn_reported.add(path)
            print(f"{path}:{len(lines) + 1}: last line is torn (a write cut short by a crash), left out; "
                  f"`--resume` moves it to {TORN_FILE} and reruns that request", file=sys.stderr)
    return records


def latest_per_request(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The last record of each question id (a retry supersedes the failed record before it), in the order those
    last records were written."""
    last: dict[str, dict[str, Any]] = {}
    for rec in records:
        last.pop(rec["question_id"], None)
        last[rec["question_id"]] = rec
    return list(last.values())


def read_records(run_dir: str | Path) -> list[dict[str, Any]]:
    """The records of a run: one per request, its last (see `read_all_records` for what is refused)."""
    return latest_per_request(read_all_records(run_dir))


def read_manifest(run_dir: str | Path) -> dict[str, Any]:
    path = Path(run_dir) / MANIFEST_FILE
    if not path.exists():
        raise SpecbenchError(f"{path}: no manifest (is {run_dir} a run directory?)")
    try:
        return json.loads(path.read_text())
    except OSError as err:
        raise SpecbenchError(f"{path}: cannot read it ({err.strerror})") from None
    except ValueError as err:                # JSONDecodeError and UnicodeDecodeError
        raise SpecbenchError(f"{path}: not valid JSON ({err})") from None


def _replace_file(path: Path, data: bytes) -> None:
    """Write `data` to `path` atomically: a crash leaves the old file or the new one, never half of either."""
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def write_manifest(run_dir: str | Path, meta: dict[str, Any]) -> None:
    """Write a run's manifest atomically."""
    _replace_file(Path(run_dir) / MANIFEST_FILE, (json.dumps(meta, indent=2) + "\n").encode())


def set_aside_torn_tail(run_dir: str | Path) -> str | None:
    """Make the records file end with a complete line before records are appended to it.

    A torn last line is appended to `records.jsonl.torn` (kept for inspection) and cut from the records file;
    a complete record that lacks only its newline gets one. Returns a one-line note of what was done, or None."""
    path = Path(run_dir) / RECORDS_FILE
    if not path.exists():
        return None
    data = path.read_bytes()
    lines, tail = _split(data)
    if not tail:
        return None
    if _complete_record(tail):
        with path.open("ab") as fh:
            fh.write(b"\n")
            os.fsync(fh.fileno())
        return None
    torn = path.with_name(TORN_FILE)
    with torn.open("ab") as fh:
        fh.write(tail + b"\n")
        os.fsync(fh.fileno())
    with path.open("r+b") as fh:
        fh.truncate(len(data) - len(tail))
        os.fsync(fh.fileno())
    return (f"{path}:{len(lines) + 1}: torn last line ({len(tail)} bytes, a write cut short by a crash) moved to "
            f"{torn}; its request runs again")


def compact_records(run_dir: str | Path) -> int:
    """Rewrite the records file without superseded records (atomically); returns how many lines were dropped."""
    path = Path(run_dir) / RECORDS_FILE
    if not path.exists():
        return 0
    every = read_all_records(run_dir)
    kept = latest_per_request(every)
    if len(kept) == len(every):
        return 0
    _replace_file(path, "".join(json.dumps(r) + "\n" for r in kept).encode())
    return len(every) - len(kept)


class RecordWriter:
    """Appends each record with one `write` of its whole line and fsyncs, so an interrupted run keeps every
    finished record and a crash tears at most the line being written."""

    def __init__(self, run_dir: str | Path) -> None:
        self.path = Path(run_dir) / RECORDS_FILE
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def write(self, record: dict[str, Any]) -> None:
        data = memoryview((json.dumps(record) + "\n").encode())
        while data:                          # a regular file takes the whole line in one write; loop if not
            data = data[os.write(self._fd, data):]
        os.fsync(self._fd)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> "RecordWriter":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def iter_finished_ids(run_dir: str | Path) -> Iterator[str]:
    """Question ids whose last record is ok, so `--resume` skips them and retries the rest."""
    path = Path(run_dir) / RECORDS_FILE
    if not path.exists():
        return
    for rec in read_records(run_dir):
        if rec["status"] == "ok":
            yield rec["question_id"]
