"""The C element-wise layer kernels compute what PyTorch computes (to a rounding), row by row as if alone,
and leave autograd to PyTorch."""

import pytest
import torch
import torch.nn.functional as F

from reference_eagle4.kernels import layer_ops
from reference_eagle4.model import ModelArgs, Transformer, rope_tables

TOL = {torch.float32: dict(rtol=1e-5, atol=1e-5), torch.bfloat16: dict(rtol=1.6e-2, atol=1e-2)}


def randn(*shape: int, dtype: torch.dtype, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


def test_the_library_builds_here():
    assert layer_ops.library() is not None, "no C compiler, or it failed (see the warning)"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shape", [(1, 576), (2, 7, 576), (5, 37)])
def test_norms_and_gate_match_pytorch(dtype, shape):
    x, r, w = randn(*shape, dtype=dtype), randn(*shape, dtype=dtype, seed=1), randn(shape[-1], dtype=dtype, seed=2)
    torch.testing.assert_close(layer_ops.rms_norm(x, w, 1e-5), F.rms_norm(x, (shape[-1],), w, 1e-5), **TOL[dtype])
    total, normed = layer_ops.add_rms_norm(x, r, w, 1e-5)
    assert torch.equal(total, x + r)                        # one rounding of the sum, as PyTorch's add
    torch.testing.assert_close(normed, F.rms_norm(x + r, (shape[-1],), w, 1e-5), **TOL[dtype])
    gu = randn(*shape[:-1], 2 * shape[-1], dtype=dtype, seed=3) * 4
    g, u = gu.float().chunk(2, -1)
    torch.testing.assert_close(layer_ops.silu_mul(gu), (F.silu(g) * u).to(dtype), **TOL[dtype])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_each_row_is_computed_as_if_alone(dtype):
    x, r, w = randn(9, 576, dtype=dtype), randn(9, 576, dtype=dtype, seed=1), randn(576, dtype=dtype, seed=2)
    gu = randn(9, 3072, dtype=dtype, seed=3)
    together = (layer_ops.rms_norm(x, w, 1e-5), layer_ops.add_rms_norm(x, r, w, 1e-5)[1], layer_ops.silu_mul(gu))
    for i in range(9):
        alone = (layer_ops.rms_norm(x[i:i + 1], w, 1e-5), layer_ops.add_rms_norm(x[i:i + 1], r[i:i + 1], w, 1e-5)[1],
                 layer_ops.silu_mul(gu[i:i + 1]))
        assert all(torch.equal(t[i], a[0]) for t, a in zip(together, alone)), f"row {i}"


def test_autograd_goes_through_pytorch():
    x = randn(3, 64, dtype=torch.float32).requires_grad_()
    w = torch.ones(64, requires_grad=True)
    layer_ops.rms_norm(x, w, 1e-5).sum().backward()
    assert x.grad is not None and w.grad is not None


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("head_dim", [16, 64])
def test_rope_store_matches_the_pytorch_step(dtype, head_dim, monkeypatch):
    """The C step's queries and cache writes equal PyTorch's over the tables in the model dtype, to a
    rounding (C rotates in fp32 with the fp32 tables), for two sequences of different lengths."""
    args = ModelArgs(dim=4 * head_dim, n_layers=1, n_heads=4, n_kv_heads=2, head_dim=head_dim, intermediate=64,
                     vocab_size=32, norm_eps=1e-5, rope_theta=10000.0, max_position=256, tie_embeddings=False)
    model = Transformer(args).to(dtype)
    model.rope_cos, model.rope_sin = rope_tables(args)
    model.requires_grad_(False)
    lens = torch.tensor([17, 40])
    pos = (lens[:, None] + torch.tensor([[0, 1, 1, 2, 3]] * 2)).contiguous()      # a tree's depths
    qkv = randn(2, 5, (4 + 2 * 2) * head_dim, dtype=dtype)
    results = []
    for lib in (layer_ops.library(), None):
        monkeypatch.setattr(layer_ops, "library", lambda lib=lib: lib)
        cache = model.new_cache(2, 64)
        q = model._rope_store(lens, pos, cache)(qkv, cache.k[0], cache.v[0])
        results.append((q, cache.k[0], cache.v[0]))
    (q, k, v), (q_ref, k_ref, v_ref) = results
    torch.testing.assert_close(q, q_ref, **TOL[dtype])
    torch.testing.assert_close(k, k_ref, **TOL[dtype])
    assert torch.equal(v, v_ref)
    assert k[0, :, :17].abs().sum() == 0 and k[0, :, 17:22].abs().sum() > 0     # written at each length
