"""SGLang launch flags per method (runners/sglang_launch.py): the exact commands, the refusals a user meets before
a server starts, and what a running server must report to match a run. SGLang's own parser checks the same
commands in test_sglang_args.py."""

from __future__ import annotations

import json

import pytest

from specbench.errors import SpecbenchError
from specbench.runners.sglang_launch import (
    check_option, facts_from_info, facts_mismatch, launch_command, spec_args, tree_shape,
)

HEAD = ["python", "-m", "sglang.launch_server", "--model-path", "T", "--host", "127.0.0.1", "--port", "30000",
        "--tensor-parallel-size", "4", "--dtype", "auto"]


@pytest.mark.parametrize("method, tail", [
    ("vanilla", []),
    ("sglang-ngram", ["--speculative-algorithm", "NGRAM", "--speculative-num-draft-tokens", "8"]),
    ("eagle3", ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "/d", "--speculative-num-steps",
                "7", "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "8"]),
    ("eagle4-tree", ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "/d",
                     "--speculative-num-steps", "7", "--speculative-eagle-topk", "7", "--speculative-num-draft-tokens",
                     "8"]),
    ("dflash", ["--speculative-algorithm", "DFLASH", "--speculative-draft-model-path", "/d",
                "--speculative-dflash-block-size", "8", "--speculative-num-draft-tokens", "8"]),
    ("dflash2", ["--speculative-algorithm", "DFLASH", "--speculative-draft-model-path", "/d",
                 "--speculative-dflash-block-size", "8", "--speculative-num-draft-tokens", "8"]),
])
def test_launch_commands_at_budget_8_on_4_gpus(method, tail):
    assert launch_command("T", method, 8, tp=4, drafter="/d") == HEAD + tail


def test_dspark_runs_the_confidence_gated_scheduler_with_its_cost_table():
    cmd = launch_command("T", "dspark", 8, tp=4, drafter="/d", options={"sps_table": "/t.json", "sts_table": "/s"})
    assert cmd[:2] == ["env", "SGLANG_RAGGED_VERIFY_MODE=compact"] and cmd[2:2 + len(HEAD)] == HEAD
    assert cmd[2 + len(HEAD):] == [
        "--speculative-algorithm", "DSPARK", "--speculative-draft-model-path", "/d", "--speculative-dspark-block-size",
        "7", "--speculative-num-draft-tokens", "8", "--speculative-dspark-sps-table-path", "/t.json",
        "--speculative-dspark-confidence-sts-path", "/s"]
    with pytest.raises(SpecbenchError, match="needs a profiled SPS cost table, --option sps_table=PATH"):
        spec_args("dspark", 8, "/d", {})


@pytest.mark.parametrize("method, message", [
    ("ngram", "runs as --method sglang-ngram"),
    ("draft_model", "does not run on SGLang"),
])
def test_methods_sglang_does_not_run_are_one_line(method, message):
    with pytest.raises(SpecbenchError, match=message):
        spec_args(method, 8, "/d")


def test_the_harness_launches_its_compiled_shape_and_none_without_one():
    from specbench.runners.harness_policy import TreeShape

    assert spec_args("eagle4-harness", 16, "/d", shape=TreeShape(3, 4, 12, 1.0))[4:] == [
        "--speculative-num-steps", "3", "--speculative-eagle-topk", "4", "--speculative-num-draft-tokens", "12"]
    with pytest.raises(SpecbenchError, match="run `specbench calibrate --engine sglang --target T --drafter D` first"):
        spec_args("eagle4-harness", 16, "/d")


def test_sglang_ngram_maps_its_own_knobs_and_refuses_prompt_lookup_ones():
    args = spec_args("sglang-ngram", 4, options={"max_bfs_breadth": 1, "max_trie_depth": 12, "match_type": "PROB"})
    assert args[4:] == ["--speculative-ngram-max-bfs-breadth", "1", "--speculative-ngram-max-trie-depth", "12",
                        "--speculative-ngram-match-type", "PROB"]
    common = ("tp", "port")
    for key in ("max_n", "min_n", "matches"):
        with pytest.raises(SpecbenchError, match=f"--option {key}: not on SGLang"):
            check_option(key, ["sglang-ngram"], f"--option {key}", common)
    with pytest.raises(SpecbenchError, match="min_bfs_breadth=4 is above max_bfs_breadth=2"):
        spec_args("sglang-ngram", 4, options={"min_bfs_breadth": 4, "max_bfs_breadth": 2})
    with pytest.raises(SpecbenchError, match="max_trie_depth=1: expected an integer >= 2"):
        spec_args("sglang-ngram", 4, options={"max_trie_depth": 1})
    with pytest.raises(SpecbenchError, match="match_type=DFS: expected one of BFS, PROB"):
        spec_args("sglang-ngram", 4, options={"match_type": "DFS"})


