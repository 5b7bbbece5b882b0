"""A run as a Spec-Bench model-answer file, so Spec-Bench's own scripts read our runs.

Spec-Bench (hemingkx/Spec-Bench, `evaluation/eval.py` writes and `evaluation/speed.py` reads) keeps one JSON
line per question: {"question_id", "category", "answer_id", "model_id", "choices": [{"index", "turns",
"decoding_steps", "new_tokens", "wall_time", "accept_lengths"}], "tstamp"}, each list holding one entry per
turn except `accept_lengths`, the tokens each verification step emitted. Our records map onto it one turn per
request:

- `accept_lengths` = each step's `emitted`, so speed.py's "#Mean accepted tokens" (their mean over every
  step) is this project's token-weighted AL exactly;
- `new_tokens` = the output tokens and `wall_time` = the request's latency (send to last token), so speed.py's
  speedup (mean per-request tok/s over the baseline file's) is the ratio of the reports' tok/s/user, not of
  their aggregate tok/s, which counts overlapping requests once (they differ at C > 1). speed.py counts the
  baseline's tokens by re-tokenising its text less one BOS token, which for a tokenizer that adds no BOS (SmolLM2's)
  is one token short per request.
Failed requests are left out, as every metric leaves them out.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from specbench.analysis.metrics import method_label, ok_records, summarize_run
from specbench.records import read_records

Record = dict[str, Any]


def model_id(manifest: dict[str, Any]) -> str:
    """The name Spec-Bench files carry: target, method (with its variant options), budget and concurrency."""
    target = Path(str(manifest.get("target") or "model")).name.removesuffix(".gguf")
    return f"{target}-{method_label(manifest)}-L{manifest['budget']}-C{manifest['concurrency']}"


def answer(record: Record, run_id: str, model: str) -> dict[str, Any]:
    """One Spec-Bench answer line from one ok record."""
    steps = record["steps"]
    return {
        "question_id": record["question_id"],
        "category": record["category"],
        "answer_id": f"{run_id}:{record['question_id']}",
        "model_id": model,
        "choices": [{
            "index": 0,
            "turns": [record["output_text"]],
            "decoding_steps": [len(steps)],
            "new_tokens": [len(record["output_token_ids"])],
            "wall_time": [record["latency_s"]],
            "accept_lengths": [s["emitted"] for s in steps],
        }],
        "tstamp": record["t_end"],
    }


def write_model_answers(run_dir: str | Path, out: str | Path) -> tuple[Path, int]:
    """Write the run's ok records as a Spec-Bench model-answer JSONL file, sorted by question id as Spec-Bench's
    `reorg_answer_file` leaves them; returns the path and the number of answers."""
    summary = summarize_run(run_dir)           # checks the run directory, one line naming it when it is not one
    manifest = summary["manifest"]
    model = model_id(manifest)
    records = sorted(ok_records(read_records(Path(run_dir))), key=lambda r: str(r["question_id"]))
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", encoding="utf-8") as handle:
        for rec in records:
            handle.write(json.dumps(answer(rec, str(manifest["run_id"]), model), ensure_ascii=False) + "\n")
    return out, len(records)
