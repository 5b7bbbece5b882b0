"""Verification is lossless: greedy follows the argmax, sampling keeps the target's distribution."""

import pytest
import torch
from scipy.stats import chisquare

from reference_eagle4.tree import DraftTree
from reference_eagle4.verify import Sampling, processed_probs, verify, walk


def test_walk_follows_the_target_and_emits_a_bonus():
    tree = DraftTree([0, 5, 6, 7, 8], [-1, 0, 0, 1, 2])
    # target picks 6 at the root (second branch), then 8 below it, then 3 (no child): bonus
    targets = [6, 99, 8, 99, 3]
    v = walk(tree, targets)
    assert v.path == [0, 2, 4]
    assert v.tokens == [6, 8, 3]


def test_greedy_rejection_at_the_root_emits_the_argmax():
    tree = DraftTree.chain(0, [1, 2, 3])
    logits = torch.zeros(4, 10)
    logits[0, 9] = 5.0
    assert verify(tree, logits, Sampling()).tokens == [9]


@pytest.mark.parametrize("sampling", [Sampling(1.0), Sampling(0.7, top_p=0.8), Sampling(1.3, top_k=5)])
def test_sampled_tree_verification_keeps_the_target_distribution(sampling):
    """Chi-square over 4000 draws: the first emitted token follows the processed target distribution,
    even though the tree offers three likely candidates and one unlikely one at the root."""
    g = torch.Generator().manual_seed(0)
    vocab = 8
    logits = torch.randn(6, vocab, generator=g) * 1.5
    p = processed_probs(logits[0], sampling)
    order = p.argsort(descending=True).tolist()
    tree = DraftTree([0, order[0], order[1], order[-1], order[2], 3], [-1, 0, 0, 0, 0, 1])
    draws = 4000
    counts = torch.zeros(vocab)
    second = {}
    for i in range(draws):
        v = verify(tree, logits, sampling, torch.Generator().manual_seed(i))
        counts[v.tokens[0]] += 1
        if len(v.tokens) > 1 and v.tokens[0] == order[0]:
            second.setdefault("n", torch.zeros(vocab))[v.tokens[1]] += 1
    support = p > 0
    assert counts[~support].sum() == 0
    stat = chisquare(counts[support].numpy(), (p[support] * draws).numpy())
    assert stat.pvalue > 1e-3, stat
    # below an accepted child the next token follows that child's own distribution
    q = processed_probs(logits[1], sampling)
    n = second["n"]
    sup = q > 0
    stat2 = chisquare(n[sup].numpy(), (q[sup] * n.sum()).numpy())
    assert stat2.pvalue > 1e-3, stat2


def test_top_p_keeps_the_smallest_set_reaching_the_mass():
    probs = processed_probs(torch.log(torch.tensor([0.5, 0.3, 0.15, 0.05])), Sampling(1.0, top_p=0.75))
    assert torch.allclose(probs, torch.tensor([0.625, 0.375, 0.0, 0.0]))


def test_a_tree_mask_lets_each_node_see_exactly_its_path_and_padding_only_itself():
    tree = DraftTree([0, 1, 2, 3, 4, 5], [-1, 0, 0, 1, 3, 2])       # 0 -> 1 -> 3 -> 4 and 0 -> 2 -> 5
    m = tree.mask(8)
    paths = {0: {0}, 1: {0, 1}, 2: {0, 2}, 3: {0, 1, 3}, 4: {0, 1, 3, 4}, 5: {0, 2, 5}, 6: {6}, 7: {7}}
    for i, sees in paths.items():
        assert set(torch.nonzero(m[i]).flatten().tolist()) == sees, f"row {i}"
    assert torch.equal(tree.mask(), m[:6, :6])
