"""The reference target must compute what transformers computes, for prefill, decode and draft trees."""

import pytest
import torch

from reference_eagle4.linears import pack_linears
from reference_eagle4.model import TreeLayout, load_transformer
from reference_eagle4.tree import DraftTree


@pytest.fixture(scope="module")
def models(tiny_target):
    from transformers import AutoModelForCausalLM

    hf = AutoModelForCausalLM.from_pretrained(tiny_target, dtype=torch.float32).eval()
    return hf, load_transformer(tiny_target)


def path_to(tree: DraftTree, node: int) -> list[int]:
    """The tokens from the root down to `node`."""
    path = []
    while node >= 0:
        path.insert(0, tree.tokens[node])
        node = tree.parents[node]
    return path


def test_logits_match_transformers_across_cached_chunks(models):
    hf, ours = models
    ids = torch.randint(0, 300, (1, 40), generator=torch.Generator().manual_seed(1))
    cache = ours.new_cache(1, 128)
    with torch.no_grad():
        ref = hf(ids).logits[0]
        first, _ = ours(ids[:, :25], cache)
        cache.keep(0, torch.arange(25))
        rest, _ = ours(ids[:, 25:], cache)
    assert (torch.cat([first[0], rest[0]]) - ref).abs().max() < 1e-4


def test_tree_node_logits_equal_the_logits_of_its_path(models):
    hf, ours = models
    prefix = torch.randint(0, 300, (1, 12), generator=torch.Generator().manual_seed(2))
    tree = DraftTree([5, 7, 9, 11, 13, 17], [-1, 0, 0, 1, 1, 2])   # two branches at the root and at node 1
    cache = ours.new_cache(1, 64)
    with torch.no_grad():
        ours(prefix, cache)
        cache.keep(0, torch.arange(12))
        logits, _ = ours(torch.tensor([tree.tokens]), cache, TreeLayout(tree.mask()[None], torch.tensor([tree.depths])))
        for node in range(len(tree)):
            ref = hf(torch.cat([prefix, torch.tensor([path_to(tree, node)])], 1)).logits[0, -1]
            assert (logits[0, node] - ref).abs().max() < 1e-4, f"node {node}"


def test_keeping_an_accepted_branch_compacts_the_cache(models):
    hf, ours = models
    prefix = torch.randint(0, 300, (1, 10), generator=torch.Generator().manual_seed(3))
    tree = DraftTree([4, 6, 8, 10], [-1, 0, 0, 2])     # keep root -> node 2 -> node 3
    cache = ours.new_cache(1, 64)
    with torch.no_grad():
        ours(prefix, cache)
        cache.keep(0, torch.arange(10))
        ours(torch.tensor([tree.tokens]), cache, TreeLayout(tree.mask()[None], torch.tensor([tree.depths])))
        cache.keep(0, torch.tensor([0, 2, 3]))
        nxt, _ = ours(torch.tensor([[12]]), cache)
        ref = hf(torch.cat([prefix, torch.tensor([[4, 8, 10, 12]])], 1)).logits[0, -1]
    assert int(cache.lengths[0]) == 13
    assert (nxt[0, 0] - ref).abs().max() < 1e-4


