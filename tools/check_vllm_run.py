"""Check the runs `make test-vllm` writes: assert what they must show instead of printing it.

    python tools/check_vllm_run.py RUN_DIR... [--same-al VLLM_RUN=REFERENCE_RUN]... [--al-tolerance 0.05]

Every RUN_DIR is a `specbench run` directory (manifest.json + records.jsonl), from vLLM or the reference engine.
The check fails (exit 1, each failure on its own line) unless:

- records are complete: one ok record per requested prompt (the manifest's n_requests), no duplicates, every
  output non-empty and within max_new_tokens, every drafting run's steps adding up to its output (the prefill's
  token plus each step's emitted tokens), and every vLLM run with speculation carrying complete engine counters
  that saw drafts;
- every vLLM run warmed up and flushed the server's prefix cache before measuring, and gave every ok record an
  entropy (so the entropy quartiles are filled) unless it ran with `--option entropy=off`;
- the runs are comparable: the same prompts (question ids and prompt token ids), target, dataset, output length
  and sampling settings;
- outputs are equal token for token where they must be: between greedy runs of an engine that verifies exactly
  (the reference engine on the CPU computes every verified token as vanilla decoding would, in bf16 as in fp32),
  and between any greedy runs in float32. Elsewhere (vLLM in bf16, whose batched verification may round a near
  tie the other way) the share of identical outputs is reported, not required;
- for each --same-al pair (a vLLM run and a reference run of the same drafter weights and budget), the AL from
  vLLM's /metrics counters is within --al-tolerance (relative) of the reference engine's AL from its records,
  both by the project's definition (emitted tokens / verification steps, every step counted;
  `runners.server_metrics.counters_summary`, `analysis.metrics.acceptance_length`).

Input that is not a run directory is one line naming the path (exit 2).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specbench.analysis.metrics import acceptance_length
from specbench.errors import SpecbenchError
from specbench.records import latest_per_request, read_all_records, read_manifest

SAME_SETTINGS = ("target", "dataset", "max_new_tokens", "temperature", "top_p", "top_k", "seed")


@dataclass
class Run:
    path: Path
    manifest: dict[str, Any]
    lines: list[dict[str, Any]]               # every record line, superseded ones (failed, then retried) included

    @property
    def records(self) -> list[dict[str, Any]]:
        """The last record of each request."""
        return latest_per_request(self.lines)

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def engine(self) -> str:
        return str(self.manifest.get("engine", "reference"))

    @property
    def greedy(self) -> bool:
        return float(self.manifest.get("temperature") or 0.0) <= 0.0

    @property
    def exact(self) -> bool:
        """Whether the engine computes each verified token exactly as vanilla decoding does."""
        return self.engine == "reference" and str(self.manifest.get("device", "cpu")).startswith("cpu")

    @property
    def speculative(self) -> bool:
        return self.manifest.get("method") != "vanilla"

    def outputs(self) -> dict[str, list[int]]:
        return {r["question_id"]: list(r["output_token_ids"]) for r in self.records}


@dataclass
class Report:
    failures: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def fail(self, line: str) -> None:
        self.failures.append(line)

    def note(self, line: str) -> None:
        self.notes.append(line)


def load(path: Path) -> Run:
    if not path.is_dir():
        raise SpecbenchError(f"{path}: not a run directory")
    return Run(path, read_manifest(path), read_all_records(path))


def check_records(run: Run, report: Report) -> None:
    """One ok record per requested prompt, outputs within the cap, steps adding up, counters complete."""
    ids = [r["question_id"] for r in run.records]
    expected = run.manifest.get("n_requests")
    if expected is not None and len(ids) != expected:
        report.fail(f"{run.name}: {len(ids)} of {expected} requests recorded")
    ok = [r["question_id"] for r in run.lines if r["status"] == "ok"]
    dupes = sorted({i for i in ok if ok.count(i) > 1})
    if dupes:
        report.fail(f"{run.name}: {len(dupes)} requests recorded ok more than once ({', '.join(dupes[:3])})")
    failed = [r for r in run.records if r["status"] != "ok"]
    if failed:
        report.fail(f"{run.name}: {len(failed)} failed records (first: {failed[0]['question_id']}: "
                    f"{failed[0].get('error', '')})")
    cap = run.manifest.get("max_new_tokens")
    for r in run.records:
        qid, out = r["question_id"], r["output_token_ids"]
        if r["status"] == "ok" and not out:
            report.fail(f"{run.name}: {qid}: empty output")
        if cap is not None and len(out) > cap:
            report.fail(f"{run.name}: {qid}: {len(out)} output tokens, more than max_new_tokens {cap}")
        if run.speculative and r["status"] == "ok":
            emitted = 1 + sum(s["emitted"] for s in r["steps"])
            if emitted != len(out):
                report.fail(f"{run.name}: {qid}: steps emit {emitted} tokens (prefill's included), "
                            f"the output holds {len(out)}")
    if run.engine == "vllm" and run.speculative:
        counters = run.manifest.get("engine_counters") or {}
        summary = counters.get("summary") or {}
        if not counters or counters.get("incomplete") or summary.get("al") is None:
            report.fail(f"{run.name}: vLLM's spec-decode counters are missing or incomplete "
                        "(manifest.json: engine_counters)")


def check_server_run(run: Run, report: Report) -> None:
    """What a vLLM run must show beside its records: a warm-up before measuring and the prefix cache flushed
    (manifest `warmup`, `cache_flushed`), and an entropy for every ok record unless the run turned it off
    (`--option entropy=off`), so the entropy quartiles are filled."""
    if run.engine != "vllm":
        return
    warmup = run.manifest.get("warmup") or {}
    if not warmup.get("requests") or not run.manifest.get("cache_flushed"):
        report.fail(f"{run.name}: no warm-up or no cache flush on record (manifest.json: warmup {warmup or None}, "
                    f"cache_flushed {run.manifest.get('cache_flushed')})")
    if (run.manifest.get("options") or {}).get("entropy") == "off":
        return
    missing = [r["question_id"] for r in run.records if r["status"] == "ok" and r.get("mean_entropy") is None]
    if missing:
        report.fail(f"{run.name}: {len(missing)} ok records without an entropy (first: {missing[0]}), so the "
                    "entropy quartiles are not filled")


def check_comparable(runs: list[Run], report: Report) -> None:
    """The same prompts and the settings that decide an output in every run as in the first reference run
    (specbench tokenises its prompts itself; a server returns the ids it used)."""
    base = next((r for r in runs if r.engine == "reference"), runs[0])
    for run in runs:
        if run is base:
            continue
        for key in SAME_SETTINGS:
            if run.manifest.get(key) != base.manifest.get(key):
                report.fail(f"{run.name}: {key} {run.manifest.get(key)!r}, {base.name} has "
                            f"{base.manifest.get(key)!r}: not comparable")
        if {r["question_id"] for r in run.records} != {r["question_id"] for r in base.records}:
            report.fail(f"{run.name}: other prompts than {base.name}")
        prompts = {r["question_id"]: r.get("prompt_token_ids") for r in base.records}
        differ = [r["question_id"] for r in run.records
                  if r.get("prompt_token_ids") and prompts.get(r["question_id"])
                  and r["prompt_token_ids"] != prompts[r["question_id"]]]
        if differ:
            report.fail(f"{run.name}: {len(differ)} prompts tokenised differently from {base.name} "
                        f"(first: {differ[0]})")


def must_match(a: Run, b: Run) -> bool:
    """Greedy outputs that must be equal: both from an exact engine, or both in float32."""
    if not (a.greedy and b.greedy):
        return False
    return (a.exact and b.exact) or a.manifest.get("dtype") == b.manifest.get("dtype") == "float32"


def first_difference(a: list[int], b: list[int]) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def check_outputs(runs: list[Run], report: Report) -> None:
    for i, a in enumerate(runs):
        for b in runs[i + 1:]:
            out_a, out_b = a.outputs(), b.outputs()
            shared = sorted(set(out_a) & set(out_b))
            same = [q for q in shared if out_a[q] == out_b[q]]
            if must_match(a, b):
                for q in shared:
                    if out_a[q] != out_b[q]:
                        at = first_difference(out_a[q], out_b[q])
                        report.fail(f"{a.name} vs {b.name}: {q} differs from token {at} "
                                    f"({out_a[q][at:at + 3]} vs {out_b[q][at:at + 3]}), where both must be "
                                    "vanilla's greedy output")
                if len(same) == len(shared):
                    report.note(f"outputs: {a.name} = {b.name} on all {len(shared)} prompts")
            elif a.greedy and b.greedy:
                report.note(f"outputs: {a.name} vs {b.name}: {len(same)}/{len(shared)} identical "
                            f"({', '.join(sorted({str(a.manifest.get('dtype')), str(b.manifest.get('dtype'))}))}, "
                            "not both from an exact engine: reported, not required)")


def records_al(run: Run) -> float | None:
    """AL from the run's records: emitted tokens / verification steps (token-weighted)."""
    return acceptance_length(run.records)["token_weighted"]


