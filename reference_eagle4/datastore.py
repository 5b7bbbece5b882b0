"""A datastore of the target's own responses, for retrieval drafting (REST, He et al. 2023).

Prompt lookup finds continuations only in the current context. Responses to *other* prompts of the same
kind share phrasing too ("cinematic lighting", "the camera slowly pans"), and a small target repeats its
own stock phrases, so the longest suffix of the context that occurs in a corpus of the target's greedy
responses proposes what most often followed it there. The corpus is built from responses to the training
pool (disjoint from the benchmark sets), so a benchmark prompt never retrieves its own answer.

Storage is one token array (uint16 on disk where the vocabulary fits, else uint32) with a boundary marker
between responses; the index (hashes of every n-gram, sorted, per n) is built when it is loaded, in well
under a second for a few hundred thousand tokens.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

BOUNDARY = -1            # between responses: no n-gram and no continuation crosses it
_MUL = np.uint64(0x9E3779B97F4A7C15)


def _hashes(tokens: np.ndarray, n: int) -> np.ndarray:
    """Polynomial hash of every n-gram tokens[i:i+n] (uint64, wrapping); [len - n + 1]."""
    h = np.zeros(len(tokens) - n + 1, dtype=np.uint64)
    t = tokens.astype(np.uint64)
    with np.errstate(over="ignore"):
        for j in range(n):
            h = h * _MUL + t[j: len(tokens) - n + 1 + j] + np.uint64(1)
    return h


def _suffix_hash(suffix: list[int]) -> np.uint64:
    """`_hashes` of one n-gram, in Python integers (an array pass costs more for one n-gram)."""
    h = 0
    for t in suffix:
        h = (h * int(_MUL) + t + 1) & 0xFFFFFFFFFFFFFFFF
    return np.uint64(h)


class Datastore:
    """Longest-suffix retrieval over a token corpus; `draft` returns the majority continuation."""

    MEMO = 1 << 16          # memoised continuations kept (about 10 MB at most; cleared when full)

    def __init__(self, tokens: np.ndarray, vocab_size: int, max_n: int = 6, min_n: int = 2,
                 max_matches: int = 256) -> None:
        """tokens: responses one after another, each followed by BOUNDARY; vocab_size: the tokenizer's, so a
        target of another tokenizer is refused rather than fed foreign ids."""
        self.tokens = np.asarray(tokens, dtype=np.int32)
        if self.tokens.max(initial=0) >= vocab_size:
            raise ValueError(f"token id {self.tokens.max()} is outside the vocabulary of {vocab_size}")
        self.vocab_size = vocab_size
        self.max_n, self.min_n, self.max_matches = max_n, min_n, max_matches
        self._memo: dict[tuple[int, int, int], list[int]] = {}     # (n, n-gram index, length) -> draft
        # per n: the distinct n-gram hashes (sorted), where each one's run of start positions begins in
        # _starts[n] (which lists every start, grouped by hash) and how long the run is
        self._keys: dict[int, np.ndarray] = {}
        self._first: dict[int, np.ndarray] = {}
        self._count: dict[int, np.ndarray] = {}
        self._starts: dict[int, np.ndarray] = {}
        bad = np.cumsum(self.tokens == BOUNDARY)            # boundaries up to and including each position
        for n in range(min_n, max_n + 1):
            if len(self.tokens) <= n:
                continue
            h = _hashes(self.tokens, n)[:-1]                  # each n-gram with a token after it
            starts = np.arange(len(h), dtype=np.int32)
            # the n-gram and the token after it lie inside one response
            before = np.concatenate([[0], bad])[starts]
            clean = (bad[starts + n] - before) == 0
            order = np.argsort(h[clean], kind="stable")
            self._starts[n] = starts[clean][order]
            self._keys[n], self._first[n], self._count[n] = np.unique(h[clean][order], return_index=True,
                                                                      return_counts=True)

    @classmethod
    def from_responses(cls, responses: Iterable[list[int]], vocab_size: int, **options: int) -> "Datastore":
        parts: list[int] = []
        for r in responses:
            parts.extend(r)
            parts.append(BOUNDARY)
        return cls(np.asarray(parts, dtype=np.int64), vocab_size, **options)

    def __len__(self) -> int:
        return int((self.tokens != BOUNDARY).sum())

    def draft(self, history: Sequence[int], length: int) -> tuple[int, list[int]]:
        """(n, tokens): the longest suffix of `history` (max_n down to min_n) found in the corpus, and the
        continuation that most of its occurrences share, token by token; (0, []) without a match.

        The longest match is searched from the shortest suffix up: an n-gram occurs only where its last
        n - 1 tokens do, so a context with no match at all (most steps) costs one probe instead of one per n.
        Continuations are memoised per n-gram: stock phrases recur across a run's sequences and steps, and
        the n-grams that occur most, whose hundreds of occurrences make a lookup slow once a target forward
        has evicted the corpus from the caches, recur most."""
        tail = [int(t) for t in history[-self.max_n:]]
        found_n, found = 0, -1
        for n in range(self.min_n, min(self.max_n, len(tail)) + 1):
            at = self._occurrences(tail[-n:])
            if at < 0:
                break
            found_n, found = n, at
        if found < 0:
            return 0, []
        key = (found_n, found, length)
        out = self._memo.get(key)
        if out is None:
            if len(self._memo) >= self.MEMO:
                self._memo.clear()
            lo = int(self._first[found_n][found])
            starts = self._starts[found_n][lo: lo + min(int(self._count[found_n][found]), self.max_matches)]
            out = self._memo[key] = self._majority(starts + found_n, length)
        return found_n, list(out)

    def _occurrences(self, suffix: list[int]) -> int:
        """The index of `suffix` among the distinct n-grams of its length (n = len(suffix)), -1 if it does
        not occur.

        Occurrences are found by their 64-bit hash and only the first is compared token by token: another
        n-gram with the same hash (vanishingly rare at 64 bits) would cost one wrong draft, which verification
        rejects like any other, while checking every occurrence would cost as much again as the probe."""
        n = len(suffix)
        keys = self._keys.get(n)
        if keys is None:
            return -1
        key = _suffix_hash(suffix)
        i = int(np.searchsorted(keys, key))
        if i == len(keys) or keys[i] != key:
            return -1
        s = int(self._starts[n][self._first[n][i]])
        return i if self.tokens[s: s + n].tolist() == suffix else -1

    def _majority(self, pos: np.ndarray, length: int) -> list[int]:
        """Token by token, the value most of the occurrences still agreeing so far continue with (the lowest
        id on a tie), until one distinct continuation is left (then the rest of it) or none. The
        continuations are gathered in one array pass, and identical ones (a stock phrase repeated across
        responses) walked once with their count, rather than every occurrence token by token."""
        at = pos[:, None] + np.arange(length)
        rows = np.where(at < len(self.tokens), self.tokens[np.minimum(at, len(self.tokens) - 1)], BOUNDARY).tolist()
        alive = list(Counter(map(tuple, rows)).items())            # (continuation, occurrences), distinct
        out: list[int] = []
        for d in range(length):
            if len(alive) == 1:        # one continuation left: the rest of its response (most steps end here)
                rest = alive[0][0][d:]
                out.extend(rest[: rest.index(BOUNDARY)] if BOUNDARY in rest else rest)
                break
            counts: dict[int, int] = {}
            for r, w in alive:
                if r[d] != BOUNDARY:
                    counts[r[d]] = counts.get(r[d], 0) + w
            if not counts:
                break
            best = max(counts.items(), key=lambda tc: (tc[1], -tc[0]))[0]
            out.append(best)
            alive = [(r, w) for r, w in alive if r[d] == best]
        return out

    def save(self, folder: str | Path, info: dict) -> Path:
        """tokens.npy (uint16 when the ids fit, BOUNDARY stored as the dtype's max) and config.json."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        dtype = np.uint16 if self.vocab_size < np.iinfo(np.uint16).max else np.uint32
        stored = np.where(self.tokens == BOUNDARY, np.iinfo(dtype).max, self.tokens).astype(dtype)
        np.save(folder / "tokens.npy", stored)
        (folder / "config.json").write_text(json.dumps(
            {"model_type": "datastore", "vocab_size": self.vocab_size, "max_n": self.max_n, "min_n": self.min_n,
             "max_matches": self.max_matches, "tokens": len(self), **info}, indent=2) + "\n")
        return folder

    @classmethod
    def load(cls, folder: str | Path) -> "Datastore":
        folder = Path(folder)
        cfg_path = folder / "config.json"
        if not cfg_path.exists():
            raise FileNotFoundError(f"no datastore at {folder} (build one with `specbench datastore`)")
        cfg = json.loads(cfg_path.read_text())
        stored = np.load(folder / "tokens.npy")
        marker = np.iinfo(stored.dtype).max
        tokens = np.where(stored == marker, BOUNDARY, stored.astype(np.int64))
        return cls(tokens, cfg["vocab_size"], max_n=cfg["max_n"], min_n=cfg["min_n"], max_matches=cfg["max_matches"])
