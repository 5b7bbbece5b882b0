"""Prefix caching: prompts sharing a system prompt prefill only what differs, with the same outputs."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
from eagle4_helpers import tiny_drafter, tiny_target  # noqa: E402

from reference_eagle4.engine import Engine, GenerationConfig, Request  # noqa: E402
from reference_eagle4.prefix_cache import PrefixCache  # noqa: E402
from reference_eagle4.proposers import PROPOSERS  # noqa: E402

SYSTEM = torch.randint(3, 250, (60,), generator=torch.Generator().manual_seed(5)).tolist()


def prompts() -> list[Request]:
    """Two 'categories' with their own system prompt, plus a repeat and a prompt that shares nothing."""
    g = torch.Generator().manual_seed(1)
    other = torch.randint(3, 250, (40,), generator=g).tolist()
    user = [torch.randint(3, 250, (n,), generator=g).tolist() for n in (7, 12, 3, 9, 15)]
    return [Request("a0", SYSTEM + user[0]), Request("a1", SYSTEM + user[1]), Request("b0", other + user[2]),
            Request("a2", SYSTEM + user[3]), Request("a1-again", SYSTEM + user[1]),
            Request("c0", user[4])]


class Recorder:
    """Wraps a proposer and keeps the prompt hidden states the engine hands to `begin`."""

    def __init__(self, inner):
        self.inner, self.seen = inner, {}

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def begin(self, seq, hidden):
        self.seen[seq.request.id] = [h.clone() for h in hidden]
        self.inner.begin(seq, hidden)


def generate(target, method, C, tokens):
    options = {} if method == "vanilla" else {"drafter": tiny_drafter(target)}   # binding packs a drafter: one each
    proposer = Recorder(PROPOSERS[method](budget=8, **options))
    engine = Engine(target, proposer, GenerationConfig(max_new_tokens=24, concurrency=C, prefix_cache=tokens),
                    max_len=160)
    done = {}
    engine.generate(prompts(), lambda s: done.__setitem__(s.request.id, s))
    return done, proposer.seen


@pytest.fixture(scope="module")
def target():
    return tiny_target()


@pytest.mark.parametrize("C", [1, 3])
@pytest.mark.parametrize("method", ["vanilla", "eagle4-tree"])
def test_cached_prefill_gives_the_same_outputs_and_prompt_features(target, method, C):
    whole, whole_h = generate(target, method, C, 0)
    cached, cached_h = generate(target, method, C, 8192)
    assert {k: s.output for k, s in cached.items()} == {k: s.output for k, s in whole.items()}
    for k in whole_h:                           # the drafter's catch-up sees the same prompt features
        for a, b in zip(whole_h[k], cached_h[k]):
            assert a.shape == b.shape and torch.allclose(a, b, atol=1e-4)
    reused = {k: s.cached_tokens for k, s in cached.items()}
    assert reused["a0"] == 0 and reused["b0"] == 0 and reused["c0"] == 0
    assert reused["a1"] == reused["a2"] == len(SYSTEM)
    assert reused["a1-again"] == len(SYSTEM) + 12 - 1        # a repeat recomputes only its last token
    assert all(s.cached_tokens == 0 for s in whole.values())


def test_lru_keeps_the_most_recent_prompts_and_extensions_replace_their_prefix():
    cache = PrefixCache(8)                                               # room for 8 prompt tokens
    kv = torch.zeros(1, 1, 8, 2)
    t = lambda *ids: torch.tensor(ids)  # noqa: E731
    cache.store(t(1, 2, 3), kv[:, :, :3], kv[:, :, :3], [])
    cache.store(t(1, 2, 3, 4, 5), kv[:, :, :5], kv[:, :, :5], [])      # extends the first: replaces it
    cache.store(t(7, 8), kv[:, :, :2], kv[:, :, :2], [])
    assert cache.match(t(1, 2, 3, 4, 9))[0] == 4
    cache.store(t(6, 6, 6), kv[:, :, :3], kv[:, :, :3], [])             # 10 tokens: evicts (7, 8), the least recent
    assert cache.match(t(7, 8, 9))[0] == 0
    assert cache.match(t(6, 6, 6))[0] == 2                               # the last token is always computed
    assert cache.stats() == {"tokens": 8, "hit_tokens": 6, "prompt_tokens": 11}
    cache.store(t(*range(10, 19)), kv[:, :, :8], kv[:, :, :8], [])      # longer than the whole room: not kept
    assert cache.match(t(*range(10, 19)))[0] == 0 and cache.match(t(6, 6, 6))[0] == 2


def test_interleaved_categories_keep_their_system_prompts():
    """Benchmark categories interleave: a category's next request may come many prompts later. A cache counted
    in tokens, like an engine's KV memory, still holds its system prompt then."""
    system = {c: [c] * 200 for c in range(4)}
    order = [0, 1, 2, 3, 3, 3, 2, 3, 3, 1, 2, 3, 3, 0]                  # category 0 comes back 12 prompts later
    cache, kv = PrefixCache(8192), torch.zeros(1, 1, 240, 2)
    reused = []
    for i, c in enumerate(order):
        prompt = torch.tensor(system[c] + [100 + i] * 30)
        reused.append(cache.match(prompt)[0])
        cache.store(prompt, kv[:, :, :230], kv[:, :, :230], [])
    assert reused[:4] == [0, 0, 0, 0] and all(n == 200 for n in reused[4:])
