"""harness-retrieval on vLLM: the `custom_class` proposer (reference_eagle4/vllm_retrieval.py) driven as vLLM's model
runner drives it, with a fake VllmConfig and token arrays, and the vLLM runner's launch command and manifest for it.
tests/runners/test_vllm_args.py feeds its launch commands through vLLM itself."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from typer.testing import CliRunner

from reference_eagle4.datastore import Datastore
from reference_eagle4.vllm_retrieval import SHIPPED_DATASTORE, RetrievalProposer, paying_depth
from specbench.cli import app
from specbench.errors import SpecbenchError
from specbench.records import read_manifest
from specbench.runners.vllm import (
    RETRIEVAL, RETRIEVAL_CLASS, VllmRunner, facts_mismatch, launch_command, retrieval_config,
)

ROOT = Path(__file__).resolve().parents[2]
WIDTH = 256                     # token_ids_cpu's columns (vLLM: max_model_len)
cli = CliRunner()


def vllm_config(k: int, max_model_len: int = WIDTH, vocab: int = 49152) -> SimpleNamespace:
    """What the proposer reads of vLLM's VllmConfig."""
    return SimpleNamespace(speculative_config=SimpleNamespace(num_speculative_tokens=k),
                           model_config=SimpleNamespace(max_model_len=max_model_len, get_vocab_size=lambda: vocab))


def proposer(k: int = 7, **config) -> RetrievalProposer:
    return RetrievalProposer(vllm_config(k), {"datastore": "off", **config})


