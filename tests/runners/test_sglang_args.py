"""Every SGLang launch command specbench builds, fed through SGLang 0.5.23's own argument parser and speculative
checks (tests/runners/sglang_args_check.py, run with the Python of a venv that has sglang): every method at every
budget L in 2..16 with tensor parallel 1 and 4 must be accepted and resolve to budget L (eagle4-harness: to the
tree shape compiled from a cost table, at concurrency 1 and 8), and a misspelled flag or an invalid speculative
config must be refused. `make test-sglang-args` builds the venv (/tmp/sglang-venv) and runs
this file; without it (or with SGLANG_PYTHON pointing at no usable one) the tests skip and say why.

The drafters are config-only folders in the published layouts (EAGLE-3, DFlash, DFlash2, DSpark): SGLang's checks
read a draft's config.json, never its weights."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from specbench.runners.sglang import METHODS, launch_command, tree_shape
from specbench.runners.harness_policy import sglang_policy, sglang_shape
from specbench.runners.sglang_launch import ENGINE_VERSION, HARNESS, METHOD_ALGORITHM

SGLANG_PYTHON = Path(os.environ.get("SGLANG_PYTHON", "/tmp/sglang-venv/bin/python"))
CHECKER = Path(__file__).with_name("sglang_args_check.py")
BUDGETS = range(2, 17)
TPS = (1, 4)

LLAMA = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
         "num_key_value_heads": 2, "vocab_size": 1000, "max_position_embeddings": 4096, "rms_norm_eps": 1e-5,
         "torch_dtype": "bfloat16"}
DFLASH = {**LLAMA, "model_type": "qwen3", "num_hidden_layers": 1, "num_target_layers": 4, "block_size": 16,
          "dflash_config": {"mask_token_id": 999, "target_layer_ids": [1, 2]}}
CONFIGS = {
    "target": {**LLAMA, "architectures": ["LlamaForCausalLM"], "num_hidden_layers": 4},
    "eagle3": {**LLAMA, "architectures": ["LlamaForCausalLMEagle3"], "num_hidden_layers": 1, "draft_vocab_size": 1000},
    "dflash": {**DFLASH, "architectures": ["DFlashDraftModel"]},
    "dflash2": {**DFLASH, "architectures": ["DFlash2DraftModel"],
                "dflash_config": {**DFLASH["dflash_config"], "selector_rank": 8, "selector_top_k": 4}},
    # a DSpark draft trained with gamma 7: budgets other than 8 are run with another gamma, as SGLang allows
    "dspark": {**DFLASH, "architectures": ["DSparkDraftModel"],
               "dflash_config": {**DFLASH["dflash_config"], "block_size": 7, "markov_rank": 8,
                                 "markov_head_type": "vanilla"}},
}
DRAFTER = {"eagle3": "eagle3", "eagle4-chain": "eagle3", "eagle4-tree": "eagle3", "eagle4-harness": "eagle3",
           "dflash": "dflash", "dflash2": "dflash2", "dspark": "dspark"}


@pytest.fixture(scope="module")
def sglang():
    """Run commands through the checker with the SGLang venv's Python: a list of results, one per command."""
    if not SGLANG_PYTHON.exists():
        pytest.skip(f"no SGLang venv at {SGLANG_PYTHON} (`make test-sglang-args` builds one; SGLANG_PYTHON=PATH "
                    "names another)")
    probe = subprocess.run([str(SGLANG_PYTHON), "-c", "import sglang, sglang.srt.arg_groups.speculative_hook; "
                            "print(sglang.__version__)"], capture_output=True, text=True, timeout=600)
    if probe.returncode != 0:
        why = (probe.stderr.strip().splitlines() or ["?"])[-1]
        pytest.skip(f"sglang is not importable with {SGLANG_PYTHON}: {why}")
    if probe.stdout.split()[-1:] != [ENGINE_VERSION]:
        pytest.skip(f"{SGLANG_PYTHON} has sglang {probe.stdout.strip()}, these flags follow {ENGINE_VERSION}")

    def run(commands: list[dict[str, Any]]) -> list[dict[str, Any]]:
        proc = subprocess.run([str(SGLANG_PYTHON), str(CHECKER)], input=json.dumps(commands), capture_output=True,
                              text=True, timeout=1800)
        assert proc.returncode == 0, proc.stderr[-3000:]
        return json.loads(proc.stdout)

    return run


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("sglang-checkpoints")
    for name, config in CONFIGS.items():
        (root / name).mkdir()
        (root / name / "config.json").write_text(json.dumps(config))
    return {name: str(root / name) for name in CONFIGS} | {"sps": str(root / "dspark_sps.json")}


def command(method: str, budget: int, tp: int, ck: dict[str, str], shape: Any = None) -> dict[str, Any]:
    """The launch command as the checker takes it: argv after any leading `env K=V`, and that environment."""
    drafter = ck[DRAFTER[method]] if method in DRAFTER else None
    argv = launch_command(ck["target"], method, budget, tp=tp, drafter=drafter,
                          options={"sps_table": ck["sps"]} if method == "dspark" else {}, shape=shape)
    env = {}
    if argv[0] == "env":
        while "=" in argv[1]:
            key, _, value = argv.pop(1).partition("=")
            env[key] = value
        argv.pop(0)
    return {"argv": argv, "env": env}


