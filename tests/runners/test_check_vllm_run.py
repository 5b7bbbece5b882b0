"""tools/check_vllm_run.py, the assertions behind `make test-vllm`, on synthetic run directories shaped like the
ones that target writes: a consistent set passes, and each way a run can be wrong fails it."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from typing import Any, Callable

import pytest

TOOL = Path(__file__).resolve().parents[2] / "tools" / "check_vllm_run.py"
_spec = importlib.util.spec_from_file_location("check_vllm_run", TOOL)
check_vllm_run = sys.modules.setdefault("check_vllm_run", importlib.util.module_from_spec(_spec))
_spec.loader.exec_module(check_vllm_run)

PROMPTS = {"q1": [1, 2, 3], "q2": [4, 5, 6, 7], "q3": [8, 9]}
EAGLE_ACCEPTED = [1, 0]                  # the eagle runs' accepted drafts, step after step
GREEDY = {"q1": [10, 11, 12, 13, 14, 15], "q2": [20, 21, 22, 23], "q3": [30, 31, 32, 33, 34, 35, 36, 37]}
COMMON = dict(dataset="prompt-enhancement", target="smollm2-135m", max_new_tokens=8, temperature=0.0, top_p=1.0,
              top_k=0, seed=0, limit=3, n_requests=3, budget=5)


def chain_steps(n_out: int, accepted: list[int], budget: int = 5) -> list[dict[str, int]]:
    """Steps of a chain of L - 1 drafts accepting `accepted[i]` at step i (cycled), cut to the output."""
    steps, left, i = [], n_out - 1, 0
    while left > 0:
        a = accepted[i % len(accepted)]
        emitted = min(a + 1, left)
        steps.append({"emitted": emitted, "accepted": a, "drafted": budget - 1, "budget": budget,
                      "depth": budget - 1})
        left -= emitted
        i += 1
    return steps


def write_runs(synth, tweak: Callable[[str, dict[str, Any], list[dict[str, Any]]], None] = lambda *a: None,
               ) -> dict[str, Path]:
    """The five runs `make test-vllm` writes; `tweak(name, manifest, records)` edits one before it is written."""
    specs = {
        "vllm-ngram": dict(engine="vllm", method="ngram", dtype="bfloat16", device="server launched by specbench",
                           accepted=[3, 1]),
        "vllm-eagle3": dict(engine="vllm", method="eagle3", dtype="bfloat16", device="server launched by specbench",
                            accepted=EAGLE_ACCEPTED),
        "reference-ngram": dict(engine="reference", method="ngram", dtype="bfloat16", device="cpu: x", accepted=[2, 1]),
        "reference-eagle4-chain": dict(engine="reference", method="eagle4-chain", dtype="bfloat16", device="cpu: x",
                                       accepted=EAGLE_ACCEPTED),
        "reference-eagle4-chain-as-exported": dict(engine="reference", method="eagle4-chain", dtype="bfloat16",
                                                   device="cpu: x", accepted=EAGLE_ACCEPTED),
    }
    paths = {}
    for name, spec in specs.items():
        accepted = spec.pop("accepted")
        records = []
        for qid, out in GREEDY.items():
            rec = synth.record(qid, chain_steps(len(out), accepted), method=spec["method"])
            rec.update(prompt_token_ids=list(PROMPTS[qid]), output_token_ids=list(out))
            records.append(rec)
        manifest = {**COMMON, **spec}
        if spec["engine"] == "vllm":
            steps = [s for r in records for s in r["steps"]]
            acc = sum(s["accepted"] for s in steps)
            manifest["engine_counters"] = {"counters": {"num_drafts": len(steps), "num_accepted_tokens": acc},
                                           "summary": {"al": sum(s["emitted"] for s in steps) / len(steps)},
                                           "incomplete": False}
            manifest.update(warmup={"requests": 2, "failed": 0, "flushed_after": True}, cache_flushed=True)
        tweak(name, manifest, records)
        paths[name] = synth.run(name, records, **manifest)
    return paths


def steps_al(accepted: list[int]) -> float:
    steps = [s for out in GREEDY.values() for s in chain_steps(len(out), accepted)]
    return sum(s["emitted"] for s in steps) / len(steps)


EAGLE_AL = steps_al(EAGLE_ACCEPTED)


def run_check(paths: dict[str, Path], capsys, al_pair=("vllm-eagle3", "reference-eagle4-chain-as-exported"),
              extra: tuple[str, ...] = ()) -> tuple[int, str, str]:
    argv = [str(p) for p in paths.values()] + [*extra]
    if al_pair:
        argv += ["--same-al", f"{paths[al_pair[0]]}={paths[al_pair[1]]}"]
    code = check_vllm_run.main(argv)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_a_consistent_set_of_runs_passes_and_says_what_it_checked(synth, capsys):
    code, out, err = run_check(write_runs(synth), capsys)
    assert code == 0, err
    assert f"AL: vllm-eagle3 vs reference-eagle4-chain-as-exported: {EAGLE_AL:.3f} (vLLM counters) vs " \
           f"{EAGLE_AL:.3f} (reference records), +0.0%, within 5%" in out
    assert "outputs: reference-ngram = reference-eagle4-chain on all 3 prompts" in out
    assert "outputs: vllm-ngram vs reference-ngram: 3/3 identical (bfloat16, not both from an exact engine" in out
    assert "5 runs pass" in out


def test_a_failed_request_retried_ok_counts_once(synth, capsys):
    """A failed record followed by its retry's ok record (as --resume writes them) is complete."""
    def retried(manifest, records):
        records.insert(0, {**records[0], "status": "failed", "error": "HTTP 429", "output_token_ids": []})

    code, out, err = run_check(write_runs(synth, edit("vllm-ngram", retried)), capsys)
    assert code == 0, err


