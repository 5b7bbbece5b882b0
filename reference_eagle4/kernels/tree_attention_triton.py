"""The Triton kernel behind `tree_attention` (semantics and PyTorch twin: `tree_attention.py`).

The work is memory-bound: each step reads every sequence's whole KV cache once. The kernel runs one
program per (query block, key split, sequence x kv head) and loads each K/V block once for all the query
heads of its GQA group and all the tree tokens of the block, accumulating in fp32 with an online softmax
(base-2 exponentials). At batch 1 a sequence has too few kv heads to fill the GPU, so the key range is
split across programs (flash-decoding) and a second small kernel merges the partial results by
log-sum-exp. Imported only where Triton is wanted: importing Triton fixes interpreter-or-GPU mode.
"""

import math

import torch
import triton
import triton.language as tl
from torch import Tensor

from reference_eagle4.kernels.tree_attention import MAX_TREE

BLOCK_N = 64           # keys per block
MAX_ROWS = 128         # query rows (heads x tokens) per program: ~190 registers at D = 128, 8 warps (sm_90)
NUM_STAGES = 4         # K/V blocks in flight per program
LOG2E = 1.4426950408889634


@triton.jit
def _attend(q, k_base, v_base, skn, skd, svn, svd, pos, key_ok, vis, offs_d, d_ok, m_i, l_i, acc,
            qk_scale, PREC: tl.constexpr):
    """One key block of the online softmax (base-2 exponentials; rows that see nothing stay at zero)."""
    kv_mask = key_ok[:, None] & d_ok[None, :]
    k = tl.load(k_base + pos[:, None] * skn + offs_d[None, :] * skd, mask=kv_mask, other=0.0)
    v = tl.load(v_base + pos[:, None] * svn + offs_d[None, :] * svd, mask=kv_mask, other=0.0)
    s = tl.dot(q, tl.trans(k), input_precision=PREC) * qk_scale
    s = tl.where(vis, s, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(s, 1))
    m_ref = tl.where(m_new == float("-inf"), 0.0, m_new)
    p = tl.exp2(s - m_ref[:, None])
    alpha = tl.exp2(m_i - m_ref)
    l_i = l_i * alpha + tl.sum(p, 1)
    acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PREC)
    return m_new, l_i, acc


