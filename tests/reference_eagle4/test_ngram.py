"""Prompt lookup drafts what followed the latest earlier occurrence of the current suffix."""

import numpy as np

from reference_eagle4.proposers.ngram import LookupAcceptance, lookup, trie


def test_longest_suffix_wins_and_latest_occurrence_first():
    history = np.array([1, 2, 3, 9, 9, 2, 3, 7, 7, 1, 2, 3])
    # suffix [1, 2, 3] occurred at 0 -> continuation [9, 9]; [2, 3] alone would also match at 5 (-> 7, 7)
    assert lookup(history, 3, 1, 2, 1) == (3, [[9, 9]])
    assert lookup(history, 2, 1, 2, 2) == (2, [[7, 7], [9, 9]])


def test_no_match_gives_no_drafts():
    assert lookup(np.array([1, 2, 3, 4]), 3, 1, 4, 1) == (0, [])


def test_trie_merges_shared_prefixes_within_the_budget():
    tree = trie(0, [[5, 6, 7], [5, 8], [9]], budget=5)
    assert tree.tokens == [0, 5, 6, 7, 8]
    assert tree.parents == [-1, 0, 1, 2, 1]
    assert len(trie(0, [[1, 2, 3, 4, 5, 6]], budget=3)) == 3


def test_lookup_acceptance_learns_per_depth_from_what_the_target_emitted():
    acc = LookupAcceptance(max_n=3, depth=4)
    assert np.allclose(acc.path_probs(3, 3), [0.5, 0.25, 0.125])       # the prior
    for _ in range(20):
        acc.observe(3, [5, 6, 7, 8], [5, 6, 9])      # depths 1-2 accepted, depth 3 rejected, depth 4 untested
    p = acc.path_probs(3, 4)
    assert p[0] > 0.9 and p[1] > 0.85 and p[2] < 0.1
    assert acc.tries[3, 3] == 2.0                     # never tested: still the prior
    assert np.allclose(acc.path_probs(1, 2), [0.5, 0.25])                # other match lengths untouched