def set_output(run: str, qid: str, tokens: list[int]):
    def tweak(name, manifest, records):
        if name == run:
            rec = next(r for r in records if r["question_id"] == qid)
            rec["output_token_ids"] = tokens
            rec["steps"] = chain_steps(len(tokens), [1])
    return tweak


def edit(run: str, fn: Callable[[dict[str, Any], list[dict[str, Any]]], Any]):
    def tweak(name, manifest, records):
        if name == run:
            fn(manifest, records)
    return tweak


def drop_last(manifest, records):
    records.pop()


def fail_first(manifest, records):
    records[0].update(status="failed", error="HTTP 500")


def duplicate_first(manifest, records):
    records.append(json.loads(json.dumps(records[0])))


def break_steps(manifest, records):
    records[0]["steps"] = records[0]["steps"][:-1]


def incomplete_counters(manifest, records):
    manifest["engine_counters"]["incomplete"] = True


def other_prompt(manifest, records):
    records[1]["prompt_token_ids"] = [4, 5, 6, 99]


def longer_outputs(manifest, records):
    manifest["max_new_tokens"] = 16


def too_long(manifest, records):
    records[2]["output_token_ids"] = list(range(9))
    records[2]["steps"] = chain_steps(9, [1])


def higher_counter_al(manifest, records):
    manifest["engine_counters"]["summary"]["al"] *= 1.08


def no_warmup(manifest, records):
    manifest["warmup"] = {"requests": 0, "failed": 0, "flushed_after": False}


def no_entropy(manifest, records):
    records[0]["mean_entropy"] = None


@pytest.mark.parametrize("tweak, message", [
    (set_output("reference-eagle4-chain", "q2", [20, 21, 29, 23]),
     "reference-ngram vs reference-eagle4-chain: q2 differs from token 2 ([22, 23] vs [29, 23])"),
    (edit("reference-ngram", drop_last), "reference-ngram: 2 of 3 requests recorded"),
    (edit("vllm-ngram", fail_first), "vllm-ngram: 1 failed records (first: q1: HTTP 500)"),
    (edit("vllm-eagle3", duplicate_first), "vllm-eagle3: 1 requests recorded ok more than once (q1)"),
    (edit("reference-eagle4-chain", break_steps), "reference-eagle4-chain: q1: steps emit"),
    (edit("vllm-eagle3", incomplete_counters), "vllm-eagle3: vLLM's spec-decode counters are missing or incomplete"),
    (edit("vllm-ngram", other_prompt), "vllm-ngram: 1 prompts tokenised differently from reference-ngram"),
    (edit("vllm-eagle3", longer_outputs), "vllm-eagle3: max_new_tokens 16, reference-ngram has 8"),
    (edit("vllm-ngram", too_long), "vllm-ngram: q3: 9 output tokens, more than max_new_tokens 8"),
    (edit("vllm-eagle3", higher_counter_al), "+8.0%: beyond 5%"),
    (edit("vllm-ngram", no_warmup), "vllm-ngram: no warm-up or no cache flush on record"),
    (edit("vllm-eagle3", no_entropy), "vllm-eagle3: 1 ok records without an entropy (first: q1)"),
], ids=["reference-outputs-differ", "missing-record", "failed-record", "duplicate-record", "steps-do-not-add-up",
        "incomplete-counters", "other-prompt-tokens", "other-settings", "output-past-the-cap", "al-apart",
        "no-warm-up", "no-entropy"])
def test_each_fault_fails_the_check_with_a_line_naming_it(synth, capsys, tweak, message):
    code, out, err = run_check(write_runs(synth, tweak), capsys)
    assert code == 1
    assert message in err, err


def test_vllm_in_bf16_may_differ_from_the_reference_but_not_in_float32(synth, capsys, tmp_path):
    """A near tie that vLLM's bf16 verification rounds the other way is reported; in float32 it fails."""
    code, out, err = run_check(write_runs(synth, set_output("vllm-ngram", "q1", [10, 11, 19, 13, 14, 15])), capsys)
    assert code == 0, err
    assert "outputs: vllm-ngram vs reference-ngram: 2/3 identical (bfloat16, not both from an exact engine" in out

    def fp32(name, manifest, records):
        manifest["dtype"] = "float32"
        set_output("vllm-ngram", "q1", [10, 11, 19, 13, 14, 15])(name, manifest, records)

    synth32 = type(synth)(step=synth.step, record=synth.record,
                          run=lambda run_id, records, **m: synth.run("fp32-" + run_id, records, **m))
    code, out, err = run_check(write_runs(synth32, fp32), capsys,
                               al_pair=("vllm-eagle3", "reference-eagle4-chain-as-exported"))
    assert code == 1
    assert "fp32-vllm-ngram vs fp32-reference-ngram: q1 differs from token 2" in err


def test_an_al_within_tolerance_passes_and_a_looser_tolerance_is_honoured(synth, capsys):
    paths = write_runs(synth, edit("vllm-eagle3", lambda m, r: m["engine_counters"]["summary"].update(al=EAGLE_AL * 1.04)))
    code, out, err = run_check(paths, capsys)
    assert code == 0 and "+4.0%, within 5%" in out, err
    code, out, err = run_check(paths, capsys, extra=("--al-tolerance", "0.03"))
    assert code == 1 and "beyond 3%" in err


def test_a_path_that_is_not_a_run_directory_is_one_line(synth, capsys, tmp_path):
    paths = write_runs(synth)
    paths["missing"] = tmp_path / "nowhere"
    code, out, err = run_check(paths, capsys)
    assert code == 2
    assert err.strip() == f"check_vllm_run: {tmp_path / 'nowhere'}: not a run directory"