def test_every_method_budget_and_tp_passes_sglangs_own_checks(sglang, checkpoints):
    """Every method with a fixed shape (eagle4-harness's comes from a cost table: the next test)."""
    cases = [(m, L, tp) for m in METHODS if m != HARNESS for L in ([1] if m == "vanilla" else BUDGETS) for tp in TPS]
    results = sglang([command(m, L, tp, checkpoints) for m, L, tp in cases])
    refused = [f"{m} L={L} tp={tp}: {r['error']}" for (m, L, tp), r in zip(cases, results) if not r["ok"]]
    assert not refused, "\n".join(refused[:10])
    for (method, budget, tp), r in zip(cases, results):
        got = r["resolved"]
        assert got["tp_size"] == tp and got["speculative_algorithm"] == METHOD_ALGORITHM[method], (method, got)
        if method == "vanilla":
            continue
        assert got["speculative_num_draft_tokens"] == budget, (method, budget, got)
        if METHOD_ALGORITHM[method] == "EAGLE3":
            assert (got["speculative_eagle_topk"], got["speculative_num_steps"]) == tree_shape(method, budget)
        if method in ("dflash", "dflash2"):
            assert got["speculative_dflash_block_size"] == budget
        if method == "dspark":        # the confidence-gated DSpark: compact ragged verify with a cost table
            assert got["speculative_dspark_block_size"] == budget - 1
            assert got["speculative_dspark_sps_table_path"] == checkpoints["sps"]
            assert got["ragged_verify_mode"] == "compact"


def harness_shapes() -> list[tuple[int, int, Any]]:
    """(L, tp, shape): what eagle4-harness launches from a chain calibration (`sglang_policy`: a chain, K per
    concurrency) at every budget, concurrency 1 and 8, and the trees the planner picks where acceptance by rank is
    known (topk > 1, num_draft_tokens below steps * topk)."""
    from test_harness_policy import ACCEPT, server_table, tree_table

    chain = server_table()
    shapes = [(L, tp, sglang_policy(chain, L, c)[0]) for L in BUDGETS for c in (1, 8) for tp in TPS]
    trees = [(L, 1, sglang_shape(tree_table(1.0), L, c, ACCEPT)) for L in (8, 16) for c in (1, 8)]
    assert {s.topk for _, _, s in shapes} == {1} and max(s.topk for _, _, s in trees) > 1
    return shapes + trees


def test_the_harness_shapes_pass_sglangs_own_checks_and_resolve_to_themselves(sglang, checkpoints):
    cases = harness_shapes()
    results = sglang([command(HARNESS, L, tp, checkpoints, shape) for L, tp, shape in cases])
    refused = [f"L={L} tp={tp} {shape}: {r['error']}" for (L, tp, shape), r in zip(cases, results) if not r["ok"]]
    assert not refused, "\n".join(refused[:10])
    for (budget, tp, shape), r in zip(cases, results):
        got = r["resolved"]
        assert got["tp_size"] == tp and got["speculative_algorithm"] == "EAGLE3"
        assert (got["speculative_num_steps"], got["speculative_eagle_topk"], got["speculative_num_draft_tokens"]) == \
            (shape.num_steps, shape.topk, shape.num_draft_tokens), (budget, shape, got)
        assert got["speculative_num_draft_tokens"] <= budget


def with_flag(cmd: dict[str, Any], flag: str, value: str | None) -> dict[str, Any]:
    """`cmd` with `flag`'s value set to `value`, or the flag left out (None)."""
    argv = list(cmd["argv"])
    i = argv.index(flag)
    argv[i:i + 2] = [] if value is None else [flag, value]
    return {**cmd, "argv": argv}


def test_a_misspelled_flag_or_an_invalid_speculative_config_is_refused(sglang, checkpoints):
    """The check can fail: the same parser and hooks refuse typos and the configs the old mapping produced."""
    good = command("dflash", 8, 4, checkpoints)
    typo = {**good, "argv": [a.replace("--speculative-dflash-block-size", "--speculative-dflash-blocksize")
                             for a in good["argv"]]}
    tp_typo = {**good, "argv": [a.replace("--tensor-parallel-size", "--tensor-paralel-size") for a in good["argv"]]}
    dflash_mismatch = with_flag(good, "--speculative-num-draft-tokens", "7")
    # the old DSpark mapping, --speculative-num-draft-tokens L alone: gamma then comes from the draft (7)
    dspark_old = with_flag(command("dspark", 4, 4, checkpoints), "--speculative-dspark-block-size", None)
    results = sglang([good, typo, tp_typo, dflash_mismatch, dspark_old])
    assert results[0]["ok"], results[0]
    assert not results[1]["ok"] and "unrecognized arguments: --speculative-dflash-blocksize" in results[1]["error"]
    assert not results[2]["ok"] and "--tensor-paralel-size" in results[2]["error"]
    assert not results[3]["ok"] and "For DFLASH they must match" in results[3]["error"]
    assert not results[4]["ok"] and "must equal gamma + 1 (= 8 for gamma=7)" in results[4]["error"]