@pytest.mark.parametrize("packed", [False, True])
def test_ragged_batch_equals_sequences_run_alone(models, packed):
    """Padding rows change nothing, whether computed (padded) or skipped by every matmul (packed)."""
    _, ours = models
    g = torch.Generator().manual_seed(4)
    a, b = torch.randint(0, 300, (1, 7), generator=g), torch.randint(0, 300, (1, 15), generator=g)
    batch = ours.new_cache(2, 64)
    with torch.no_grad():
        ours(a, batch, first_slot=0)
        batch.keep(0, torch.arange(7))
        ours(b, batch, first_slot=1)
        batch.keep(1, torch.arange(15))
        step = torch.tensor([[3, 4], [5, 0]])                       # second row is one real token + padding
        mask = torch.tensor([[[1, 0], [1, 1]], [[1, 0], [0, 1]]], dtype=torch.bool)
        valid = torch.tensor([[True, True], [True, False]]) if packed else None
        out, hidden = ours(step, batch, TreeLayout(mask, torch.arange(2).expand(2, 2), valid), capture=(2,))
        if packed:
            assert out.shape[0] == 3                                # logits for the real tokens only
            out = torch.stack([out[:2], torch.cat([out[2:], out[2:]])])
        for row, (prefix, toks) in enumerate([(a, [3, 4]), (b, [5])]):
            alone = ours.new_cache(1, 64)
            ours(prefix, alone)
            alone.keep(0, torch.arange(prefix.shape[1]))
            ref, ref_hidden = ours(torch.tensor([toks]), alone, capture=(2,))
            n, P = len(toks), prefix.shape[1]
            assert (out[row, :n] - ref[0]).abs().max() < 1e-5
            assert (hidden[0][row, :n] - ref_hidden[0][0]).abs().max() < 1e-5
            assert (batch.k[:, row, :, P: P + n] - alone.k[:, 0, :, P: P + n]).abs().max() < 1e-5


