"""The fixed-shape decoding step a CUDA graph records gives the engine's own outputs (run eagerly here: what the
graph replays on a GPU), and the engine replays it only where it applies."""

from __future__ import annotations

import pytest
import torch

from eagle4_helpers import one_thread, tiny_target  # noqa: F401  (fixture)
from reference_eagle4.cuda_graphs import DecodeGraph
from reference_eagle4.engine import Engine, GenerationConfig, Request
from reference_eagle4.proposers import PROPOSERS
from reference_eagle4.verify import Sampling


def decode(method: str, concurrency: int, fixed_shapes: bool, sampling: Sampling = Sampling()):
    target = tiny_target()
    engine = Engine(target, PROPOSERS[method](budget=4), GenerationConfig(24, sampling, concurrency=concurrency),
                    max_len=96)
    assert engine.decode_graph is None                       # no graph on the CPU
    replays = []
    if fixed_shapes:
        graph = DecodeGraph(target, engine.cache, replay=False)
        engine.decode_graph = lambda token: replays.append(1) or graph(token)
    g = torch.Generator().manual_seed(1)
    reqs = [Request(f"q{i}", torch.randint(3, 250, (9 + i,), generator=g).tolist()) for i in range(3)]
    done = {}
    engine.generate(reqs, lambda s: done.__setitem__(s.request.id, (s.output, s.entropies)))
    # one sequence and one token: every step at C = 1; the three sequences at C = 3 finish together, never alone
    assert bool(replays) == (fixed_shapes and concurrency == 1)
    return done


@pytest.mark.parametrize("method,concurrency", [("vanilla", 1), ("vanilla", 3), ("ngram", 1)])
def test_the_fixed_shape_step_decodes_like_the_engine(method, concurrency):
    assert decode(method, concurrency, True) == decode(method, concurrency, False)


def test_the_fixed_shape_step_samples_like_the_engine():
    hot = Sampling(temperature=0.8)
    assert decode("vanilla", 1, True, hot) == decode("vanilla", 1, False, hot)


def test_a_full_cache_is_refused_before_the_step():
    target = tiny_target()
    cache = target.new_cache(1, 8)
    cache.lengths[0] = 8
    with pytest.raises(ValueError, match="KV cache overflow: 9 > 8"):
        DecodeGraph(target, cache, replay=False)(torch.tensor([[3]]))
