"""`amx_linear`: exact linears in one AMX call for any number of rows (where the CPU has AMX)."""

import pytest
import torch
import torch.nn as nn

from reference_eagle4.kernels import amx_linear
from reference_eagle4.linears import PackedLinear, can_pack

needs_amx = pytest.mark.skipif(amx_linear.library() is None, reason="this CPU (or build) has no AMX")


def weight(n: int, k: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(n, k, generator=g) * 0.05).to(torch.bfloat16)


@needs_amx
def test_matches_an_fp32_product_to_bf16_rounding():
    w = weight(96, 160)
    x = torch.randn(7, 160, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16)
    out = amx_linear.matmul(x, amx_linear.pack(w), 96)
    ref = x.float() @ w.float().T
    assert out.dtype == torch.bfloat16 and out.shape == (7, 96)
    assert torch.allclose(out.float(), ref, rtol=1e-2, atol=1e-3)


@needs_amx
def test_rows_do_not_depend_on_how_many_share_the_call_nor_on_leading_dims():
    """What exact verification needs: a tree node's row equals the same row decoded alone."""
    w = weight(64, 96)
    tiles = amx_linear.pack(w)
    x = torch.randn(70, 96, generator=torch.Generator().manual_seed(2)).to(torch.bfloat16)
    alone = torch.cat([amx_linear.matmul(x[i:i + 1], tiles, 64) for i in range(70)])
    for m in (1, 15, 16, 17, 33, 70):
        assert torch.equal(amx_linear.matmul(x[:m], tiles, 64), alone[:m]), m
    strided = torch.zeros(70, 192, dtype=torch.bfloat16)
    strided[:, ::2] = x                                               # rows with a column stride of 2
    assert torch.equal(amx_linear.matmul(strided[:, ::2], tiles, 64), alone)
    assert torch.equal(amx_linear.matmul(x[:64].view(8, 8, 96), tiles, 64), alone[:64].view(8, 8, 64))


def test_layers_the_kernel_cannot_take_keep_onednn():
    assert amx_linear.pack(weight(64, 96).float()) is None            # fp32
    assert amx_linear.pack(weight(60, 96)) is None                    # outputs not a multiple of 32
    assert amx_linear.pack(weight(64, 100)) is None                   # inputs not a multiple of 32


@needs_amx
@pytest.mark.skipif(not can_pack(torch.bfloat16), reason="oneDNN cannot prepack bf16 here")
def test_a_packed_layer_takes_the_kernel_and_agrees_with_its_onednn_blocks():
    """On the CPUs seen, oneDNN's kernels of up to 32 rows round as the tile products do, so switching
    to the kernel leaves a model's outputs as they were."""
    lin = nn.Linear(576, 960, bias=False, dtype=torch.bfloat16).requires_grad_(False)
    lin.weight.copy_(weight(960, 576))
    layer = PackedLinear(lin)
    assert layer.tiles is not None
    x = torch.randn(40, 576, generator=torch.Generator().manual_seed(3)).to(torch.bfloat16)
    fast = layer.rowwise(x)
    layer.tiles = None
    assert torch.equal(fast, layer.rowwise(x))
