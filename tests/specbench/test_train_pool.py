"""The drafter training pool (data/train-pool.jsonl): its shape, and that it stays disjoint from the benchmark sets.

The disjointness rules are re-implemented here rather than imported from the generator, so a bug in one is caught by
the other: after lowercasing and collapsing whitespace, no training prompt may equal, contain or be contained in a
benchmark prompt, and none may share an 8-word sequence with one (words taken both as whitespace-separated tokens and
as alphanumeric runs, the stricter reading). Captions of the input images follow the same rules against the
benchmark captions.
"""

import importlib.util
import json
import re
from collections import Counter
from pathlib import Path

import pytest

DATA_DIR = Path(__file__).resolve().parents[2] / "data"
POOL = DATA_DIR / "train-pool.jsonl"
BENCHMARKS = ("prompt-enhancement.jsonl", "fireworks.jsonl")
CREATIVE = ("text-to-video", "image-to-video", "text-to-image", "image-to-image")
GENERAL = ("chat", "code", "stem", "math")
IMAGE = ("image-to-video", "image-to-image")
CREATIVE_RANGE = (325, 375)  # about 250 generated + 100 hand-written each
GENERAL_RANGE = (175, 205)  # about 150 + 40 each
TOTAL_RANGE = (2050, 2200)  # about 1600 + 560, less what the guard drops
N = 8


def read_jsonl(path):
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def norm(text):
    return " ".join(text.lower().split())


def grams(text, n=N):
    text = norm(text)
    out = set()
    for tokens in (text.split(), re.findall(r"[a-z0-9]+", text)):
        out.update(tuple(tokens[i:i + n]) for i in range(len(tokens) - n + 1))
    return out


@pytest.fixture(scope="module")
def pool():
    return read_jsonl(POOL)


@pytest.fixture(scope="module")
def bench():
    rows = [row for name in BENCHMARKS for row in read_jsonl(DATA_DIR / name)]
    prompts = {norm(text) for row in rows for text in [row["prompt"], *(row.get("turns") or [])]}
    captions = {norm(row["image_caption"]) for row in rows if row.get("image_caption")}
    assert len(prompts) >= 500 and len(captions) >= 150  # both sets really loaded
    return {"prompts": sorted(prompts), "captions": sorted(captions)}


def clashes(texts, others):
    """(text, other, rule) for each text that equals, contains, is contained in, or shares an 8-gram with another."""
    other_grams = {}
    for other in others:
        for gram in grams(other):
            other_grams.setdefault(gram, other)
    found = []
    for text in texts:
        t = norm(text)
        for other in others:
            if t == other:
                found.append((text, other, "exact"))
            elif t in other or other in t:
                found.append((text, other, "containment"))
        shared = sorted(g for g in grams(t) if g in other_grams)
        if shared:
            found.append((text, other_grams[shared[0]], f"8-gram {' '.join(shared[0])!r}"))
    return found


def test_schema(pool):
    for row in pool:
        assert set(row) == {"id", "category", "prompt", "image_caption"}, row
        assert isinstance(row["prompt"], str) and row["prompt"].strip(), row
        assert row["category"] in CREATIVE + GENERAL, row


def test_counts_per_category(pool):
    counts = Counter(row["category"] for row in pool)
    assert set(counts) == set(CREATIVE + GENERAL)
    for category in CREATIVE:
        assert CREATIVE_RANGE[0] <= counts[category] <= CREATIVE_RANGE[1], (category, counts[category])
    for category in GENERAL:
        assert GENERAL_RANGE[0] <= counts[category] <= GENERAL_RANGE[1], (category, counts[category])
    assert TOTAL_RANGE[0] <= len(pool) <= TOTAL_RANGE[1]


def test_ids_unique_and_well_formed(pool):
    ids = [row["id"] for row in pool]
    assert len(set(ids)) == len(ids)
    assert all(re.fullmatch(r"tp-\d{5}", i) for i in ids)


def test_prompts_unique(pool):
    duplicates = [p for p, n in Counter(norm(row["prompt"]) for row in pool).items() if n > 1]
    assert not duplicates


def test_image_caption_exactly_for_image_rows(pool):
    for row in pool:
        if row["category"] in IMAGE:
            assert isinstance(row["image_caption"], str) and row["image_caption"].strip(), row
        else:
            assert row["image_caption"] is None, row


def test_prompts_disjoint_from_benchmarks(pool, bench):
    found = clashes([row["prompt"] for row in pool], bench["prompts"])
    assert not found, found[:5]


def test_captions_disjoint_from_benchmark_captions(pool, bench):
    captions = sorted({row["image_caption"] for row in pool if row["image_caption"]})
    found = clashes(captions, bench["captions"])
    assert not found, found[:5]


def test_clash_detector_catches_each_rule(bench):
    """The checks above are only as good as `clashes`: feed it known offenders built from a benchmark prompt."""
    long_prompt = next(p for p in bench["prompts"] if len(p.split()) >= 12)
    words = long_prompt.split()
    offenders = {
        "exact": long_prompt.upper(),
        "containment": f"please: {long_prompt} thanks",
        "8-gram": "totally new start " + " ".join(words[2:2 + N]) + " and a new ending",
    }
    for rule, text in offenders.items():
        assert any(r.startswith(rule) for _, _, r in clashes([text], bench["prompts"])), rule
    assert not clashes(["a prompt about nothing in particular, written just for this test"], bench["prompts"])


def test_file_matches_generator(pool):
    """tools/make_train_pool.py is deterministic and the committed file is its output."""
    spec = importlib.util.spec_from_file_location("make_train_pool", DATA_DIR.parent / "tools" / "make_train_pool.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    rows, _ = module.build()
    assert rows == pool
