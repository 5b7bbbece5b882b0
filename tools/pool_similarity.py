"""Character n-gram TF-IDF cosine: how close in wording two prompts are, for keeping the training pool clean.

A training prompt that rewords a benchmark prompt (same numbers, same subject, a few words swapped) teaches the
drafter the test set; so do two near-identical pool rows teach it one row twice. Character 3-5-grams catch
rewordings that exact or word n-gram rules miss (inflections, punctuation, swapped word order), and TF-IDF
weights make shared rare strings ("lrucache", "13 feet") count more than shared filler ("a photo of").

numpy and scipy only (both already dependencies). The weights are scikit-learn's TfidfVectorizer(
analyzer="char_wb", ngram_range=(3, 5), sublinear_tf=True) fitted on the benchmark rows, except that an n-gram
the benchmark never uses weighs as the rarest one, where scikit-learn would drop it.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy import sparse

NGRAMS = (3, 4, 5)
# Chosen on tools/paraphrase_pairs.jsonl by tools/train_pool.py threshold (the card states how).
THRESHOLD = 0.49
PAIRS = Path(__file__).resolve().parent / "paraphrase_pairs.jsonl"


def normalise(text: str) -> str:
    """Lowercase with whitespace collapsed, so layout never counts as a difference."""
    return " ".join(text.lower().split())


def char_ngrams(text: str) -> Counter[str]:
    """Character n-grams of each word padded with spaces (scikit-learn's char_wb analyzer)."""
    grams: Counter[str] = Counter()
    for word in normalise(text).split():
        padded = f" {word} "
        for n in NGRAMS:
            grams.update(padded[i:i + n] for i in range(max(1, len(padded) - n + 1)))
    return grams


@dataclass
class Vectoriser:
    """IDF weights fitted on the benchmark rows alone, so a check scores the same however the pool changes.

    An n-gram the benchmark never uses gets the weight of the rarest one (document frequency 0): it is what
    sets a row apart from the benchmark, and between two pool rows it is what they share that the benchmark
    does not (a template's own wording).
    """

    vocabulary: dict[str, int]
    idf: list[float]
    unseen_idf: float

    @classmethod
    def fit(cls, corpus: Iterable[str]) -> Vectoriser:
        documents: Counter[str] = Counter()
        count = 0
        for text in corpus:
            documents.update(set(char_ngrams(text)))
            count += 1
        vocabulary = {gram: index for index, gram in enumerate(sorted(documents))}
        idf = [math.log((1 + count) / (1 + documents[gram])) + 1 for gram in vocabulary]
        return cls(vocabulary, idf, math.log(1 + count) + 1)

    def transform(self, texts: Sequence[str]) -> sparse.csr_matrix:
        """L2-normalised rows of sublinear TF x IDF; unseen n-grams join the vocabulary with the rarest weight."""
        rows, cols, values = [], [], []
        for row, text in enumerate(texts):
            for gram, tf in char_ngrams(text).items():
                col = self.vocabulary.setdefault(gram, len(self.vocabulary))
                if col == len(self.idf):
                    self.idf.append(self.unseen_idf)
                rows.append(row)
                cols.append(col)
                values.append((1 + math.log(tf)) * self.idf[col])
        matrix = sparse.csr_matrix((values, (rows, cols)), shape=(len(texts), len(self.vocabulary)))
        norms = np.sqrt(np.asarray(matrix.multiply(matrix).sum(axis=1))).ravel()
        norms[norms == 0] = 1.0
        return sparse.csr_matrix(sparse.diags(1 / norms) @ matrix)

    def cosine(self, a: Sequence[str], b: Sequence[str]) -> np.ndarray:
        """Dense |a| x |b| cosine similarities."""
        left, right = self.transform(a), self.transform(b)
        left.resize(left.shape[0], right.shape[1])   # b may have added n-grams a never had
        return (left @ right.T).toarray()


def fit(bench: Iterable[dict]) -> Vectoriser:
    """IDF over every prompt and caption of the benchmark rows."""
    return Vectoriser.fit(text for row in bench for text in (row["prompt"], row.get("image_caption")) if text)


def similarity(vectoriser: Vectoriser, a: Sequence[dict], b: Sequence[dict]) -> np.ndarray:
    """|a| x |b| row similarities: the prompts' cosine, and where both rows carry an image caption, the lower of
    that and the captions' cosine.

    A request is a near-copy only when it asks the same thing of the same picture: a different request on the
    same picture, or the same short request ("make it night") on another picture, is a different row.
    """
    scores = vectoriser.cosine([row["prompt"] for row in a], [row["prompt"] for row in b])
    captioned_a = [i for i, row in enumerate(a) if row.get("image_caption")]
    captioned_b = [j for j, row in enumerate(b) if row.get("image_caption")]
    if captioned_a and captioned_b:
        captions = vectoriser.cosine([a[i]["image_caption"] for i in captioned_a],
                                     [b[j]["image_caption"] for j in captioned_b])
        block = np.ix_(captioned_a, captioned_b)
        scores[block] = np.minimum(scores[block], captions)
    return scores


def labelled_pairs(path: Path = PAIRS) -> list[tuple[dict, dict, bool]]:
    """(row a, row b, is_near_copy) from the hand-labelled file the threshold is chosen on."""
    items = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return [(item["a"], item["b"], bool(item["near_copy"])) for item in items]


def pair_scores(vectoriser: Vectoriser, pairs: Sequence[tuple[dict, dict, bool]]) -> np.ndarray:
    """The similarity of each labelled pair's two rows."""
    return np.array([similarity(vectoriser, [a], [b])[0, 0] for a, b, _ in pairs])


def choose_threshold(scores: np.ndarray, labels: Sequence[bool]) -> tuple[float, int]:
    """The cut with the fewest mistakes on labelled pairs, midway between the scores it separates.

    Ties go to the lower cut (a missed near-copy leaks the test set; a dropped innocent row costs one
    training prompt). Returns (threshold, mistakes).
    """
    labels = np.asarray(labels, dtype=bool)
    ordered = np.sort(scores)
    cuts = [ordered[0] - 1e-6] + [(x + y) / 2 for x, y in zip(ordered, ordered[1:])] + [ordered[-1] + 1e-6]
    best = min(cuts, key=lambda cut: (int(np.sum((scores > cut) != labels)), cut))
    return float(best), int(np.sum((scores > best) != labels))