def batch(*requests: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """(num_tokens_no_spec, token_ids_cpu) for these requests' tokens, one row each."""
    rows = np.zeros((len(requests), WIDTH), dtype=np.int32)
    for i, tokens in enumerate(requests):
        rows[i, : len(tokens)] = tokens
    return np.array([len(t) for t in requests]), rows


def step(p: RetrievalProposer, requests: list[list[int]], emitted: list[list[int]]) -> list[list[int]]:
    """One propose call: each request's tokens so far, the last of them `emitted` this step."""
    return p.propose(emitted, *batch(*requests))


PROMPT = [40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 40, 41, 42]    # "40 41 42" occurred before, followed by 43 ...


# -- drafts ---------------------------------------------------------------------------------------------------------

def test_prompt_lookup_drafts_the_continuation_of_the_longest_earlier_suffix():
    # the longest suffix (max_n 3) "40 41 42" ended at position 2; what followed it: 43 44 45 ...
    assert step(proposer(token_cost=0.0), [PROMPT], [[42]]) == [[43, 44, 45, 46, 47, 48, 49]]
    # from the prior (1 hit in 2 tries per depth) three drafts pay at the default cost: P = 1/2, 1/4, 1/8
    assert paying_depth([0.5, 0.25, 0.125, 0.0625], 0.06) == 3
    assert step(proposer(), [PROMPT], [[42]]) == [[43, 44, 45]]
    # the most recent occurrence of the longest suffix wins over an older or shorter one
    tokens = [7, 8, 1, 7, 8, 2, 9, 7, 8]
    assert step(proposer(token_cost=0.0), [tokens], [[8]]) == [[2, 9, 7, 8]]
    assert step(proposer(token_cost=0.0, max_n=1), [[5, 3, 6, 3]], [[3]]) == [[6, 3]]


def test_drafts_are_capped_at_l_minus_1_and_by_max_model_len():
    assert step(proposer(k=3, token_cost=0.0), [PROMPT], [[42]]) == [[43, 44, 45]]
    p = RetrievalProposer(vllm_config(7, max_model_len=len(PROMPT) + 2), {"datastore": "off", "token_cost": 0.0})
    assert step(p, [PROMPT], [[42]]) == [[43, 44]]
    # a request at max_model_len drafts nothing (as vLLM's n-gram proposer)
    p = RetrievalProposer(vllm_config(7, max_model_len=len(PROMPT)), {"datastore": "off", "token_cost": 0.0})
    assert step(p, [PROMPT], [[42]]) == [[]]


def test_empty_drafts_where_nothing_matches_or_the_row_did_not_decode():
    p = proposer(token_cost=0.0)
    assert step(p, [[1, 2, 3, 4, 5], PROMPT], [[5], []]) == [[], []]


@pytest.fixture
def store(tmp_path):
    """A datastore where "100 101" is always followed by 102 103 104 105."""
    responses = [[100, 101, 102, 103, 104, 105], [9, 100, 101, 102, 103, 104, 105], [100, 101, 102, 103, 7]]
    return Datastore.from_responses(responses, 49152, max_n=4, min_n=2).save(tmp_path / "store", {})


def test_the_datastore_drafts_where_the_prompt_has_no_match(store):
    p = proposer(token_cost=0.0, datastore=str(store))
    # no token of the request repeats, so prompt lookup has nothing; the datastore's majority continuation
    assert step(p, [[5, 6, 100, 101]], [[101]]) == [[102, 103, 104, 105]]
    assert p.config()["datastore"] == str(store)
    # a datastore of another vocabulary than the target's is refused; the shipped one is dropped instead
    with pytest.raises(ValueError, match="vocabulary of 49152"):
        RetrievalProposer(vllm_config(7, vocab=1024), {"datastore": str(store)})
    assert RetrievalProposer(vllm_config(7, vocab=1024)).config()["datastore"] is None
    if (SHIPPED_DATASTORE / "config.json").exists():
        assert RetrievalProposer(vllm_config(7)).config()["datastore"] == str(SHIPPED_DATASTORE)


def test_the_longer_confident_source_is_drafted(store):
    p = proposer(datastore=str(store))
    tokens = [100, 101, 50, 51, 100, 101]       # lookup: 50 51 100 101; datastore: 102 103 104 105
    assert step(p, [tokens], [[101]]) == [[50, 51, 100]]          # equal priors: prompt lookup first
    ds = p.retrieval.acceptance["datastore"]
    ds.hits[2, :] += 40
    ds.tries[2, :] += 40                         # the datastore's drafts have been accepted
    assert step(p, [tokens], [[101]]) == [[102, 103, 104, 105]]


# -- acceptance learned per request, whatever the row ---------------------------------------------------------------

def test_acceptance_is_learned_from_what_the_target_emitted_and_sizes_the_drafts():
    p = proposer()
    tokens = list(PROMPT)
    assert step(p, [tokens], [[42]]) == [[43, 44, 45]]
    # the target rejects the lookup at the first draft, step after step: its drafts shrink to nothing
    for t in range(30):
        tokens = tokens + [1000 + t]
        drafts = step(p, [tokens + [40, 41, 42]], [[1000 + t, 40, 41, 42]])
        tokens += [40, 41, 42]
    context = p.retrieval.acceptance["context"]
    assert context.tries[3, 0] > 25 and context.hits[3, 0] == 1           # the prior's hit only
    assert drafts == [[]]
    # a source the target accepts is drafted deeper and deeper: a target that copies its prompt over and over
    p = proposer()
    target = [60 + i % 20 for i in range(400)]
    tokens, emitted, lengths = target[:23], [target[22]], []
    for _ in range(12):
        (draft,) = step(p, [tokens], [emitted])
        lengths.append(len(draft))
        truth = target[len(tokens): len(tokens) + len(draft) + 1]
        assert draft == truth[: len(draft)]
        emitted = truth                          # every draft accepted, and the bonus token
        tokens = tokens + emitted
    assert lengths[0] == 3 and lengths == sorted(lengths) and lengths[-1] == 7


def test_requests_keep_their_own_state_when_vllm_reorders_the_batch():
    p = proposer(token_cost=0.0)
    a, b = list(PROMPT), [70, 71, 72, 73, 74, 70, 71]
    assert step(p, [a, b], [[42], [71]]) == [[43, 44, 45, 46, 47, 48, 49], [72, 73, 74, 70, 71]]
    # next step: the rows swap, and a third request joins in the middle
    a2, b2, c = a + [43, 44, 9], b + [72, 73, 74, 70], [5, 6, 5]
    drafts = step(p, [b2, c, a2], [[72, 73, 74, 70], [5], [43, 44, 9]])
    assert drafts == [[71, 72, 73, 74, 70], [6, 5], []]
    states = list(p._states.values())
    assert sorted(len(s.index.tokens) for s in states) == [3, 11, 16]
    assert {tuple(s.index.tokens) for s in states} == {tuple(a2), tuple(b2), tuple(c)}
    # what each request's candidates met was scored against its own emitted tokens: a's lookup accepted 2 of 7
    # then missed (9 for 45), b's accepted all 4 it could be tested on; no other tries
    context = p.retrieval.acceptance["context"]
    assert context.tries[3, :4].tolist() == [2 + 1, 2 + 1, 2 + 1, 2 + 0]     # a (n = 3) at depths 1-3
    assert context.hits[3, :3].tolist() == [1 + 1, 1 + 1, 1 + 0]
    assert context.tries[2, :4].tolist() == [2 + 1] * 4 and context.hits[2, :4].tolist() == [1 + 1] * 4
    # only the last step's requests are kept: finished ones leave nothing behind
    step(p, [c + [6]], [[6]])
    assert len(p._states) == 1


# -- the vLLM runner ------------------------------------------------------------------------------------------------

def test_the_launch_command_loads_the_proposer_class_in_vllms_python():
    argv = launch_command("/m/target", RETRIEVAL, 8, options={"max_n": 4})
    spec = json.loads(argv[argv.index("--speculative-config") + 1])
    assert spec == {"method": "custom_class", "model": RETRIEVAL_CLASS, "num_speculative_tokens": 7}
    env = dict(a.split("=", 1) for a in argv[1: argv.index("python")])
    assert Path(env["PYTHONPATH"]) == ROOT and (ROOT / "reference_eagle4" / "vllm_retrieval.py").is_file()
    assert json.loads(env["SPECBENCH_RETRIEVAL"]) == {"max_n": 4, "token_cost": 0.06, "datastore": None}
    assert "--per-request-spec-decode-metrics" in argv
    with pytest.raises(SpecbenchError, match="budget >= 2"):
        launch_command("/m/target", RETRIEVAL, 1)
    facts = {"tensor_parallel_size": 1, "speculative": {
        "enabled": True, "method": "custom_class", "num_speculative_tokens": 7, "model": RETRIEVAL_CLASS,
        "enable_adaptive_verification": None, "source": "GET /server_info"}}
    assert facts_mismatch(facts, RETRIEVAL, 8) is None
    assert "drafts 7 tokens" in facts_mismatch(facts, RETRIEVAL, 4)
    facts["speculative"]["model"] = "other.Proposer"
    assert "custom proposer 'other.Proposer'" in facts_mismatch(facts, RETRIEVAL, 8)
    assert "vLLM's 'eagle3'" in facts_mismatch(facts, "eagle3", 8)


def test_a_run_on_the_stub_server_records_the_method_config(stub_server, tmp_path):
    res = cli.invoke(app, ["run", "--engine", "vllm", "--endpoint", stub_server.url, "--target", "stub-model",
                           "--method", RETRIEVAL, "--budget", "6", "--limit", "2", "--max-new-tokens", "4",
                           "--no-report", "--option", "warmup=0", "--option", "max_n=2", "--out", str(tmp_path / "r")])
    assert res.exit_code == 0, res.output
    config = read_manifest(tmp_path / "r")["method_config"]
    assert config["name"] == RETRIEVAL and config["budget"] == 6
    assert config["speculative_config"] == {"method": "custom_class", "model": RETRIEVAL_CLASS,
                                            "num_speculative_tokens": 5}
    assert config["retrieval"]["max_n"] == 2 and config["retrieval"]["proposer"] == RETRIEVAL_CLASS
    VllmRunner.check_options([(RETRIEVAL, {"max_n": 2})], {})
    with pytest.raises(SpecbenchError, match="--option drafter: no method of this run reads it"):
        VllmRunner.check_options([(RETRIEVAL, {})], {"drafter": "/x"})


@pytest.mark.parametrize("option, message", [
    ({"token_cost": "cheap"}, r"--option token_cost=cheap: expected a number >= 0"),
    ({"token_cost": -0.1}, r"--option token_cost=-0.1: expected a number >= 0"),
    ({"datastore": "/no/such/store"}, r"--option datastore=/no/such/store: not a folder"),
])
def test_a_bad_retrieval_option_is_one_line_naming_it(option, message):
    with pytest.raises(SpecbenchError, match=message):
        retrieval_config(option)


def test_retrieval_options_reach_the_proposer_config(tmp_path):
    cfg = retrieval_config({"token_cost": "0.15", "datastore": str(tmp_path), "max_n": 2})
    assert cfg == {"max_n": 2, "token_cost": 0.15, "datastore": str(tmp_path.resolve())}
    assert retrieval_config({"datastore": "off"})["datastore"] == "off"
