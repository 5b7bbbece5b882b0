"""The drafter's C path (kernels/drafter_attention.c, layer_ops' scattered rope stores, the in-place input
norms) computes what its PyTorch path computes, so drafts do not depend on which one a machine runs."""

import sys
from pathlib import Path

import pytest
import torch

from reference_eagle4.kernels import drafter_attention, layer_ops

sys.path.insert(0, str(Path(__file__).parent))
from eagle4_helpers import tiny_drafter, tiny_target  # noqa: E402

TOL = {torch.float32: dict(rtol=1e-4, atol=1e-5), torch.bfloat16: dict(rtol=3e-2, atol=2e-2)}


def test_the_kernel_builds_here():
    assert drafter_attention.library() is not None, "no C compiler, or it failed (see the warning)"


def pytorch_only(monkeypatch):
    monkeypatch.setattr(drafter_attention, "runs_here", lambda *a, **k: False)
    monkeypatch.setattr(layer_ops, "runs_here", lambda *a, **k: False)


def ring_cache(slots: int, nkv: int, R: int, hd: int, dtype: torch.dtype, g: torch.Generator):
    """A ring with empty entries, positions that wrapped, and entries past a query's position."""
    k = torch.randn(slots, nkv, R, hd, generator=g).to(dtype)
    pos = torch.randint(0, 3 * R, (slots, R), generator=g)
    pos[:, ::5] = -1
    return k, torch.randn(slots, nkv, R, hd, generator=g).to(dtype), pos


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("window,inclusive,tree", [(16, False, True), (None, True, False), (16, True, False),
                                                    (None, False, True)])
def test_attention_over_ring_and_tree_matches_pytorch(monkeypatch, dtype, window, inclusive, tree):
    target = tiny_target()
    d = tiny_drafter(target, window=window).to(dtype).requires_grad_(False)
    c = d.cfg
    g = torch.Generator().manual_seed(3)
    B, T, n = 3, 5, 9
    rk, rv, rpos = ring_cache(4, c.num_key_value_heads, 32, c.head_dim, dtype, g)
    slots = torch.tensor([2, 0, 3])
    qpos = torch.randint(40, 50, (B, T), generator=g)
    q = torch.randn(B, T, c.num_attention_heads, c.head_dim, generator=g).to(dtype)
    trees = None
    if tree:
        tk = torch.randn(B, c.num_key_value_heads, 12, c.head_dim, generator=g).to(dtype)
        anc = torch.rand(B, T, n, generator=g) < 0.5
        anc[:, :, 0] = True                              # every query sees a key
        trees = (tk, torch.randn_like(tk), anc)
    rpos[slots, 0] = qpos.min() - 1                      # ... and its slot holds one in every window
    assert drafter_attention.runs_here(q, rk, rv)
    with torch.inference_mode():
        fast = d.attend_cached(q, qpos, (rk, rv, rpos, slots), inclusive, trees)
        pytorch_only(monkeypatch)
        slow = d.attend_cached(q, qpos, (rk, rv, rpos, slots), inclusive, trees)
    assert fast.shape == (B, T, c.num_attention_heads * c.head_dim)
    torch.testing.assert_close(fast.float(), slow.float(), **TOL[dtype])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_inputs_and_scattered_stores_match_pytorch(monkeypatch, dtype):
    target = tiny_target()
    d = tiny_drafter(target).attach(target.embed.weight, target.lm_head.weight).to(dtype).requires_grad_(False)
    d.rope_cos, d.rope_sin = d.rope_cos.float(), d.rope_sin.float()
    d.embed_weight = d.embed_weight.to(dtype)
    c = d.cfg
    g = torch.Generator().manual_seed(5)
    N = 7
    feats = torch.randn(N, 3 * c.target_hidden_size, generator=g).to(dtype)
    tok = torch.randint(0, c.vocab_size, (N,), generator=g)
    pos = torch.randint(0, 200, (N,), generator=g)
    slot, row = torch.tensor([0, 1, 1, 0, 2, 2, 2]), torch.tensor([3, 0, 9, 5, 1, 2, 7])
    outs = []
    assert layer_ops.runs_here(feats, d.input_norm.weight, d.qkv.weight)
    with torch.inference_mode():
        for fast in (True, False):
            if not fast:
                pytorch_only(monkeypatch)
            k = torch.zeros(3, c.num_key_value_heads, 10, c.head_dim, dtype=dtype)
            v = torch.zeros_like(k)
            h, x = d.inputs(feats, tok, fuse=True)
            q = d.project_rows(x, pos, k, v, slot, row)
            outs.append((h, x, q, k, v))
    for a, b in zip(*outs):
        torch.testing.assert_close(a.float(), b.float(), **TOL[dtype])
    assert outs[0][3][slot, :, row].abs().sum() > 0 and outs[0][3][0, :, 0].abs().sum() == 0   # only those rows
