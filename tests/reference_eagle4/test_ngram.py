"""Prompt lookup drafts what followed the latest earlier occurrence of the current suffix."""

from types import SimpleNamespace

import numpy as np

from reference_eagle4.proposers.ngram import NGram, trie
from reference_eagle4.retrieval import ContextIndex, LookupAcceptance


def indexed(tokens: list[int], max_n: int) -> ContextIndex:
    return ContextIndex(list(tokens), max_n)


def test_longest_suffix_wins_and_latest_occurrence_first():
    history = [1, 2, 3, 9, 9, 2, 3, 7, 7, 1, 2, 3]
    # suffix [1, 2, 3] occurred at 0 -> continuation [9, 9]; [2, 3] alone would also match at 5 (-> 7, 7)
    assert indexed(history, 3).lookup(1, 2, 1) == (3, [[9, 9]])
    assert indexed(history, 2).lookup(1, 2, 2) == (2, [[7, 7], [9, 9]])


def test_no_match_gives_no_drafts():
    assert indexed([1, 2, 3, 4], 3).lookup(1, 4, 1) == (0, [])
    assert indexed([5], 3).lookup(1, 4, 1) == (0, [])


def brute_force_lookup(h: list[int], max_n: int, n_min: int, length: int, matches: int):
    for n in range(min(max_n, len(h) - 1), n_min - 1, -1):
        found: list[list[int]] = []
        for e in range(len(h) - 2, n - 2, -1):                  # earlier occurrences, latest first
            if h[e - n + 1: e + 1] == h[-n:] and h[e + 1: e + 1 + length] not in found:
                found.append(h[e + 1: e + 1 + length])
        if found:
            return n, found[:matches]
    return 0, []


def test_an_index_grown_token_by_token_answers_as_a_scan_of_the_whole_context():
    rng = np.random.default_rng(0)
    for trial in range(20):
        tokens = rng.integers(0, 4 + trial % 5, size=120).tolist()     # small vocabularies: many repeats
        grown: list[int] = []
        index = ContextIndex(grown, 4)
        for end in range(1, len(tokens) + 1):
            grown.append(tokens[end - 1])
            for n_min, length, matches in ((1, 5, 3), (2, 3, 1)):
                assert index.lookup(n_min, length, matches) == brute_force_lookup(tokens[:end], 4, n_min, length,
                                                                                  matches)


def test_each_sequence_keeps_its_own_index_and_a_new_one_starts_fresh():
    p = NGram(budget=3, max_n=3)
    a, b = SimpleNamespace(tokens=[1, 2, 1], state=None), SimpleNamespace(tokens=[7, 8, 9, 7], state=None)
    for seq in (a, b):
        p.begin(seq, [])
    assert [tree.tokens for tree in p.propose([a, b])] == [[1, 2, 1], [7, 8, 9]]
    a.tokens.append(2)                                   # the sequence grew: only the new token is indexed
    assert p.propose([a])[0].tokens == [2, 1, 2]
    p.end(a)
    assert a.state is None
    a.tokens = [4, 4]                                    # another sequence under the same object: a fresh index
    p.begin(a, [])
    assert p.propose([a])[0].tokens == [4, 4]


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
