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
    t_start, t_end    float   wall-clock seconds (time.time()) when the request was admitted / finished
    ttft_s            float   admission to first output token (prefill included)
    latency_s         float   admission to last output token

Aggregate throughput is computed from the union of [t_start, t_end] intervals, which stays right for
interleaved comparisons and resumed runs.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Iterator

from specbench.errors import SpecbenchError

RECORDS_FILE = "records.jsonl"
MANIFEST_FILE = "manifest.json"

REQUIRED_KEYS = (
    "question_id", "category", "method", "status", "output_token_ids", "steps",
    "mean_entropy", "t_start", "t_end", "ttft_s", "latency_s",
)


def read_records(run_dir: str | Path) -> list[dict[str, Any]]:
    """All records of a run; a malformed line is an error naming file and line, never skipped."""
    path = Path(run_dir) / RECORDS_FILE
    if not path.exists():
        raise SpecbenchError(f"{path}: no records file (is {run_dir} a run directory?)")
    records = []
    for lineno, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as err:
            raise SpecbenchError(f"{path}:{lineno}: not valid JSON ({err.msg})") from None
        missing = [k for k in REQUIRED_KEYS if k not in rec]
        if missing:
            raise SpecbenchError(f"{path}:{lineno}: record lacks {', '.join(missing)}")
        records.append(rec)
    return records


def read_manifest(run_dir: str | Path) -> dict[str, Any]:
    path = Path(run_dir) / MANIFEST_FILE
    if not path.exists():
        raise SpecbenchError(f"{path}: no manifest (is {run_dir} a run directory?)")
    return json.loads(path.read_text())


class RecordWriter:
    """Appends records one line at a time and fsyncs, so an interrupted run keeps every finished record."""

    def __init__(self, run_dir: str | Path) -> None:
        self.path = Path(run_dir) / RECORDS_FILE
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fh = self.path.open("a")

    def write(self, record: dict[str, Any]) -> None:
        self._fh.write(json.dumps(record) + "\n")
        self._fh.flush()
        os.fsync(self._fh.fileno())

    def close(self) -> None:
        self._fh.close()

    def __enter__(self) -> "RecordWriter":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def iter_finished_ids(run_dir: str | Path) -> Iterator[str]:
    """Question ids already recorded as ok, so `--resume` skips them and retries failures."""
    path = Path(run_dir) / RECORDS_FILE
    if not path.exists():
        return
    for rec in read_records(run_dir):
        if rec["status"] == "ok":
            yield rec["question_id"]
