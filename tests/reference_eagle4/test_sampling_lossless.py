"""Sampled decoding through the engine keeps the target's distribution, for every drafting method, with top-p
and with top-k.

Each method decodes 16 tokens for 192 requests at C = 8 on the bigram target, whose drafters (hand-set) and
prompts (the target's own likely continuation, so prompt lookup copies it) make many steps accept drafts. Every
emitted token is then compared with the distribution it should have been drawn from, computed without the
engine: transformers' Llama over the emitted sequence gives the logits, and temperature, top-k and top-p are
applied from their definitions (lossless_helpers.py). The checks, over all tokens and again over the tokens
drawn at drafted tree nodes (the ones a wrong mask, position, KV row or acceptance rule would bias):

- support: no token outside top-k / top-p is ever emitted;
- uniformity: each token's randomised rank-PIT value (the mass of the more probable tokens plus a uniform share
  of its own) is uniform given everything before it when the token is drawn from the expected distribution:
  a Kolmogorov-Smirnov test against uniform;
- surprisal: the emitted tokens' summed log-probability against its expectation (minus the entropies) and
  variance: a sampler too greedy or too random, or at another temperature, moves it.

`test_the_checks_have_power` shows that a sampler a little off (a temperature 20% too low, top-k one token too
wide, a verifier that accepts any draft the target could have sampled) fails them.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
import torch
from scipy.stats import kstest, norm

sys.path.insert(0, str(Path(__file__).parent))
from eagle4_helpers import bigram_target, one_thread  # noqa: E402,F401
from lossless_helpers import (  # noqa: E402,F401
    bigram_proposers, expected_probs, hf_twin, one_thread_module, rank_pit, steady_clock)

from reference_eagle4.engine import Engine, GenerationConfig, Request  # noqa: E402
from reference_eagle4.proposers import PROPOSERS  # noqa: E402
from reference_eagle4.verify import Sampling, processed_probs  # noqa: E402

PROMPTS, PER_PROMPT, NEW_TOKENS, C = 4, 48, 16, 8
ALPHA = 1e-3
SAMPLINGS = {"top-p": Sampling(1.0, top_p=0.9), "top-k": Sampling(1.5, top_k=4)}


# -- the expected distribution, checked by hand --------------------------------------------------------------

@pytest.mark.parametrize("temperature, top_k, top_p, want", [
    # e^3 : e^2 over the two largest logits (3 and 2)
    (1.0, 2, 1.0, {0: 0.7310585786, 2: 0.2689414214}),
    # temperature 0.5 doubles the logits: e^6 : e^4
    (0.5, 2, 1.0, {0: 0.8807970780, 2: 0.1192029220}),
    # top-3 = e^3, e^2, e^1 / 30.19 = 0.665, 0.245, 0.090; the first two reach 0.8, so top-p keeps them
    (1.0, 3, 0.8, {0: 0.7310585786, 2: 0.2689414214}),
    # no truncation: softmax of all five
    (1.0, 0, 1.0, {0: 0.6364086465, 1: 0.0861285444, 2: 0.2341216573, 3: 0.0316849207, 4: 0.0116562310}),
])
def test_temperature_top_k_and_top_p_by_hand(temperature, top_k, top_p, want):
    """The test's expected distribution and the engine's `processed_probs` both give the hand-computed values."""
    logits = [3.0, 1.0, 2.0, 0.0, -1.0]
    full = [want.get(t, 0.0) for t in range(5)]
    assert expected_probs(np.array(logits), temperature, top_k, top_p) == pytest.approx(full, abs=1e-9)
    engine = processed_probs(torch.tensor(logits), Sampling(temperature, top_p, top_k))
    assert engine.tolist() == pytest.approx(full, abs=1e-6)


def test_rank_pit_is_uniform_for_draws_from_the_distribution_and_not_for_a_greedier_one():
    rng = np.random.default_rng(0)
    p = np.array([0.5, 0.3, 0.15, 0.05])
    fair = [rank_pit(p, int(rng.choice(4, p=p)), rng.random()) for _ in range(4000)]
    greedy = np.array([0.6, 0.28, 0.1, 0.02])
    biased = [rank_pit(p, int(rng.choice(4, p=greedy)), rng.random()) for _ in range(4000)]
    assert kstest(fair, "uniform").pvalue > ALPHA
    assert kstest(biased, "uniform").pvalue < ALPHA


def test_the_surprisal_test_accepts_fair_draws_and_rejects_a_colder_sampler():
    rng = np.random.default_rng(1)
    p = np.array([0.5, 0.3, 0.15, 0.05])
    mean = float((p * np.log(p)).sum())
    var = float((p * (np.log(p) - mean) ** 2).sum())
    colder = p ** 1.25 / (p ** 1.25).sum()
    for q, fair in ((p, True), (colder, False)):
        logp = [float(np.log(p[rng.choice(4, p=q)])) for _ in range(4000)]
        assert (surprisal_test(logp, [mean] * 4000, [var] * 4000) > ALPHA) == fair


# -- the engine's samples -------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def target():
    return bigram_target(layer_std=0.05)


@pytest.fixture(scope="module")
def twin(target):
    return hf_twin(target)


@pytest.fixture(scope="module")
def prompts(target) -> list[list[int]]:
    return make_prompts(target)


def make_prompts(target) -> list[list[int]]:
    """Random tokens, then a greedy continuation of the target from a start token, then that start token
    again: the target is likely to repeat the continuation, which prompt lookup drafts."""
    g = torch.Generator().manual_seed(0)
    starts = torch.randint(0, 256, (PROMPTS,), generator=g).tolist()
    chains = greedy(target, [[s] for s in starts], 10)
    return [torch.randint(0, 256, (5,), generator=g).tolist() + [s, *chain, s] for s, chain in zip(starts, chains)]


def greedy(target, prompts: list[list[int]], n: int) -> list[list[int]]:
    """The target's greedy continuations of `prompts`, n tokens each."""
    got: dict[str, list[int]] = {}
    Engine(target, PROPOSERS["vanilla"](budget=1), GenerationConfig(n, concurrency=8), 64).generate(
        [Request(str(i), p) for i, p in enumerate(prompts)], lambda s: got.__setitem__(s.request.id, s.output))
    return [got[str(i)] for i in range(len(prompts))]


