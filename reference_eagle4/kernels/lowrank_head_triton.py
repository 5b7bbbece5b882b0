"""The Triton kernels behind `lowrank_topk` (semantics and PyTorch twin: `lowrank_head.py`).

The kernels never write the [N, V] scores: each program scores a vocabulary chunk tile by tile and keeps a
running top-K per row (bitonic merge), a second kernel merges the chunks' candidates, and a third computes
the exact logits hn . W[idx] for the winners. Scores are fp32 (accumulated from the inputs' dtype).

A candidate is one int64: an order-preserving integer image of its fp32 score in the high 32 bits and its
vocabulary index in the low 32 bits, so a single sort key carries both and no two keys tie.
"""

import torch
import triton
import triton.language as tl
from torch import Tensor

BLOCK_V = 256          # vocabulary columns per scoring tile
BLOCK_R = 64           # rank chunk of the scoring matmul (divided by the rows below 16 rows)
BLOCK_C = 1024         # candidates per step of the merge (at most)
BLOCK_H = 1024         # hidden chunk of the exact logits
EMPTY: tl.constexpr = tl.constexpr(-(2 ** 63))     # the key that loses to every candidate


@triton.jit
def _pack(score, col):
    """fp32 score + index -> int64 key whose signed order is the score's order (ties: larger index)."""
    bits = score.to(tl.int32, bitcast=True)
    key = bits ^ ((bits >> 31) & 0x7FFFFFFF)
    return (key.to(tl.int64) << 32) | col.to(tl.int64)


@triton.constexpr_function
def _log2(n):
    return n.bit_length() - 1


@triton.jit
def _indicator(n_dims: tl.constexpr, j: tl.constexpr):
    """0 / 1 along hypercube axis j (counted from the innermost), broadcastable over the other axes."""
    return tl.reshape(tl.arange(0, 2), [1] * (n_dims - j - 1) + [2] + [1] * j)


@triton.jit
def _compare_and_swap(h, flip, j: tl.constexpr):
    """Sort every pair along hypercube axis j: ascending, or descending where `flip` is 1.

    tl.sort's own version pairs elements through an xor reduction, which Triton's interpreter runs
    element by element in Python; min/max reductions cost the same on a GPU and run as numpy on CPU.
    """
    n_dims: tl.constexpr = _log2(h.numel)
    lo = tl.min(h, n_dims - 1 - j, keep_dims=True)
    hi = tl.max(h, n_dims - 1 - j, keep_dims=True)
    return tl.where((_indicator(n_dims, j) ^ flip) == 1, hi, lo)


@triton.jit
def _merge_stage(h, stage: tl.constexpr, order: tl.constexpr):
    """One bitonic merge over the `stage` innermost axes; order 0 ascending, 1 descending, 2 alternating."""
    if order == 2:
        flip = _indicator(_log2(h.numel), stage)
    else:
        flip = order
    for i in tl.static_range(stage):
        h = _compare_and_swap(h, flip, stage - 1 - i)
    return h


@triton.jit
def _topk(x, KP: tl.constexpr, ORDER: tl.constexpr):
    """The KP largest keys of each row of x [rows, n] (bitonic top-k as in tl.topk), sorted by ORDER."""
    log_n: tl.constexpr = _log2(x.shape[1])
    log_k: tl.constexpr = _log2(KP)
    h = tl.reshape(x, [2] * _log2(x.numel))
    for i in tl.static_range(1, log_k + 1):
        h = _merge_stage(h, i, 2 if i < log_n else ORDER)
    for i in tl.static_range(log_k + 1, log_n + 1):
        h = tl.max(h, _log2(h.numel) - 1 - log_k)
        h = _merge_stage(h, log_k, 2 if i < log_n else ORDER)
    return tl.reshape(h, [x.shape[0], KP])


@triton.jit
def _keep_best(best, keys, KP: tl.constexpr):
    """Merge a block of keys [rows, n] into the running best [rows, KP] (sorted, largest first).

    Skipped when no key beats a row's current K-th best (the common case once the top-K has settled).
    max(best, ascending top-KP of the block) holds the KP largest of the union as a bitonic sequence.
    """
    beats = tl.max(tl.sum((keys > tl.min(best, 1)[:, None]).to(tl.int32), 1), 0)
    if beats > 0:
        merged = tl.maximum(best, _topk(keys, KP, 0))
        best = tl.reshape(_merge_stage(tl.reshape(merged, [2] * _log2(merged.numel)), _log2(KP), 1),
                          [best.shape[0], KP])
    return best