def check_al(vllm: Run, ref: Run, tolerance: float, report: Report) -> None:
    label = f"AL: {vllm.name} vs {ref.name}"
    if vllm.engine != "vllm":
        report.fail(f"{label}: {vllm.name} is not a vLLM run (engine {vllm.engine!r})")
        return
    if vllm.manifest.get("budget") != ref.manifest.get("budget"):
        report.fail(f"{label}: budgets differ (L={vllm.manifest.get('budget')} vs L={ref.manifest.get('budget')})")
    counted = ((vllm.manifest.get("engine_counters") or {}).get("summary") or {}).get("al")
    recorded = records_al(ref)
    if counted is None or recorded is None:
        report.fail(f"{label}: no AL to compare ({vllm.name} counters {counted}, {ref.name} records {recorded})")
        return
    off = counted / recorded - 1.0
    line = f"{label}: {counted:.3f} (vLLM counters) vs {recorded:.3f} (reference records), {off:+.1%}"
    if abs(off) > tolerance:
        report.fail(f"{line}: beyond {tolerance:.0%}")
    else:
        report.note(f"{line}, within {tolerance:.0%}")


def pair(text: str) -> tuple[Path, Path]:
    vllm, sep, ref = text.partition("=")
    if not sep or not vllm or not ref:
        raise argparse.ArgumentTypeError(f"--same-al {text!r}: give VLLM_RUN=REFERENCE_RUN")
    return Path(vllm), Path(ref)


