"""The Triton kernels agree with their PyTorch twins, run by Triton's interpreter on CPU tensors.

Every check draws fresh random inputs (ragged lengths, random trees, GQA ratios 1 and 3) and poisons the
output buffers with NaN / -1 first, so an element the kernel forgets to write fails the check. bfloat16 is
left to the GPU check (`make gpu-check`): the interpreter runs bf16 `tl.dot` on the raw bit patterns
(triton-lang/triton#11584).
"""

import importlib
import json
import math
import os
import subprocess
import sys

import pytest
import torch

import reference_eagle4.kernels as kernels

# Triton picks interpreter or GPU mode when it is imported (its standard library is decorated then), and
# nothing imports it before these tests unless a GPU run did: set the mode first, check it in `triton_cpu`.
if "triton" not in sys.modules:
    os.environ["TRITON_INTERPRET"] = "1"

ta = importlib.import_module("reference_eagle4.kernels.tree_attention")   # the package's `tree_attention`
lowrank_head = importlib.import_module("reference_eagle4.kernels.lowrank_head")  # is the function


@pytest.fixture(scope="module")
def triton_cpu():
    """The kernel modules, running in Triton's interpreter; a clear failure (never a skip) without it."""
    try:
        import triton.language as tl
        from triton.runtime.interpreter import InterpretedFunction
    except ImportError as exc:
        pytest.fail(f"the kernel tests need triton ({exc}): pip install -e '.[dev]'")
    if not isinstance(tl.zeros, InterpretedFunction):
        pytest.fail("triton was imported before TRITON_INTERPRET=1 was set; run "
                    "TRITON_INTERPRET=1 pytest tests/reference_eagle4/test_kernels.py")
    return (importlib.import_module("reference_eagle4.kernels.tree_attention_triton"),
            importlib.import_module("reference_eagle4.kernels.lowrank_head_triton"))


# -- inputs ------------------------------------------------------------------------------------------------
def random_tree_mask(T: int, gen: torch.Generator) -> torch.Tensor:
    """bool [T, T] of a random tree, parents first: row i = token i's ancestors and itself."""
    mask = torch.zeros(T, T, dtype=torch.bool)
    for i in range(T):
        if i:
            mask[i] = mask[int(torch.randint(0, i, (1,), generator=gen))]
        mask[i, i] = True
    return mask


def attention_inputs(B: int, n_kv: int, group: int, T: int, D: int, lengths: list[int], dtype: torch.dtype,
                     seed: int) -> dict:
    """q (non-contiguous, as the model's transpose leaves it), one layer of a 2-layer cache seen from slot 1."""
    gen = torch.Generator().manual_seed(seed)
    max_len = max(lengths) + T + 5
    cache_k = torch.randn(2, B + 2, n_kv, max_len, D, generator=gen).to(dtype)
    cache_v = torch.randn(2, B + 2, n_kv, max_len, D, generator=gen).to(dtype)
    q = torch.randn(B, T, n_kv * group, D, generator=gen).to(dtype).transpose(1, 2)
    masks = torch.stack([random_tree_mask(T, gen) for _ in range(B)])
    return dict(q=q, k=cache_k[1, 1:], v=cache_v[1, 1:], lengths=torch.tensor(lengths),
                tree_bits=ta.pack_tree_mask(masks))


