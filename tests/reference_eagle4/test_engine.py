"""Speculative decoding through the engine is lossless and its step records add up."""

import pytest
import torch

from reference_eagle4.engine import Engine, GenerationConfig, Request
from reference_eagle4.model import load_transformer
from reference_eagle4.proposers import PROPOSERS
from reference_eagle4.verify import Sampling


@pytest.fixture(scope="module")
def target(tiny_target):
    return load_transformer(tiny_target)


def requests(n=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [Request(f"q{i}", torch.randint(3, 300, (int(torch.randint(4, 30, (1,), generator=g)),),
                                           generator=g).tolist()) for i in range(n)]


def generate(target, method, budget, concurrency, max_new=40, eos=(), sampling=Sampling(), **options):
    engine = Engine(target, PROPOSERS[method](budget=budget, **options),
                    GenerationConfig(max_new, sampling, eos, concurrency, seed=3), max_len=256)
    done = {}
    engine.generate(requests(), lambda s: done.__setitem__(s.request.id, s))
    return done


def test_vanilla_equals_greedy_transformers(target, tiny_target):
    from transformers import AutoModelForCausalLM

    hf = AutoModelForCausalLM.from_pretrained(tiny_target).eval()
    ours = generate(target, "vanilla", 1, 1, max_new=20)
    for req in requests()[:3]:
        ref = hf.generate(torch.tensor([req.prompt_ids]), max_new_tokens=20, do_sample=False,
                          eos_token_id=None, pad_token_id=0)[0, len(req.prompt_ids):].tolist()
        assert ours[req.id].output == ref


@pytest.mark.parametrize("budget", [2, 4, 8, 16])
@pytest.mark.parametrize("concurrency", [1, 3])
@pytest.mark.parametrize("matches", [1, 3])
def test_ngram_chain_and_tree_equal_vanilla(target, budget, concurrency, matches):
    base = generate(target, "vanilla", 1, 1)
    spec = generate(target, "ngram", budget, concurrency, matches=matches)
    assert {k: s.output for k, s in spec.items()} == {k: s.output for k, s in base.items()}
    steps = [st for s in spec.values() for st in s.steps]
    assert sum(st["accepted"] for st in steps) > 0, "random target should repeat itself"
    assert all(st["budget"] <= budget and st["emitted"] <= st["accepted"] + 1 for st in steps)


def test_records_add_up_and_stop_at_eos_and_max_new_tokens(target):
    base = generate(target, "vanilla", 1, 1, max_new=30)
    eos = base["q0"].output[5]                       # a token q0 emits: it must stop right after it
    done = generate(target, "ngram", 8, 2, max_new=30, eos=(eos,))
    for s in done.values():
        assert len(s.output) <= 30
        assert 1 + sum(st["emitted"] for st in s.steps) == len(s.output)
        assert len(s.entropies) == len(s.output)
        assert eos not in s.output[:-1]
        # every step records where its time went: drafting and the target's verification forward (a batched
        # step's, the same for each sequence in it)
        assert all(st["draft_ms"] >= 0 and st["verify_ms"] > 0 for st in s.steps)
        assert s.t_start <= s.t_first <= s.t_end
    q0 = done["q0"].output
    assert q0[-1] == eos and q0 == base["q0"].output[: len(q0)]


def test_sampling_is_reproducible_and_independent_of_batching(target):
    """Per-request generators: a request's samples depend on its seed, not on its batch neighbours."""
    alone = generate(target, "vanilla", 1, 1, sampling=Sampling(0.8))
    batched = generate(target, "vanilla", 1, 3, sampling=Sampling(0.8))
    assert {k: s.output for k, s in alone.items()} == {k: s.output for k, s in batched.items()}
    first = generate(target, "ngram", 8, 2, sampling=Sampling(0.8))
    again = generate(target, "ngram", 8, 2, sampling=Sampling(0.8))
    assert {k: s.output for k, s in first.items()} == {k: s.output for k, s in again.items()}


def test_isolated_failures_finish_only_the_sequences_they_hit(target, monkeypatch):
    """A server's engine (isolate_failures): a failed prefill fails its request alone, a failed step its batch,
    and the requests after them decode exactly as they would have; a benchmark run's engine raises instead."""
    base = generate(target, "vanilla", 1, 1)
    engine = Engine(target, PROPOSERS["ngram"](budget=4), GenerationConfig(40, concurrency=2), max_len=256)
    reqs = requests()
    real_prefill, real_step = target.prefill, engine._step
    steps = []

    def prefill(tokens, *args, **kw):
        if tokens.shape[1] == len(reqs[1].prompt_ids) and tokens[0].tolist() == reqs[1].prompt_ids:
            raise RuntimeError("bad prompt")
        return real_prefill(tokens, *args, **kw)

    def step(live):
        steps.append([s.request.id for s in live])
        if len(steps) == 3:
            raise RuntimeError("bad step")
        return real_step(live)

    monkeypatch.setattr(target, "prefill", prefill)
    monkeypatch.setattr(engine, "_step", step)
    done = {}
    engine.generate(reqs, lambda s: done.__setitem__(s.request.id, s), isolate_failures=True)
    assert set(done) == {r.id for r in reqs}
    assert "bad prompt" in done["q1"].error and not done["q1"].output
    hit = set(steps[2])
    assert all("bad step" in done[i].error for i in hit) and "q1" not in hit
    for rid, seq in done.items():
        if rid != "q1" and rid not in hit:
            assert seq.error is None and seq.output == base[rid].output
    with pytest.raises(RuntimeError, match="bad prompt"):
        engine.generate(reqs, lambda s: None)