def test_captured_hidden_states_are_layer_inputs(models):
    hf, ours = models
    ids = torch.randint(0, 300, (1, 9), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        _, hidden = ours(ids, ours.new_cache(1, 32), capture=(1, 3))
        ref = hf(ids, output_hidden_states=True).hidden_states
    assert (hidden[0] - ref[1]).abs().max() < 1e-5
    assert (hidden[1] - ref[3]).abs().max() < 1e-5


def test_packed_linears_keep_the_logits(tiny_target):
    plain, packed = load_transformer(tiny_target), pack_linears(load_transformer(tiny_target))
    ids = torch.randint(0, 300, (2, 6), generator=torch.Generator().manual_seed(6))
    with torch.no_grad():
        a, _ = plain(ids, plain.new_cache(2, 16))
        b, _ = packed(ids, packed.new_cache(2, 16))
    assert (a - b).abs().max() < 1e-4


def test_a_dtype_onednn_cannot_prepack_keeps_plain_linears(tiny_target, monkeypatch):
    """bf16 on a CPU without AVX512-BF16: packing must fall back to F.linear, not fail the run."""
    from reference_eagle4 import linears

    monkeypatch.setitem(linears._PACKABLE, torch.float32, False)
    m = pack_linears(load_transformer(tiny_target))
    assert not any(isinstance(x, linears.PackedLinear) for x in m.modules())
    ids = torch.randint(0, 300, (1, 4), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        logits, _ = m(ids, m.new_cache(1, 8))
    assert torch.isfinite(logits).all()


@pytest.mark.parametrize("attention", ["kernel", "float64"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_verified_trees_reproduce_one_token_decoding_bit_for_bit(dtype, attention, monkeypatch):
    """Greedy speculative decoding equals vanilla only if a node's logits are exactly those of decoding its
    path one token at a time, whatever else the step holds: other branches, a second sequence of another
    length, keys crossing a chunk boundary. SDPA misses this in bf16 (tokens flip); the engine must not,
    with the C kernel or (where it cannot be built) float64 attention."""
    import sys
    from reference_eagle4 import attention as attention_mod
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).parent))
    from eagle4_helpers import tiny_target as random_target

    if attention == "float64":
        monkeypatch.setattr(attention_mod, "library", lambda: None)
    model = pack_linears(random_target(seed=3).to(dtype))
    assert model.exact_attention == attention
    g = torch.Generator().manual_seed(6)
    prefixes = [torch.randint(0, 256, (1, n), generator=g) for n in (59, 130)]
    tree = DraftTree([5, 7, 9, 11, 13, 17, 19, 23], [-1, 0, 0, 1, 1, 2, 4, 6])
    with torch.no_grad():
        batch = model.new_cache(2, 192)
        for slot, p in enumerate(prefixes):
            model(p, batch, first_slot=slot)
            batch.keep(slot, torch.arange(p.shape[1]))
        tokens = torch.tensor([tree.tokens, tree.tokens])
        logits, _ = model(tokens, batch, TreeLayout(tree.mask()[None].expand(2, -1, -1), torch.tensor([tree.depths] * 2)))
        for slot, p in enumerate(prefixes):
            for node in range(len(tree)):
                alone = model.new_cache(1, 192)
                model(p, alone)
                alone.keep(0, torch.arange(p.shape[1]))
                for tok in path_to(tree, node):                   # vanilla: one token per step
                    ref, _ = model(torch.tensor([[tok]]), alone)
                    alone.keep(0, torch.arange(1))
                assert torch.equal(logits[slot, node], ref[0, 0]), f"sequence {slot}, node {node}"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_exact_rows_linears_compute_each_row_as_if_alone(dtype):
    """Row by row, a step's linears must not depend on how many rows the step holds (oneDNN switches kernels
    at one row and, in bf16, above 32): shapes of SmolLM2's projections, 1 to 80 rows."""
    from torch import nn

    from reference_eagle4.linears import can_pack, packed

    if not can_pack(dtype):
        pytest.skip(f"oneDNN cannot prepack {dtype} on this CPU")
    g = torch.Generator().manual_seed(7)
    for k, n in ((576, 3072), (1536, 576), (576, 960)):
        lin = nn.Linear(k, n, bias=False)
        lin.weight.data = (torch.randn(n, k, generator=g) * 0.05).to(dtype)
        exact = packed(lin).rowwise
        x = torch.randn(80, k, generator=g).to(dtype)
        alone = torch.cat([exact(x[i:i + 1]) for i in range(80)])
        for m in (2, 5, 17, 32, 33, 47, 64, 80):
            assert torch.equal(exact(x[:m]), alone[:m]), f"{k}x{n}, {m} rows"


def test_int8_linear_is_close_to_the_linear_it_rounds():
    """Drafter linears with int8 weights (one scale per output row) stay within the rounding of the weights:
    every output is off by at most half a step of its row's scale times the input's L1 norm. Larger calls
    take the original weights, and fp32 layers never get int8 weights (slower there)."""
    from reference_eagle4.linears import Int8Linear, int8_linear
    dtype = torch.bfloat16
    g = torch.Generator().manual_seed(0)
    lin = torch.nn.Linear(96, 40, bias=False)
    with torch.no_grad():
        lin.weight.copy_(torch.randn(40, 96, generator=g))
    assert not isinstance(int8_linear(lin), Int8Linear)
    lin = lin.to(dtype)
    q = int8_linear(lin)
    if not isinstance(q, Int8Linear):
        pytest.skip(f"this torch runs no int8 weights for {dtype} here")
    x = torch.randn(2, 2, 96, generator=g).to(dtype)             # 4 rows: the int8 weights
    y = q(x)
    assert y.shape == (2, 2, 40) and y.dtype == dtype
    out, ref = y.float(), x.float() @ lin.weight.float().T
    step = lin.weight.float().abs().amax(1) / 127
    bound = 0.5 * step[None, None, :] * x.float().abs().sum(-1, keepdim=True)
    slack = 0.02 * ref.abs() + (0.05 if dtype == torch.bfloat16 else 1e-4)          # the output's own rounding
    assert bool(((out - ref).abs() <= bound + slack).all())
    assert not torch.equal(out, ref)                                  # rounded weights, not the originals
    assert q.weight_q.dtype == torch.int8 and q.weight_q.numel() == lin.weight.numel()
    wide = torch.randn(q.INT8_ROWS + 1, 96, generator=g).to(dtype)   # more rows: the original weights
    assert torch.equal(q(wide), q.wide(wide))
    torch.testing.assert_close(q(wide).float(), wide.float() @ lin.weight.float().T, atol=0.05, rtol=0.02)
