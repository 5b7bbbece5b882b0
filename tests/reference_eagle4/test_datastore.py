"""The retrieval datastore: longest-suffix matches, majority continuations, response boundaries, files."""

from __future__ import annotations

import numpy as np
import pytest

from reference_eagle4.datastore import Datastore


def test_longest_suffix_wins_and_its_majority_continuation_is_drafted():
    responses = [[1, 2, 3, 4, 5], [9, 2, 3, 7, 8], [2, 3, 7, 8, 6], [5, 5, 2, 3, 7]]
    ds = Datastore.from_responses(responses, vocab_size=16, max_n=4, min_n=2)
    # "2 3" is followed by 4 once and 7 three times: the majority, then what most of those had next
    assert ds.draft(np.array([0, 2, 3]), 3) == (2, [7, 8, 6])
    # "1 2 3" is a longer match: its single occurrence decides
    assert ds.draft(np.array([1, 2, 3]), 2) == (3, [4, 5])
    assert ds.draft(np.array([11, 12]), 3) == (0, [])
    assert ds.draft(np.array([3]), 3) == (0, [])             # shorter than min_n


def test_a_tie_drafts_the_lower_id_and_occurrences_that_end_drop_out():
    responses = [[2, 3, 9, 1], [2, 3, 5, 1, 4], [2, 3, 5]]
    ds = Datastore.from_responses(responses, vocab_size=16, max_n=2, min_n=2)
    # "2 3" -> 5 twice, 9 once; after "5" one occurrence ends, the other goes on alone
    assert ds.draft(np.array([2, 3]), 4) == (2, [5, 1, 4])
    tie = Datastore.from_responses([[2, 3, 9], [2, 3, 5]], vocab_size=16, max_n=2, min_n=2)
    assert tie.draft(np.array([2, 3]), 2) == (2, [5])


def test_no_match_or_continuation_crosses_a_response_boundary():
    ds = Datastore.from_responses([[1, 2], [3, 4, 5]], vocab_size=8, max_n=3, min_n=2)
    assert ds.draft(np.array([1, 2]), 3) == (0, [])          # "1 2" ends its response: nothing follows it
    assert ds.draft(np.array([2, 3]), 3) == (0, [])          # "2 3" spans two responses: not an n-gram
    assert ds.draft(np.array([3, 4]), 3) == (2, [5])         # the draft stops at the end of its response


def test_a_single_occurrence_drafts_the_rest_of_its_response():
    ds = Datastore.from_responses([[1, 2, 3, 4, 5, 6], [7, 8, 9]], vocab_size=16, max_n=3, min_n=2)
    assert ds.draft(np.array([0, 2, 3]), 2) == (2, [4, 5])                  # cut at the length asked for
    assert ds.draft(np.array([0, 2, 3]), 9) == (2, [4, 5, 6])               # and at the response's end


def test_memoised_drafts_equal_fresh_ones_at_every_length():
    rng = np.random.default_rng(1)
    responses = [rng.integers(0, 12, size=int(rng.integers(5, 40))).tolist() for _ in range(40)]
    ds = Datastore.from_responses(responses, vocab_size=12)
    fresh = Datastore.from_responses(responses, vocab_size=12)
    for _ in range(300):
        hist, length = rng.integers(0, 12, size=6), int(rng.integers(1, 8))
        first = ds.draft(hist, length)
        first[1].append(-5)                      # a caller's edits must not reach the memo
        assert ds.draft(hist, length) == fresh.draft(hist, length)
        fresh._memo.clear()
    assert ds._memo                              # the lookups above did go through it


def test_save_load_round_trip_keeps_drafts(tmp_path):
    rng = np.random.default_rng(0)
    responses = [rng.integers(0, 50, size=int(rng.integers(5, 40))).tolist() for _ in range(30)]
    ds = Datastore.from_responses(responses, vocab_size=50000)
    ds.save(tmp_path / "ds", {"rows": 30})
    back = Datastore.load(tmp_path / "ds")
    assert np.load(tmp_path / "ds" / "tokens.npy").dtype == np.uint16
    assert len(back) == len(ds) == sum(map(len, responses))
    for r in responses:
        hist = np.array(r[:4])
        assert back.draft(hist, 5) == ds.draft(hist, 5)


def test_foreign_ids_and_missing_folders_are_refused(tmp_path):
    with pytest.raises(ValueError, match="outside the vocabulary of 10"):
        Datastore.from_responses([[1, 12]], vocab_size=10)
    with pytest.raises(FileNotFoundError, match="specbench datastore"):
        Datastore.load(tmp_path / "none")


def test_shipped_datastore_is_intact_and_built_from_the_disjoint_training_pool():
    """The harness's default datastore: the sha256 its card names is the file's, and its responses answer
    prompts of the bundled training pool (test_train_pool checks that pool against the benchmark sets)."""
    import json

    from reference_eagle4.drafters import DEFAULT_DATASTORE
    from reference_eagle4.weights import sha256_file

    folder = DEFAULT_DATASTORE["smollm2-135m"]
    cfg = json.loads((folder / "config.json").read_text())
    assert cfg["pool"] == "train-pool.jsonl" and cfg["vocab_size"] == 49152
    assert f"`{sha256_file(folder / 'tokens.npy')}`" in (folder / "README.md").read_text()
    assert len(Datastore.load(folder)) == cfg["tokens"] > 100_000


def brute_force_longest_match(responses: list[list[int]], history: list[int], max_n: int, min_n: int) -> int:
    for n in range(min(max_n, len(history)), min_n - 1, -1):
        if any(r[i: i + n] == history[-n:] for r in responses for i in range(len(r) - n)):   # a token follows
            return n
    return 0


def test_the_longest_match_is_found_whatever_the_suffix_lengths_that_occur():
    rng = np.random.default_rng(1)
    responses = [rng.integers(0, 5, size=int(rng.integers(3, 30))).tolist() for _ in range(20)]
    ds = Datastore.from_responses(responses, vocab_size=8, max_n=5, min_n=2)
    for _ in range(300):
        history = rng.integers(0, 6, size=int(rng.integers(1, 9))).tolist()     # token 5 never occurs
        n, draft = ds.draft(history, 4)
        assert n == brute_force_longest_match(responses, history, 5, 2), history
        assert bool(draft) == (n > 0)