def test_an_option_no_method_reads_is_refused_naming_who_reads_it():
    common = ("tp", "port")
    check_option("sps_table", ["sglang-ngram", "dspark"], "--option sps_table", common)
    check_option("tp", ["vanilla"], "--option tp", common)
    with pytest.raises(SpecbenchError, match=r"--method eagle3 on SGLang takes no option 'sps_table' \(only dspark"):
        check_option("sps_table", ["eagle3"], "--option sps_table", common)
    with pytest.raises(SpecbenchError, match="--method vanilla on SGLang takes no option 'drafter'"):
        check_option("drafter", ["vanilla"], "--option drafter", common)


def test_an_eagle_tree_too_small_for_the_budget_is_refused():
    assert tree_shape("eagle4-tree", 15, {"top_k": 2, "depth": 4}) == (2, 4)      # 2 + 3 * 2 * 2 = 14 = L - 1
    with pytest.raises(SpecbenchError, match="holds 14 candidates, fewer than the 15 drafts"):
        tree_shape("eagle4-tree", 16, {"top_k": 2, "depth": 4})
    with pytest.raises(SpecbenchError, match="holds 2 candidates, fewer than the 7 drafts"):
        tree_shape("eagle4-tree", 8, {"top_k": 2, "depth": 1})
    with pytest.raises(SpecbenchError, match="top_k=0: expected an integer >= 1"):
        tree_shape("eagle4-tree", 8, {"top_k": 0})


def test_dflash_and_dflash2_checkpoints_are_not_swapped(tmp_path):
    for name, arch in (("d1", "DFlashDraftModel"), ("d2", "DFlash2DraftModel")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text(json.dumps({"architectures": [arch]}))
    assert spec_args("dflash2", 8, str(tmp_path / "d2"))[1] == "DFLASH"
    with pytest.raises(SpecbenchError, match="needs a DFlash2 checkpoint .* declares DFlashDraftModel; run it as "
                                             "--method dflash"):
        spec_args("dflash2", 8, str(tmp_path / "d1"))
    with pytest.raises(SpecbenchError, match="is a DFlash2 checkpoint .*run it as --method dflash2"):
        spec_args("dflash", 8, str(tmp_path / "d2"))


INFO = {"version": "0.5.23", "tp_size": 4, "speculative_algorithm": "EAGLE3", "speculative_num_draft_tokens": 8,
        "speculative_num_steps": 7, "speculative_eagle_topk": 1, "speculative_draft_model_path": "/d",
        "speculative_dspark_sps_table_path": None}


def test_server_facts_from_server_info():
    facts = facts_from_info(INFO, "GET /server_info")
    assert facts["engine_version"] == "0.5.23" and facts["tensor_parallel_size"] == 4
    spec = facts["speculative"]
    assert (spec["enabled"], spec["algorithm"], spec["num_draft_tokens"], spec["eagle_topk"]) == (True, "EAGLE3", 8, 1)
    assert spec["dflash_block_size"] is None and spec["source"] == "GET /server_info"
    silent = facts_from_info(None, None)
    assert silent["engine_version"] is None and silent["speculative"]["enabled"] is None


@pytest.mark.parametrize("info, method, budget, options, clash", [
    (INFO, "eagle3", 8, {"tp": 4}, None),
    ({"speculative_num_draft_tokens": 4}, "eagle3", 8, {}, "verifies 4 tokens per step"),
    ({}, "dspark", 8, {}, None),                                            # a server that says nothing
    (INFO, "vanilla", 1, {}, "runs speculative algorithm EAGLE3, but this run is --method vanilla"),
    ({**INFO, "speculative_algorithm": None}, "eagle3", 8, {}, "runs no speculative decoding"),
    (INFO, "dflash", 8, {}, "runs speculative algorithm EAGLE3, but --method dflash is SGLang's DFLASH"),
    (INFO, "eagle4-tree", 8, {}, "runs speculative_eagle_topk=1, but --method eagle4-tree --budget 8 needs 7"),
    (INFO, "eagle3", 8, {"tp": 1}, "runs tensor parallel size 4, but this run has --option tp=1"),
    ({**INFO, "speculative_algorithm": "DSPARK"}, "dspark", 8, {}, "without an SPS cost table"),
    ({**INFO, "speculative_algorithm": "NGRAM", "speculative_ngram_max_bfs_breadth": 10}, "sglang-ngram", 8,
     {"max_bfs_breadth": 1}, "runs speculative_ngram_max_bfs_breadth=10"),
])
def test_a_server_contradicting_the_run_is_named(info, method, budget, options, clash):
    found = facts_mismatch(facts_from_info(info, "GET /server_info"), method, budget, options)
    assert (found is None) if clash is None else (clash in (found or "")), found