def explicit_attention(q, k, v, lengths, tree_bits) -> torch.Tensor:
    """The definition, one query at a time in float64: softmax over the prefix and the visible new tokens."""
    B, n_heads, T, D = q.shape
    group = n_heads // k.shape[1]
    out = torch.zeros(q.shape, dtype=torch.float64)
    for b in range(B):
        L = int(lengths[b])
        for i in range(T):
            keys = list(range(L)) + [L + j for j in range(T) if (int(tree_bits[b, i]) >> j) & 1]
            for h in range(n_heads):
                kk, vv = k[b, h // group, keys].double(), v[b, h // group, keys].double()
                w = torch.softmax(kk @ q[b, h, i].double() / math.sqrt(D), 0) if keys else kk[:, 0]
                out[b, h, i] = w @ vv
    return out


# -- tree attention ----------------------------------------------------------------------------------------
def test_pack_tree_mask_round_trips_all_64_bits():
    gen = torch.Generator().manual_seed(0)
    masks = torch.stack([random_tree_mask(64, gen), torch.ones(64, 64, dtype=torch.bool)])
    bits = ta.pack_tree_mask(masks)
    assert bits.dtype == torch.int64 and int(bits[1, 0]) == -1           # bit 63 set: the sign bit
    assert torch.equal(ta.tree_visibility(torch.zeros(2, dtype=torch.long), bits, 64), masks)


def test_twin_matches_the_explicit_definition():
    x = attention_inputs(B=3, n_kv=2, group=3, T=6, D=8, lengths=[0, 5, 11], dtype=torch.float64, seed=1)
    x["tree_bits"][0, 2] = 0                                              # empty prefix, empty row: zeros
    got = ta.tree_attention_reference(**x)
    want = explicit_attention(**x)
    assert got[0, :, 2].abs().max() == 0
    torch.testing.assert_close(got, want, atol=1e-10, rtol=1e-10)


ATTENTION_CASES = [   # group, T, D, lengths, dtype, splits
    (1, 1, 16, [3, 130], torch.float32, None),
    (3, 7, 32, [0, 70, 129], torch.float32, 3),
    (1, 16, 16, [64, 1], torch.float16, 2),
    (3, 33, 16, [5, 90], torch.float16, None),
    (1, 64, 16, [0, 100], torch.float32, 4),
    (3, 64, 24, [37], torch.float16, 1),
]


@pytest.mark.parametrize("case", range(len(ATTENTION_CASES)))
def test_tree_attention_kernel_matches_its_twin(triton_cpu, case):
    tam, _ = triton_cpu
    group, T, D, lengths, dtype, splits = ATTENTION_CASES[case]
    x = attention_inputs(len(lengths), 2, group, T, D, lengths, dtype, seed=10 + case)
    out = torch.full_like(x["q"], float("nan"))
    got = tam.tree_attention_triton(**x, num_splits=splits, out=out)
    assert got is out
    want = ta.tree_attention_reference(**x)
    tol = 1e-5 if dtype == torch.float32 else 2e-3
    torch.testing.assert_close(got, want, atol=tol, rtol=tol)


def test_tree_attention_kernel_zeroes_queries_that_see_nothing(triton_cpu):
    tam, _ = triton_cpu
    x = attention_inputs(2, 1, 3, 5, 16, [0, 20], torch.float32, seed=3)
    x["tree_bits"][0] = torch.tensor([0, 1, 0, 5, 0])
    out = torch.full_like(x["q"], float("nan"))
    tam.tree_attention_triton(**x, num_splits=2, out=out)
    assert out[0, :, [0, 2, 4]].abs().max() == 0
    torch.testing.assert_close(out, ta.tree_attention_reference(**x), atol=1e-5, rtol=1e-5)


def test_tree_attention_rejects_more_than_64_tree_tokens(triton_cpu):
    tam, _ = triton_cpu
    q, kv = torch.randn(1, 1, 65, 16), torch.randn(1, 1, 80, 16)
    with pytest.raises(ValueError, match="tree tokens"):
        tam.tree_attention_triton(q, kv, kv, torch.tensor([4]), torch.zeros(1, 65, dtype=torch.long))
    with pytest.raises(ValueError, match="tree tokens"):
        ta.pack_tree_mask(torch.ones(1, 65, 65, dtype=torch.bool))


# -- low-rank head -----------------------------------------------------------------------------------------
def head_inputs(N: int, H: int, r: int, V: int, dtype: torch.dtype, seed: int) -> dict:
    """A and B as the drafter holds them: transposed views of its linear layers' weights."""
    gen = torch.Generator().manual_seed(seed)
    lr_a = (torch.randn(r, H, generator=gen) / math.sqrt(H)).to(dtype)
    lr_b = torch.randn(V, r, generator=gen).to(dtype)
    return dict(hn=torch.randn(N, H, generator=gen).to(dtype), A=lr_a.T, B=lr_b.T,
                W=torch.randn(V, H, generator=gen).to(dtype))


def assert_valid_topk(logits, idx, hn, A, B, W, K, tol=1e-4):
    """idx holds K distinct rows whose float64 low-rank scores are a top-K (up to tol), best first, and
    logits are their exact logits."""
    scores = (hn @ A).to(B.dtype).double() @ B.double()
    kth = scores.topk(K, dim=-1).values[:, -1:]
    picked = scores.gather(1, idx)
    assert all(len(set(row.tolist())) == K for row in idx)
    assert (picked >= kth - tol).all()
    assert (picked[:, 1:] <= picked[:, :-1] + tol).all()
    exact = torch.einsum("nkh,nh->nk", W[idx].double(), hn.double())
    torch.testing.assert_close(logits.double(), exact, atol=1e-4, rtol=1e-4)


def test_lowrank_twin_selects_the_best_rows():
    x = head_inputs(N=4, H=32, r=8, V=500, dtype=torch.float32, seed=5)
    logits, idx = lowrank_head.lowrank_topk_reference(**x, K=10)
    assert logits.dtype == torch.float32 and idx.shape == (4, 10)
    assert_valid_topk(logits, idx, **x, K=10)


HEAD_CASES = [   # N, K, V, dtype
    (1, 1, 300, torch.float32),
    (5, 5, 1000, torch.float16),
    (3, 64, 700, torch.float32),          # more winners than groups: every column is a candidate
    (20, 16, 300, torch.float32),         # two row blocks
    (17, 3, 400, torch.float16),
]


@pytest.mark.parametrize("case", range(len(HEAD_CASES)))
def test_lowrank_kernel_matches_its_twin(triton_cpu, case):
    _, lrh = triton_cpu
    N, K, V, dtype = HEAD_CASES[case]
    x = head_inputs(N, 40, 12, V, dtype, seed=20 + case)
    out = (torch.full((N, K), float("nan")), torch.full((N, K), -1, dtype=torch.long))
    logits, idx = lrh.lowrank_topk_triton(**x, K=K, out=out)
    assert logits is out[0] and idx is out[1]
    assert_valid_topk(logits, idx, **x, K=K)
    twin_logits, twin_idx = lowrank_head.lowrank_topk_reference(**x, K=K)
    assert_valid_topk(twin_logits, twin_idx, **x, K=K)
    same = idx == twin_idx
    assert same.float().mean() > 0.9           # near-ties may swap places, but not most of them
    torch.testing.assert_close(logits[same], twin_logits[same], atol=1e-5, rtol=1e-5)


def one_row_scoring(scores: torch.Tensor, seed: int) -> dict:
    """hn, A, B, W whose low-rank scores for one row are exactly `scores`."""
    hn, A = torch.zeros(1, 16), torch.zeros(16, 4)
    hn[0, 0] = A[0, 0] = 1.0
    B = torch.zeros(4, len(scores))
    B[0] = scores
    return dict(hn=hn, A=A, B=B, W=torch.randn(len(scores), 16, generator=torch.Generator().manual_seed(seed)))


def test_lowrank_kernel_orders_negative_scores_and_finds_a_lone_late_winner(triton_cpu):
    """All scores negative (the group maxima start from -inf) and one winner alone in the last, partial
    tile, its group's other columns past the vocabulary."""
    _, lrh = triton_cpu
    gen = torch.Generator().manual_seed(9)
    V, K = 1000, 4
    scores = -(3 + torch.rand(V, generator=gen))
    scores[:256] = -(1 + torch.rand(256, generator=gen))
    scores[V - 3] = -0.5
    _, idx = lrh.lowrank_topk_triton(**one_row_scoring(scores, 9), K=K)
    assert idx[0].tolist() == scores.topk(K).indices.tolist()
    assert idx[0, 0] == V - 3


def test_lowrank_kernel_finds_winners_spread_over_groups_and_crowded_in_one(triton_cpu):
    """Half the K best one per group, half in one group: the first level must keep K groups (not K / GROUP)
    and the second every column of them (not each group's best)."""
    _, lrh = triton_cpu
    gen = torch.Generator().manual_seed(4)
    V, K = 2000, 40
    scores = torch.rand(V, generator=gen)
    scores[0: 20 * lrh.GROUP: lrh.GROUP] += 2.0
    scores[1500:1520] += 2.0
    _, idx = lrh.lowrank_topk_triton(**one_row_scoring(scores, 4), K=K)
    assert idx[0].tolist() == scores.topk(K).indices.tolist()


def test_lowrank_kernel_rejects_k_above_the_vocabulary(triton_cpu):
    _, lrh = triton_cpu
    with pytest.raises(ValueError, match="K must be"):
        lrh.lowrank_topk_triton(**head_inputs(2, 16, 4, 8, torch.float32, seed=6), K=9)


# -- dispatch ----------------------------------------------------------------------------------------------
def test_dispatchers_use_the_twins_off_cuda():
    assert kernels.available() == (torch.cuda.is_available() and importlib.util.find_spec("triton") is not None)
    x = attention_inputs(2, 2, 3, 4, 16, [3, 9], torch.float32, seed=7)
    assert torch.equal(kernels.tree_attention(**x), kernels.tree_attention_reference(**x))
    h = head_inputs(3, 16, 4, 100, torch.float32, seed=8)
    for got, want in zip(kernels.lowrank_topk(**h, K=4), kernels.lowrank_topk_reference(**h, K=4)):
        assert torch.equal(got, want)


def test_the_twins_run_without_importing_triton():
    """Importing Triton fixes interpreter-or-GPU mode for the whole process, so the CPU path never does."""
    code = ("import sys, torch; from reference_eagle4.kernels import tree_attention, lowrank_topk, pack_tree_mask; "
            "q = torch.randn(1, 2, 3, 8); kv = torch.randn(1, 1, 8, 8); "
            "tree_attention(q, kv, kv, torch.tensor([5]), pack_tree_mask(torch.ones(1, 3, 3, dtype=torch.bool))); "
            "lowrank_topk(torch.randn(2, 8), torch.randn(8, 4), torch.randn(4, 50), torch.randn(50, 8), 3); "
            "assert 'triton' not in sys.modules, 'triton imported'")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_kernels_compile_for_hopper_without_spilling(triton_cpu):
    """The interpreter cannot see what the GPU compiler rejects, register spills or unpipelined loads."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    run = subprocess.run([sys.executable, "-m", "reference_eagle4.kernels.sm90"], env=env, capture_output=True,
                         text=True)
    assert run.returncode == 0, run.stdout + run.stderr
    reports = {r["kernel"]: r for r in map(json.loads, run.stdout.splitlines())}
    assert len(reports) == 5 and all(r["spill_stack"] == 0 for r in reports.values())
    assert reports["attention G4 T32 split"]["async_copies"] > 0          # K/V loads pipelined


def test_target_forward_through_the_kernel_equals_sdpa(triton_cpu):
    """The engine's wiring: a tree verification step of the target with `attention = "triton"` (what CUDA
    picks) gives the logits and cache of the CPU path (float64 attention), for ragged lengths and random
    trees."""
    sys.path.insert(0, os.path.join(os.path.dirname(__file__)))
    from eagle4_helpers import tiny_target

    from reference_eagle4.model import TreeLayout

    model = tiny_target()
    lengths, T = [3, 17, 9], 7
    results = []
    for mode in ("torch", "triton"):
        model.attention = mode
        cache = model.new_cache(3, 40)
        for slot, n in enumerate(lengths):                       # prefill each slot to its own length
            torch.manual_seed(slot)
            model(torch.randint(0, 256, (1, n)), cache, first_slot=slot)
            cache.lengths[slot] = n
        g = torch.Generator().manual_seed(11)
        masks = torch.stack([random_tree_mask(T, g) for _ in lengths])
        depths = masks.sum(-1) - 1
        tokens = torch.randint(0, 256, (3, T), generator=g)
        logits, _ = model.verify(tokens, cache, TreeLayout(masks, depths))
        results.append((logits, cache.k.float()))
    model.attention = "auto"
    assert torch.allclose(results[0][0], results[1][0], atol=1e-4)
    assert torch.allclose(results[0][1], results[1][1], atol=1e-5)


def test_the_gpu_benchs_engine_section_runs_off_the_gpu():
    """`make gpu-check` runs only where a GPU is lent, rarely: its engine section (a ragged tree step
    through two attention paths, compared) must not rot in between. On the CPU both paths are exact."""
    sys.path.insert(0, os.path.join(os.path.dirname(__file__)))
    from eagle4_helpers import TINY

    from reference_eagle4.kernels.bench import engine_steps

    rows = engine_steps(lambda fn, graph: 2.0, [30, 60], [1, 3], [1, 5], args=TINY, device="cpu")
    assert [(r["context"], r["batch"], r["tree"]) for r in rows] == [
        (c, b, t) for c in (30, 60) for b in (1, 3) for t in (1, 5)]
    assert all(r["ok"] and r["rel_err"] == 0 and r["over_one_token"] == 1.0 for r in rows)
