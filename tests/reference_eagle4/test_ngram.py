"""Prompt lookup drafts what followed the latest earlier occurrence of the current suffix."""

import numpy as np

from reference_eagle4.proposers.ngram import lookup, trie


def test_longest_suffix_wins_and_latest_occurrence_first():
    history = np.array([1, 2, 3, 9, 9, 2, 3, 7, 7, 1, 2, 3])
    # suffix [1, 2, 3] occurred at 0 -> continuation [9, 9]; [2, 3] alone would also match at 5 (-> 7, 7)
    assert lookup(history, 3, 1, 2, 1) == [[9, 9]]
    assert lookup(history, 2, 1, 2, 2) == [[7, 7], [9, 9]]


def test_no_match_gives_no_drafts():
    assert lookup(np.array([1, 2, 3, 4]), 3, 1, 4, 1) == []


def test_trie_merges_shared_prefixes_within_the_budget():
    tree = trie(0, [[5, 6, 7], [5, 8], [9]], budget=5)
    assert tree.tokens == [0, 5, 6, 7, 8]
    assert tree.parents == [-1, 0, 1, 2, 1]
    assert len(trie(0, [[1, 2, 3, 4, 5, 6]], budget=3)) == 3
