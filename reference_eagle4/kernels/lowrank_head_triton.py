"""The Triton kernels behind `lowrank_topk` (semantics and PyTorch twin: `lowrank_head.py`).

A two-level top-K, because sorting is what costs on a GPU, not scoring: a bitonic running top-K per
256-column tile is slower than the full head's matmul at a 128k vocabulary. Here the scoring kernel runs (hn . A) . B
on the tensor cores tile by tile, writes the fp32 scores and each group of GROUP columns' maximum. The K
best elements of a row lie in the K groups with the largest maxima (a group outside them has K larger
maxima, K distinct elements above all of its own), so `torch.topk` over V / GROUP maxima, then over the
K * GROUP scores of the chosen groups, finds them without sorting the vocabulary (both selections in
one Triton program a row with `tl.topk` is slower than these two calls). A last kernel computes
the exact logits hn . W[idx] of the winners.
"""

import torch
import triton
import triton.language as tl
from torch import Tensor

BLOCK_N = 16           # rows per scoring program: tl.dot's smallest M (fewer rows are masked loads)
BLOCK_V = 256          # vocabulary columns per scoring tile
BLOCK_R = 64           # rank chunk of the scoring matmul
GROUP = 32             # columns per group maximum
BLOCK_H = 1024         # hidden chunk of the exact logits


@triton.jit
def _score_kernel(U, Bm, S, GMAX, N, V, R, sun, sur, sbr, sbv, ssn, sgn,
                  BLOCK_N: tl.constexpr, BLOCK_V: tl.constexpr, BLOCK_R: tl.constexpr, GROUP: tl.constexpr,
                  PREC: tl.constexpr):
    """S[n, tile] = u[n] . B[:, tile] in fp32 (-inf past V), GMAX[n, group] = each group's maximum."""
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    cols = tl.program_id(1) * BLOCK_V + tl.arange(0, BLOCK_V)
    row_ok = rows < N
    col_ok = cols < V
    offs_r = tl.arange(0, BLOCK_R)
    s = tl.zeros([BLOCK_N, BLOCK_V], tl.float32)
    for r0 in range(0, R, BLOCK_R):
        r = r0 + offs_r
        u = tl.load(U + rows[:, None] * sun + r[None, :] * sur, mask=row_ok[:, None] & (r < R)[None, :], other=0.0)
        b = tl.load(Bm + r[:, None] * sbr + cols[None, :] * sbv, mask=(r < R)[:, None] & col_ok[None, :],
                    other=0.0)
        s = tl.dot(u, b, s, input_precision=PREC)
    s = tl.where(col_ok[None, :], s, float("-inf"))
    rows64 = rows.to(tl.int64)
    tl.store(S + rows64[:, None] * ssn + cols[None, :], s, mask=row_ok[:, None])
    gmax = tl.max(tl.reshape(s, [BLOCK_N, BLOCK_V // GROUP, GROUP]), 2)
    groups = tl.program_id(1) * (BLOCK_V // GROUP) + tl.arange(0, BLOCK_V // GROUP)
    tl.store(GMAX + rows64[:, None] * sgn + groups[None, :], gmax, mask=row_ok[:, None])


@triton.jit
def _exact_logits_kernel(HN, W, IDX, OUT, H, K, shn, shh, swv, swh, BLOCK_H: tl.constexpr):
    """OUT[n, j] = hn[n] . W[IDX[n, j]] in fp32: one program per (row, candidate)."""
    n = tl.program_id(0).to(tl.int64)
    j = tl.program_id(1)
    row = tl.load(IDX + n * K + j)
    offs_h = tl.arange(0, BLOCK_H)
    acc = tl.zeros([BLOCK_H], tl.float32)
    for h0 in range(0, H, BLOCK_H):
        h = h0 + offs_h
        w = tl.load(W + row * swv + h * swh, mask=h < H, other=0.0)
        x = tl.load(HN + n * shn + h * shh, mask=h < H, other=0.0)
        acc += w.to(tl.float32) * x.to(tl.float32)
    tl.store(OUT + n * K + j, tl.sum(acc, 0))


def lowrank_topk_triton(hn: Tensor, A: Tensor, B: Tensor, W: Tensor, K: int,
                        out: tuple[Tensor, Tensor] | None = None) -> tuple[Tensor, Tensor]:
    """The Triton kernels; `out` = (logits, idx) buffers to fill."""
    N, H = hn.shape
    R, V = B.shape
    if A.shape != (H, R) or W.shape != (V, H):
        raise ValueError(f"shapes do not fit: hn {tuple(hn.shape)}, A {tuple(A.shape)}, B {tuple(B.shape)}, "
                         f"W {tuple(W.shape)}")
    if not 1 <= K <= V:
        raise ValueError(f"K must be in 1..{V} (the vocabulary), got {K}")
    u = (hn @ A).to(B.dtype)
    tiles = triton.cdiv(V, BLOCK_V)
    groups = tiles * (BLOCK_V // GROUP)
    scores = torch.empty(N, tiles * BLOCK_V, dtype=torch.float32, device=hn.device)
    gmax = torch.empty(N, groups, dtype=torch.float32, device=hn.device)
    _score_kernel[(triton.cdiv(N, BLOCK_N), tiles)](   # the row blocks of one tile run together: B from L2
        u, B, scores, gmax, N, V, R, *u.stride(), *B.stride(), scores.stride(0), gmax.stride(0),
        BLOCK_N=BLOCK_N, BLOCK_V=BLOCK_V, BLOCK_R=BLOCK_R, GROUP=GROUP,
        PREC="ieee" if B.dtype == torch.float32 else None, num_warps=4)
    best_groups = gmax.topk(min(K, groups), dim=1).indices                     # [N, <= K]
    cols = (best_groups[:, :, None] * GROUP + torch.arange(GROUP, device=hn.device)).flatten(1)
    pick = scores.gather(1, cols).topk(K, dim=1).indices
    logits, idx = out if out is not None else (
        torch.empty(N, K, dtype=torch.float32, device=hn.device),
        torch.empty(N, K, dtype=torch.int64, device=hn.device))
    torch.gather(cols, 1, pick, out=idx)
    _exact_logits_kernel[(N, K)](hn, W, idx, logits, H, K, *hn.stride(), *W.stride(), BLOCK_H=BLOCK_H)
    return logits, idx