@triton.jit
def _tree_attn_kernel(
        Q, K, V, LENS, BITS, O, PART_O, PART_LSE,
        qk_scale, T, HEAD_DIM, N_KV, chunk, n_splits,
        sqb, sqh, sqt, sqd, skb, skh, skn, skd, svb, svh, svn, svd, smb, smt, sob, soh, sot, sod,
        G: tl.constexpr, G_PAD: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_N: tl.constexpr,
        BLOCK_D: tl.constexpr, SPLIT: tl.constexpr, PREC: tl.constexpr):
    pid_t = tl.program_id(0)       # fastest: the query blocks of one K/V chunk run together and share L2
    split = tl.program_id(1)
    pid_bh = tl.program_id(2)
    b = pid_bh // N_KV
    kvh = pid_bh % N_KV

    rows = tl.arange(0, G_PAD * BLOCK_T)                  # row = (head in group) * BLOCK_T + token
    g = rows // BLOCK_T
    t = pid_t * BLOCK_T + rows % BLOCK_T
    row_ok = (g < G) & (t < T)
    head = kvh * G + g
    offs_d = tl.arange(0, BLOCK_D)
    d_ok = offs_d < HEAD_DIM

    b64 = b.to(tl.int64)
    q = tl.load(Q + b64 * sqb + head[:, None] * sqh + t[:, None] * sqt + offs_d[None, :] * sqd,
                mask=row_ok[:, None] & d_ok[None, :], other=0.0)
    bits = tl.load(BITS + b64 * smb + t * smt, mask=row_ok, other=0)
    k_base = K + b64 * skb + kvh.to(tl.int64) * skh
    v_base = V + b64 * svb + kvh.to(tl.int64) * svh
    length = tl.load(LENS + b).to(tl.int32)
    lo = split * chunk
    hi = tl.minimum(lo + chunk, length + T)

    m_i = tl.full([G_PAD * BLOCK_T], float("-inf"), tl.float32)
    l_i = tl.zeros([G_PAD * BLOCK_T], tl.float32)
    acc = tl.zeros([G_PAD * BLOCK_T, BLOCK_D], tl.float32)
    offs_n = tl.arange(0, BLOCK_N)
    prefix_hi = tl.minimum(hi, length)
    for start in range(lo, prefix_hi, BLOCK_N):           # prefix: visible to every query
        pos = start + offs_n
        key_ok = pos < prefix_hi
        m_i, l_i, acc = _attend(q, k_base, v_base, skn, skd, svn, svd, pos, key_ok, key_ok[None, :],
                                offs_d, d_ok, m_i, l_i, acc, qk_scale, PREC)
    for start in range(tl.maximum(lo, length), hi, BLOCK_N):   # the new tokens: the tree bitmask
        pos = start + offs_n
        key_ok = pos < hi
        rel = tl.minimum(pos - length, 63).to(tl.int64)   # clamped: a shift by >= 64 is undefined
        seen = ((bits[:, None] >> rel[None, :]) & 1) != 0
        m_i, l_i, acc = _attend(q, k_base, v_base, skn, skd, svn, svd, pos, key_ok, key_ok[None, :] & seen,
                                offs_d, d_ok, m_i, l_i, acc, qk_scale, PREC)

    l_ref = tl.where(l_i == 0.0, 1.0, l_i)
    out = acc / l_ref[:, None]
    mask = row_ok[:, None] & d_ok[None, :]
    if not SPLIT:
        tl.store(O + b64 * sob + head[:, None] * soh + t[:, None] * sot + offs_d[None, :] * sod,
                 out.to(O.dtype.element_ty), mask=mask)
    else:
        part = ((b64 * (N_KV * G) + head) * n_splits + split) * T + t
        tl.store(PART_O + part[:, None] * HEAD_DIM + offs_d[None, :], out, mask=mask)
        lse = tl.where(l_i == 0.0, float("-inf"), m_i + tl.log2(l_ref))
        tl.store(PART_LSE + part, lse, mask=row_ok)


@triton.jit
def _merge_splits_kernel(PART_O, PART_LSE, O, T, HEAD_DIM, N_HEADS, n_splits, sob, soh, sot, sod,
                         S_PAD: tl.constexpr, BLOCK_D: tl.constexpr):
    """out = sum_s 2^(lse_s - lse) * out_s for one (sequence, head, token)."""
    bh = tl.program_id(0).to(tl.int64)
    t = tl.program_id(1)
    offs_s = tl.arange(0, S_PAD)
    offs_d = tl.arange(0, BLOCK_D)
    part = (bh * n_splits + offs_s) * T + t
    lse = tl.load(PART_LSE + part, mask=offs_s < n_splits, other=float("-inf"))
    m = tl.max(lse, 0)
    w = tl.exp2(lse - tl.where(m == float("-inf"), 0.0, m))
    denom = tl.sum(w, 0)
    o = tl.load(PART_O + part[:, None] * HEAD_DIM + offs_d[None, :],
                mask=(offs_s < n_splits)[:, None] & (offs_d < HEAD_DIM)[None, :], other=0.0)
    out = tl.sum(w[:, None] * o, 0) / tl.where(denom == 0.0, 1.0, denom)
    b = bh // N_HEADS
    h = bh % N_HEADS
    tl.store(O + b * sob + h * soh + t * sot + offs_d * sod, out.to(O.dtype.element_ty),
             mask=offs_d < HEAD_DIM)