def check(paths: list[Path], same_al: list[tuple[Path, Path]], tolerance: float) -> Report:
    """Every check over the given run directories (loaded once each)."""
    runs = {p.resolve(): load(p) for p in [*paths, *(x for ab in same_al for x in ab)]}
    listed = [runs[p.resolve()] for p in paths]
    report = Report()
    for run in listed:
        check_records(run, report)
        check_server_run(run, report)
    if listed:
        check_comparable(listed, report)
        check_outputs(listed, report)
    for v, r in same_al:
        check_al(runs[v.resolve()], runs[r.resolve()], tolerance, report)
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", type=Path, help="run directories")
    parser.add_argument("--same-al", action="append", type=pair, default=[], metavar="VLLM_RUN=REFERENCE_RUN",
                        help="a vLLM run and a reference run of the same drafter whose AL must agree")
    parser.add_argument("--al-tolerance", type=float, default=0.05, help="relative AL difference allowed")
    args = parser.parse_args(argv)
    try:
        report = check(args.runs, args.same_al, args.al_tolerance)
    except SpecbenchError as err:
        print(f"check_vllm_run: {err}", file=sys.stderr)
        return 2
    for line in report.notes:
        print(line)
    for line in report.failures:
        print(f"FAIL {line}", file=sys.stderr)
    if report.failures:
        print(f"check_vllm_run: {len(report.failures)} checks failed", file=sys.stderr)
        return 1
    print(f"check_vllm_run: {len(args.runs)} runs pass")
    return 0


if __name__ == "__main__":
    sys.exit(main())