@pytest.fixture(scope="module")
def datastore(target, tmp_path_factory) -> str:
    return make_datastore(target, tmp_path_factory.mktemp("datastore") / "ds")


def make_datastore(target, folder: Path) -> str:
    """A datastore of the target's greedy answers to other prompts: the bigram target's runs recur across
    prompts, so it drafts continuations the context has not seen yet."""
    from reference_eagle4.datastore import Datastore

    g = torch.Generator().manual_seed(1)
    answers = greedy(target, [torch.randint(0, 256, (6,), generator=g).tolist() for _ in range(24)], 48)
    Datastore.from_responses(answers, vocab_size=256).save(folder, {})
    return str(folder)


def proposer(method: str, target, datastore: str | None):
    return bigram_proposers(target, datastore)[method]()


METHODS = ["ngram", "ngram-trie", "eagle4-chain", "eagle4-tree", "eagle4-harness", "eagle4-harness-lookup",
           "eagle4-harness-datastore", "dflash", "dspark"]


@dataclass
class Decoded:
    """Every request's prompt, output, and for each output token where it was drawn: 0 from the prefill,
    1 at a step's root, 2 at a drafted node (below an accepted draft)."""

    prompts: list[list[int]] = field(default_factory=list)
    outputs: list[list[int]] = field(default_factory=list)
    drawn_at: list[list[int]] = field(default_factory=list)

    def add(self, seq) -> None:
        where = [0]
        for st in seq.steps:
            where += [1] + [2] * (st["emitted"] - 1)
        assert len(where) == len(seq.output)
        self.prompts.append(list(seq.request.prompt_ids))
        self.outputs.append(list(seq.output))
        self.drawn_at.append(where)


