"""The drafter's low-rank head as one C call proposes what the head's definition says: the k best of the K
best low-rank candidates by their exact logits, with their log-probabilities."""

import pytest
import torch

from reference_eagle4.drafters.eagle4_model import Eagle4Config, Eagle4Drafter
from reference_eagle4.kernels import lowrank_head_cpu
from reference_eagle4.kernels.lowrank_head_cpu import LowrankHeadCPU


def head(H: int, r: int, V: int, dtype: torch.dtype, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    A = (torch.randn(r, H, generator=g) / H ** 0.5).to(dtype)
    B = torch.randn(V, r, generator=g).to(dtype)
    W = (torch.randn(V, H, generator=g) / H ** 0.5).to(dtype)
    return A, B, W


def definition(hn, A, B, W, K: int, k: int):
    """In float64 from the kernel's own roundings (u and B in bf16), so only summation order differs."""
    u = (hn.double() @ A.double().T).to(torch.bfloat16).double()
    scores = u @ B.to(torch.bfloat16).double().T
    cand = scores.topk(K, dim=-1).indices
    exact = torch.einsum("nkh,nh->nk", W.double()[cand], hn.double())
    logp, pos = exact.log_softmax(-1).topk(k, dim=-1)
    return logp, cand.gather(1, pos)


def test_the_library_builds_here():
    assert lowrank_head_cpu.library() is not None, "no C compiler, or it failed (see the warning)"


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("N,H,r,V,K,k", [
    (1, 576, 64, 32768, 64, 8),      # the default drafter's shapes: one sequence's root
    (8, 576, 64, 32768, 64, 8),      # a level of 8 nodes
    (13, 64, 7, 1000, 20, 20),       # odd rank, a vocabulary that is not a multiple of 16, k = K
    (40, 576, 64, 32768, 64, 8),     # a batch-8 level: full 16-row tiles and a remainder (AMX where present)
    (6, 64, 80, 500, 16, 4),         # rank above 64: vector scoring on every CPU
    (3, 40, 4, 300, 1, 1),
])
def test_the_kernel_follows_the_definition(dtype, N, H, r, V, K, k):
    A, B, W = head(H, r, V, dtype, seed=N)
    hn = torch.randn(N, H, generator=torch.Generator().manual_seed(1)).to(dtype)
    logp, idx = LowrankHeadCPU.create(A, B, W)(hn, K, k)
    want_logp, want_idx = definition(hn, A, B, W, K, k)
    assert logp.shape == idx.shape == (N, k) and idx.dtype == torch.long
    assert (idx == want_idx).float().mean() > 0.97        # a near-tie may swap places, no more
    same = idx == want_idx
    torch.testing.assert_close(logp.double()[same], want_logp[same], atol=1e-4, rtol=1e-4)
    assert (logp[:, 1:] <= logp[:, :-1]).all()             # best first


def test_a_lone_winner_in_the_last_partial_block_is_found():
    A, B, W = head(32, 4, 1000, torch.float32)
    B[:] = -1.0
    B[997] = 5.0                                            # in the last block, which holds 8 of 16 rows
    hn = (A.T @ torch.ones(4)).unsqueeze(0)                 # u > 0: row 997 scores highest
    _, idx = LowrankHeadCPU.create(A, B, W)(hn, 1, 1)
    assert idx.item() == 997


def test_bad_k_is_refused_with_the_limits():
    A, B, W = head(16, 4, 100, torch.float32)
    with pytest.raises(ValueError, match=r"k \(9\) <= K \(8\)"):
        LowrankHeadCPU.create(A, B, W)(torch.randn(1, 16), 8, 9)


def small_drafter() -> Eagle4Drafter:
    cfg = Eagle4Config(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                       intermediate_size=96, vocab_size=500, target_hidden_size=64, rank=8, topk_candidates=32)
    d = Eagle4Drafter(cfg)
    g = torch.Generator().manual_seed(3)
    d.attach(torch.randn(500, 64, generator=g), torch.randn(500, 64, generator=g))
    return d


def test_a_packed_drafter_drafts_the_same_tokens_with_the_c_head():
    d = small_drafter().eval()
    h = torch.randn(6, 64, generator=torch.Generator().manual_seed(4))
    with torch.inference_mode():
        want = d.topk(h, 5)                                 # unpacked: the PyTorch path
        d.pack()
        assert d.cpu_head is not None
        got = d.topk(h, 5)
    assert torch.equal(got[1], want[1])
    torch.testing.assert_close(got[0], want[0], atol=1e-4, rtol=1e-4)


def test_the_kernel_bench_times_the_head_beside_its_pytorch_path():
    from reference_eagle4.kernels import cpu_bench

    rows = cpu_bench.head_rows(repeats=1)
    assert len(rows) == 2 + 6, rows
    for row in rows[2:]:
        ours, theirs = (float(x) for x in row.strip("| ").split(" | ")[2:])
        assert ours > 0 and theirs > 0
