"""The CPU's exact attention kernel: it builds, it computes attention, and a token's output is bit-for-bit
the same whatever else the step holds, which is what makes greedy verification equal vanilla decoding."""

import pytest
import torch

import reference_eagle4.attention as attention_mod
from reference_eagle4.kernels.exact_attention_cpu import exact_attention_cpu, library
from reference_eagle4.attention import float64_attention, visible_keys


def random_tree(T: int, g: torch.Generator) -> torch.Tensor:
    """[T, T] ancestors-or-self mask of a random tree whose nodes come after their parents."""
    parent = [-1] + [int(torch.randint(0, i, (1,), generator=g)) for i in range(1, T)]
    mask = torch.zeros(T, T, dtype=torch.bool)
    for i in range(T):
        j = i
        while j >= 0:
            mask[i, j] = True
            j = parent[j]
    return mask


def step(B, H, KV, T, D, lens, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    S = max(lens) + T + 5
    k = torch.randn(B, KV, S, D, generator=g).to(dtype)
    v = torch.randn(B, KV, S, D, generator=g).to(dtype)
    q = torch.randn(B, H, T, D, generator=g).to(dtype)
    mask = torch.stack([random_tree(T, g) for _ in range(B)])
    return q, k, v, torch.tensor(lens), mask


def test_the_kernel_builds_here():
    assert library() is not None, "no C compiler, or it failed (see the warning): exact steps fall back to float64"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("H,KV,D", [(4, 4, 16), (9, 3, 64)])
def test_it_computes_attention_over_prefix_and_tree_row(dtype, H, KV, D):
    q, k, v, lens, mask = step(2, H, KV, 13, D, [37, 140], dtype, seed=H + D)
    out = exact_attention_cpu(q, k, v, lens, mask)
    S = int(lens.max()) + 13
    vis = visible_keys(lens, mask, S)
    bias = torch.zeros(2, KV, H // KV, 13, S, dtype=torch.float64)
    bias.masked_fill_(~vis[:, None, None], float("-inf"))
    ref = float64_attention(q.double(), k[:, :, :S].double(), v[:, :, :S].double(), bias.view(2 * KV, -1, S))
    assert out.dtype == dtype
    tol = 1e-5 if dtype == torch.float32 else 1e-2
    torch.testing.assert_close(out.double(), ref, atol=tol, rtol=tol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("D", [32, 48])          # head sizes of 2 and 3 16-lane blocks (the kernel pairs them)
def test_each_token_gets_what_it_would_get_decoded_alone(dtype, D):
    """A node sees its prefix and ancestors at other cache positions (siblings between) and shares the step
    with other rows and sequences; decoded alone, its keys are contiguous and it is the only query."""
    H, KV, T = 6, 2, 20
    lens = [15, 33, 64]                            # prefixes that end before, across and on a 16-key block
    q, k, v, lens_t, mask = step(3, H, KV, T, D, lens, dtype, seed=7)
    out = exact_attention_cpu(q, k, v, lens_t, mask)
    for b, L in enumerate(lens):
        for t in range(T):
            seen = mask[b, t].nonzero().squeeze(1)
            n = L + len(seen)
            k1 = torch.zeros(1, KV, n, D, dtype=dtype)
            v1 = torch.zeros_like(k1)
            k1[0, :, :L], v1[0, :, :L] = k[b, :, :L], v[b, :, :L]
            k1[0, :, L:], v1[0, :, L:] = k[b, :, L + seen], v[b, :, L + seen]
            alone = exact_attention_cpu(q[b:b + 1, :, t:t + 1], k1, v1, torch.tensor([n - 1]),
                                        torch.ones(1, 1, 1, dtype=torch.bool))
            assert torch.equal(alone[0, :, 0], out[b, :, t]), f"sequence {b}, token {t}"


def test_a_model_without_the_kernel_keeps_float64_attention(monkeypatch):
    """No C compiler (or a head size the kernel does not take): the cache is float64 and steps still run."""
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).parent))
    from eagle4_helpers import tiny_target

    model = tiny_target()
    assert model.exact_attention == "kernel" and model.new_cache(1, 8).k.dtype == torch.float32
    monkeypatch.setattr(attention_mod, "library", lambda: None)
    assert model.exact_attention == "float64" and model.new_cache(1, 8).k.dtype == torch.float64
    with torch.no_grad():
        logits, _ = model(torch.tensor([[1, 2, 3]]), model.new_cache(1, 8))
    assert torch.isfinite(logits).all()


def test_padding_tokens_are_skipped_and_real_ones_unchanged():
    """A batch pads every tree to the largest; the kernel skips the padding (zeros out) and the real
    tokens' outputs are bit-for-bit those of the unpadded call."""
    q, k, v, lens, mask = step(2, 6, 2, 9, 32, [40, 70], torch.bfloat16, seed=11)
    valid = torch.arange(9)[None, :] < torch.tensor([[9], [4]])
    full = exact_attention_cpu(q, k, v, lens, mask)
    padded = exact_attention_cpu(q, k, v, lens, mask, valid)
    real = valid[:, None, :].expand(-1, 6, -1)                          # [B, H, T]
    assert torch.equal(padded[real], full[real])
    assert (padded[1, :, 4:] == 0).all()


@pytest.mark.parametrize("B,threads", [(1, 2), (1, 4), (2, 4), (2, 5), (1, 16)])
def test_the_bits_do_not_depend_on_how_threads_share_the_heads(B, threads):
    """Threads take whole key heads, split the rows of all heads in equal shares (3 heads on 2 threads)
    or all work on each head (fewer row blocks than threads): every way gives the one-thread bits,
    padding included."""
    q, k, v, lens, mask = step(B, 9, 3, 13, 64, [40, 70][:B], torch.bfloat16, seed=B + threads)
    valid = torch.arange(13)[None, :] < torch.tensor([[13], [6]][:B])
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = exact_attention_cpu(q, k, v, lens, mask, valid)
        torch.set_num_threads(threads)
        many = exact_attention_cpu(q, k, v, lens, mask, valid)
        decode = exact_attention_cpu(q[:, :, :1], k, v, lens, mask[:, :1, :1].contiguous())
        torch.set_num_threads(1)
        decode_one = exact_attention_cpu(q[:, :, :1], k, v, lens, mask[:, :1, :1].contiguous())
    finally:
        torch.set_num_threads(before)
    assert torch.equal(many, one)
    assert torch.equal(decode, decode_one)