def decode(target, prop, prompts: list[list[int]], sampling: Sampling, seed: int = 0) -> Decoded:
    reqs = [Request(f"p{i}-{j}", prompt) for j in range(PER_PROMPT) for i, prompt in enumerate(prompts)]
    out = Decoded()
    cfg = GenerationConfig(max_new_tokens=NEW_TOKENS, sampling=sampling, concurrency=C, seed=seed)
    Engine(target, prop, cfg, 128).generate(reqs, out.add)
    return out


@dataclass
class Verdict:
    outside_support: int            # emitted tokens the expected distribution gives probability 0
    p_uniform: float                # KS p-value: every emitted token's rank-PIT value against uniform
    p_uniform_drafted: float        # the same over the tokens drawn at drafted nodes
    p_surprisal: float              # two-sided p-value: the emitted tokens' summed log-probability
    p_surprisal_drafted: float
    n_drafted: int

    def passes(self) -> bool:
        return self.outside_support == 0 and min(self.p_uniform, self.p_uniform_drafted, self.p_surprisal,
                                                 self.p_surprisal_drafted) > ALPHA


def surprisal_test(logp: list[float], means: list[float], variances: list[float]) -> float:
    """Two-sided p-value that the emitted tokens' log-probabilities `logp` come from their distributions, whose
    means (minus the entropy) and variances are given: a normal approximation to their sum. A sampler too
    greedy (too cold) raises the sum, one too random lowers it; against a wrong temperature this is the most
    sensitive test, since log p is then linear in the logit."""
    z = (sum(logp) - sum(means)) / max(sum(variances), 1e-12) ** 0.5
    return float(2 * norm.sf(abs(z)))


def check(twin, decoded: Decoded, sampling: Sampling) -> Verdict:
    """Compare every emitted token with its expected distribution (see the module docstring)."""
    rng = np.random.default_rng(12345)
    values: dict[bool, list[float]] = {False: [], True: []}       # keyed by: drawn at a drafted node
    logp: dict[bool, list[float]] = {False: [], True: []}
    moments: dict[bool, list[tuple[float, float]]] = {False: [], True: []}
    outside = 0
    by_length: dict[int, list[int]] = {}
    for i, (prompt, output) in enumerate(zip(decoded.prompts, decoded.outputs)):
        by_length.setdefault(len(prompt) + len(output), []).append(i)
    for rows in by_length.values():
        ids = torch.tensor([decoded.prompts[i] + decoded.outputs[i] for i in rows])
        with torch.no_grad():
            logits = twin(ids).logits.double().numpy()
        for b, i in enumerate(rows):
            start = len(decoded.prompts[i]) - 1            # the logits row that predicts output token 0
            for j, (token, where) in enumerate(zip(decoded.outputs[i], decoded.drawn_at[i])):
                p = expected_probs(logits[b, start + j], sampling.temperature, sampling.top_k, sampling.top_p)
                outside += int(p[token] == 0.0)
                drafted = where == 2
                values[drafted].append(rank_pit(p, token, rng.random()))
                support = p[p > 0]
                mean = float((support * np.log(support)).sum())
                logp[drafted].append(float(np.log(max(p[token], 1e-300))))
                moments[drafted].append((mean, float((support * (np.log(support) - mean) ** 2).sum())))

    def surprisal(keys: tuple[bool, ...]) -> float:
        return surprisal_test([x for k in keys for x in logp[k]], [m for k in keys for m, _ in moments[k]],
                              [v for k in keys for _, v in moments[k]])

    drafted_ok = bool(values[True])          # vanilla draws nothing at drafted nodes: nothing to test there
    return Verdict(outside, kstest(values[False] + values[True], "uniform").pvalue,
                   kstest(values[True], "uniform").pvalue if drafted_ok else 1.0, surprisal((False, True)),
                   surprisal((True,)) if drafted_ok else 1.0, len(values[True]))