def _num_warps(rows: int) -> int:
    """4 warps for up to 64 query rows a program, 8 above: the faster of the two at each size on an H200
    (`python -m reference_eagle4.kernels.bench --sweep` times both)."""
    return 4 if rows <= 64 else 8


def _num_splits(programs: int, kv_len: int, device: torch.device) -> int:
    """Key splits for one wave of programs, one on each SM, each split keeping at least 4 key blocks. On an
    H200 this count is about as fast as the best forced split count at every batch, context and tree size
    (`kernels.bench` times forced counts too); two waves' worth are slower, and so are fewer splits chosen
    to keep the splits' fp32 partial results (written and read back) small against the K/V bytes."""
    if device.type != "cuda":
        return 1
    sms = torch.cuda.get_device_properties(device).multi_processor_count
    return max(1, min(sms // programs, kv_len // (4 * BLOCK_N), 64))


def tree_attention_triton(q: Tensor, k: Tensor, v: Tensor, lengths: Tensor, tree_bits: Tensor,
                          scale: float | None = None, kv_len: int | None = None, num_splits: int | None = None,
                          out: Tensor | None = None) -> Tensor:
    """The Triton kernel; `num_splits` forces the key split count (tests), `out` receives the result."""
    B, n_heads, T, D = q.shape
    n_kv = k.shape[1]
    if not 1 <= T <= MAX_TREE:
        raise ValueError(f"1..{MAX_TREE} tree tokens per sequence, got {T}")
    if n_heads % n_kv or k.shape != v.shape or k.shape[0] < B or k.shape[-1] != D:
        raise ValueError(f"shapes do not fit: q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}")
    if tree_bits.shape != (B, T) or tree_bits.dtype != torch.int64:
        raise ValueError(f"tree_bits must be int64 [{B}, {T}], got {tree_bits.dtype} {tuple(tree_bits.shape)}")
    if kv_len is None:
        kv_len = int(lengths.max()) + T
    kv_len = min(kv_len, k.shape[2])
    G = n_heads // n_kv
    G_PAD = triton.next_power_of_2(G)
    BLOCK_T = max(16 // G_PAD, min(triton.next_power_of_2(T), max(1, MAX_ROWS // G_PAD)))
    BLOCK_D = max(16, triton.next_power_of_2(D))
    q_blocks = triton.cdiv(T, BLOCK_T)
    splits = num_splits or _num_splits(q_blocks * B * n_kv, kv_len, q.device)
    chunk = triton.cdiv(triton.cdiv(kv_len, splits), BLOCK_N) * BLOCK_N
    splits = triton.cdiv(kv_len, chunk)
    if out is None:
        out = torch.empty_like(q)
    if splits > 1:
        part_o = torch.empty(B * n_heads * splits * T * D, dtype=torch.float32, device=q.device)
        part_lse = torch.empty(B * n_heads * splits * T, dtype=torch.float32, device=q.device)
    else:
        part_o = part_lse = out                                # unused
    scale = 1.0 / math.sqrt(D) if scale is None else scale
    _tree_attn_kernel[(q_blocks, splits, B * n_kv)](
        q, k, v, lengths, tree_bits, out, part_o, part_lse,
        scale * LOG2E, T, D, n_kv, chunk, splits,
        *q.stride(), *k.stride(), *v.stride(), *tree_bits.stride(), *out.stride(),
        G=G, G_PAD=G_PAD, BLOCK_T=BLOCK_T, BLOCK_N=BLOCK_N, BLOCK_D=BLOCK_D, SPLIT=splits > 1,
        PREC="ieee" if q.dtype == torch.float32 else None, num_warps=_num_warps(G_PAD * BLOCK_T),
        num_stages=NUM_STAGES)
    if splits > 1:
        _merge_splits_kernel[(B * n_heads, T)](
            part_o, part_lse, out, T, D, n_heads, splits, *out.stride(),
            S_PAD=triton.next_power_of_2(splits), BLOCK_D=BLOCK_D)
    return out