@triton.jit
def _score_topk_kernel(U, Bm, CAND, N, V, R, chunk, sun, sur, sbr, sbv,
                       BLOCK_N: tl.constexpr, BLOCK_V: tl.constexpr, BLOCK_R: tl.constexpr,
                       KP: tl.constexpr, PREC: tl.constexpr):
    """CAND[n, chunk_id, :] = the KP best keys of row n within one vocabulary chunk.

    Fewer than 16 rows skip the tensor cores (tl.dot needs 16): padding rows would cost sorting work.
    """
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    pid_v = tl.program_id(1)
    row_ok = rows < N
    offs_v = tl.arange(0, BLOCK_V)
    offs_r = tl.arange(0, BLOCK_R)
    best = tl.full([BLOCK_N, KP], EMPTY, tl.int64)
    lo = pid_v * chunk
    for v0 in range(lo, tl.minimum(lo + chunk, V), BLOCK_V):
        cols = v0 + offs_v
        col_ok = cols < V
        s = tl.zeros([BLOCK_N, BLOCK_V], tl.float32)
        for r0 in range(0, R, BLOCK_R):
            r = r0 + offs_r
            u = tl.load(U + rows[:, None] * sun + r[None, :] * sur, mask=row_ok[:, None] & (r < R)[None, :],
                        other=0.0)
            b = tl.load(Bm + r[:, None] * sbr + cols[None, :] * sbv, mask=(r < R)[:, None] & col_ok[None, :],
                        other=0.0)
            if BLOCK_N >= 16:
                s = tl.dot(u, b, s, input_precision=PREC)
            else:
                s += tl.sum(u.to(tl.float32)[:, :, None] * b.to(tl.float32)[None, :, :], 1)
        keys = tl.where(col_ok[None, :], _pack(s, cols), EMPTY)
        best = _keep_best(best, keys, KP)
    offs_k = tl.arange(0, KP)
    tl.store(CAND + (rows[:, None].to(tl.int64) * tl.num_programs(1) + pid_v) * KP + offs_k[None, :], best,
             mask=row_ok[:, None])


@triton.jit
def _select_kernel(CAND, IDX, n_cand, K, KP: tl.constexpr, BLOCK_C: tl.constexpr):
    """IDX[n, :K] = indices of the K best keys among row n's candidates, best first."""
    n = tl.program_id(0).to(tl.int64)
    offs_c = tl.arange(0, BLOCK_C)
    best = tl.full([1, KP], EMPTY, tl.int64)
    for c0 in range(0, n_cand, BLOCK_C):
        c = c0 + offs_c
        keys = tl.load(CAND + n * n_cand + c, mask=c < n_cand, other=EMPTY)
        best = _keep_best(best, keys[None, :], KP)
    offs_k = tl.arange(0, KP)
    tl.store(IDX + n * K + offs_k[None, :], best & 0x7FFFFFFF, mask=offs_k[None, :] < K)


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


def _vocab_chunks(V: int, row_blocks: int, device: torch.device) -> int:
    """Enough vocabulary chunks for ~2 programs per SM; fewer chunks mean fewer candidates to merge."""
    tiles = triton.cdiv(V, BLOCK_V)
    if device.type != "cuda":
        return tiles
    sms = torch.cuda.get_device_properties(device).multi_processor_count
    return max(1, min(tiles, triton.cdiv(2 * sms, row_blocks)))


def lowrank_topk_triton(hn: Tensor, A: Tensor, B: Tensor, W: Tensor, K: int, vocab_chunks: int | None = None,
                        out: tuple[Tensor, Tensor] | None = None) -> tuple[Tensor, Tensor]:
    """The Triton kernels; `vocab_chunks` forces the chunk count (tests), `out` = (logits, idx) buffers."""
    N, H = hn.shape
    R, V = B.shape
    if A.shape != (H, R) or W.shape != (V, H):
        raise ValueError(f"shapes do not fit: hn {tuple(hn.shape)}, A {tuple(A.shape)}, B {tuple(B.shape)}, "
                         f"W {tuple(W.shape)}")
    KP = max(2, triton.next_power_of_2(K))      # a hypercube of one element would be a scalar
    if not 1 <= K <= V or KP > BLOCK_V:
        raise ValueError(f"K must be in 1..min(V, {BLOCK_V}), got {K}")
    u = (hn @ A).to(B.dtype)
    BLOCK_N = min(16, triton.next_power_of_2(N))     # 32 rows spill registers on sm_90
    row_blocks = triton.cdiv(N, BLOCK_N)
    chunks = vocab_chunks or _vocab_chunks(V, row_blocks, hn.device)
    chunk = triton.cdiv(triton.cdiv(V, chunks), BLOCK_V) * BLOCK_V
    chunks = triton.cdiv(V, chunk)
    cand = torch.empty(N, chunks, KP, dtype=torch.int64, device=hn.device)
    logits, idx = out if out is not None else (
        torch.empty(N, K, dtype=torch.float32, device=hn.device),
        torch.empty(N, K, dtype=torch.int64, device=hn.device))
    _score_topk_kernel[(row_blocks, chunks)](          # row blocks of one chunk run together: B from L2
        u, B, cand, N, V, R, chunk, *u.stride(), *B.stride(),
        BLOCK_N=BLOCK_N, BLOCK_V=BLOCK_V, BLOCK_R=BLOCK_R if BLOCK_N >= 16 else BLOCK_R // BLOCK_N, KP=KP,
        PREC="ieee" if B.dtype == torch.float32 else None, num_warps=8)
    block_c = min(BLOCK_C, triton.next_power_of_2(chunks * KP))
    _select_kernel[(N,)](cand, idx, chunks * KP, K, KP=KP, BLOCK_C=block_c)
    _exact_logits_kernel[(N, K)](hn, W, idx, logits, H, K, *hn.stride(), *W.stride(), BLOCK_H=BLOCK_H)
    return logits, idx