@pytest.mark.parametrize("sampling", SAMPLINGS, ids=list(SAMPLINGS))
@pytest.mark.parametrize("method", METHODS)
def test_sampled_tokens_follow_the_target_distribution(target, twin, prompts, datastore, steady_clock,
                                                       method, sampling):
    decoded = decode(target, proposer(method, target, datastore), prompts, SAMPLINGS[sampling])
    verdict = check(twin, decoded, SAMPLINGS[sampling])
    # each token drawn at a drafted node follows an accepted draft: enough of them for the tests to see a bias
    assert verdict.n_drafted >= 200, f"{method}: {verdict.n_drafted} tokens drawn below accepted drafts"
    assert verdict.passes(), verdict


def test_vanilla_passes_the_same_checks(target, twin, prompts):
    """The baseline itself: plain sampling follows the expected distribution (no drafted nodes here)."""
    for sampling in SAMPLINGS.values():
        decoded = decode(target, PROPOSERS["vanilla"](budget=1), prompts, sampling)
        verdict = check(twin, decoded, sampling)
        assert verdict.n_drafted == 0 and verdict.passes(), verdict


class LenientVerifier:
    """A lossy verifier, the bug of accepting a draft because the target could have sampled it: where the draw
    matches no child, it descends anyway into the first child whose token lies in the target's top-k / top-p.
    Its output stays inside the support, so only the distribution tests can catch it. Installed over the
    engine's `draw` (to keep each tree's distributions) and `walk`."""

    def __init__(self, engine_module) -> None:
        self.draw = engine_module.draw
        self.probs: torch.Tensor | None = None

    def draw_and_keep(self, logits, sampling, generator):
        self.probs = processed_probs(logits, sampling)
        return self.draw(logits, sampling, generator)

    def walk(self, tree, targets):
        from reference_eagle4.verify import Verdict as Walked

        node, path, out = 0, [0], []
        while True:
            y = targets[node]
            child = tree.children[node].get(y)
            if child is None:
                child = next((c for c in tree.children[node].values() if self.probs[node, tree.tokens[c]] > 0), None)
                y = y if child is None else tree.tokens[child]
            out.append(y)
            if child is None:
                return Walked(path, out)
            node = child
            path.append(child)


def test_the_checks_have_power(target, twin, prompts, datastore, steady_clock, monkeypatch):
    """The same runs with a sampler a little off fail the checks that the right sampler passes: a temperature
    20% too low (same support: only the distribution tests can see it), top-k one token too wide, and a
    verifier that accepts any draft the target could have sampled (its output stays in the support)."""
    top_p, top_k = SAMPLINGS["top-p"], SAMPLINGS["top-k"]
    colder = decode(target, proposer("eagle4-chain", target, datastore), prompts,
                    Sampling(0.8 * top_k.temperature, top_k=top_k.top_k))
    verdict = check(twin, colder, top_k)
    assert verdict.outside_support == 0 and verdict.p_surprisal < ALPHA, verdict
    wider = decode(target, proposer("eagle4-chain", target, datastore), prompts,
                   Sampling(top_k.temperature, top_k=top_k.top_k + 1))
    assert check(twin, wider, top_k).outside_support > 0
    import reference_eagle4.engine as engine

    lenient = LenientVerifier(engine)
    monkeypatch.setattr(engine, "draw", lenient.draw_and_keep)
    monkeypatch.setattr(engine, "walk", lenient.walk)
    verdict = check(twin, decode(target, proposer("eagle4-chain", target, datastore), prompts, top_k), top_k)
    assert verdict.outside_support == 0 and verdict.p_uniform_drafted < ALPHA, verdict
    assert verdict.p_surprisal_drafted < ALPHA, verdict
