"""The CPU's row kernels give what PyTorch gives: the greedy token of every verified node, the entropy the
reports bin acceptance by, and the drafter's low-rank candidates."""

import pytest
import torch

from reference_eagle4.kernels import row_ops


def rows(n_rows: int, n: int, dtype: torch.dtype, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(n_rows, n, generator=g) * 4).to(dtype)


def test_the_library_builds_here():
    assert row_ops.library() is not None, "no C compiler, or it failed (see the warning)"


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("n_rows,n", [(1, 49152), (13, 49152), (5, 37), (3, 16)])
def test_argmax_is_the_first_maximum(dtype, n_rows, n):
    x = rows(n_rows, n, dtype)
    x[0, n // 3] = x[0, n // 2] = x.max() + 1          # a tie: the lower index wins, as in PyTorch
    assert torch.equal(row_ops.argmax(x), x.float().argmax(-1))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_entropy_matches_log_softmax(dtype):
    x = rows(9, 49152 + 7, dtype)
    x[1] = 0.0                                        # uniform: log n
    x[2] = -1e4
    x[2, 5] = 30.0                                    # one certain token: 0
    logp = x.float().log_softmax(-1)
    ref = -(logp.exp() * logp).sum(-1)
    torch.testing.assert_close(row_ops.entropy(x), ref, rtol=1e-4, atol=1e-4)
    assert abs(float(row_ops.entropy(x)[1]) - torch.log(torch.tensor(49159.0)).item()) < 1e-4


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("k", [1, 8, 64, 200])
def test_topk_takes_the_k_largest_largest_first(dtype, k):
    x = rows(7, 32768, dtype, seed=k)
    x[3] = x[3].sort().values                          # ascending: every entry beats the heap's worst
    got = row_ops.topk_indices(x, k)
    assert got.shape == (7, k)
    assert torch.equal(x.gather(1, got), x.topk(k, dim=-1).values)
    assert all(len(set(r)) == k for r in got.tolist())


def test_views_batches_and_the_pytorch_path_agree(monkeypatch):
    x = rows(4, 200, torch.bfloat16).view(2, 2, 200)[:, :, :150]     # not contiguous, 3-d
    c = (row_ops.argmax(x), row_ops.entropy(x), row_ops.topk_indices(x, 10))
    assert c[0].shape == (2, 2) and c[1].shape == (2, 2) and c[2].shape == (2, 2, 10)
    monkeypatch.setattr(row_ops, "library", lambda: None)            # no compiler: PyTorch's
    t = (row_ops.argmax(x), row_ops.entropy(x), row_ops.topk_indices(x, 10))
    assert torch.equal(c[0], t[0])
    torch.testing.assert_close(c[1], t[1], rtol=1e-4, atol=1e-4)
    assert torch.equal(x.gather(-1, c[2]), x.gather(-1, t[2]))


def test_the_kernel_bench_times_an_attention_baseline_side_by_side(tmp_path):
    """`cpu_bench --attention-baseline OLD.c`: another copy of the kernel is built, timed in the same rounds,
    and its outputs checked against this one's (the same source here: equal)."""
    import shutil

    from reference_eagle4.kernels import cpu_bench
    from reference_eagle4.kernels.exact_attention_cpu import SOURCE

    for path in (SOURCE, *SOURCE.parent.glob("*.h")):
        shutil.copy(path, tmp_path / path.name)
    rows = cpu_bench.attention_rows(context=40, repeats=1, baseline=tmp_path / SOURCE.name)
    assert len(rows) == 2 + 8 and all(r.count("|") == 5 for r in rows[2:]), rows
    assert not any("differ" in r for r in rows)
