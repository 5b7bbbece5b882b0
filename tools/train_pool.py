"""Keep data/train-pool.jsonl, the drafters' training prompts, clean: no near-copy of a benchmark row, no two rows
that are near-copies of each other.

The pool is data (benchmark schema plus each row's `origin`: template, authored or package); this tool only
filters it. Near-copies are found by the character n-gram TF-IDF similarity of tools/pool_similarity.py, above
the threshold chosen on the hand-labelled pairs in tools/paraphrase_pairs.jsonl; the near-copies that wording
alone misses were found by a manual pass over the closest pairs and are listed in tools/pool_manual_drops.jsonl.

    .venv/bin/python tools/train_pool.py threshold          # the cut the labelled pairs choose, and its mistakes
    .venv/bin/python tools/train_pool.py pairs --top 200    # closest pool/benchmark pairs, for the manual pass
    .venv/bin/python tools/train_pool.py clean ROWS.jsonl... --out data/train-pool.jsonl
    .venv/bin/python tools/train_pool.py check              # exit 1 if the pool breaks a rule
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import pool_similarity as ps  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
POOL = ROOT / "data" / "train-pool.jsonl"
MANUAL_DROPS = Path(__file__).resolve().parent / "pool_manual_drops.jsonl"
BENCHMARKS = ("prompt-enhancement", "fireworks")
# Which of two near-copies stays: real prompts before authored ones, authored before template fills.
KEEP_FIRST = {"package": 0, "authored": 1, "template": 2}
# A comma-separated phrase said twice in a row ("subtle, subtle"): a template filling one slot twice.
REPEATED_PHRASE = re.compile(r"\b([A-Za-z][A-Za-z' -]*[A-Za-z]), \1\b", re.IGNORECASE)


def read_rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def next_id(pool: list[dict]) -> int:
    """The number after the pool's last tp-<n> id: where rows added to it start."""
    return 1 + max(int(row["question_id"].split("-")[1]) for row in pool)


def benchmark_rows() -> list[dict]:
    """The bundled benchmark sets' rows, loaded as every run loads them."""
    from specbench.dataset import load_rows

    return [row.to_dict() for name in BENCHMARKS for row in load_rows(name)]


def manual_drops(path: Path = MANUAL_DROPS) -> list[dict]:
    """{prompt, benchmark, why}: pool prompts the manual pass found to be near-copies below the threshold."""
    return read_rows(path)


def leaks(vectoriser: ps.Vectoriser, pool: list[dict], bench: list[dict]) -> list[tuple[float, int, int]]:
    """(similarity, pool index, benchmark index) for each pool row's closest benchmark row above the threshold."""
    scores = ps.similarity(vectoriser, pool, bench)
    best = scores.argmax(axis=1)
    return [(float(scores[i, best[i]]), i, int(best[i])) for i in range(len(pool)) if scores[i, best[i]] > ps.THRESHOLD]


def near_copies(vectoriser: ps.Vectoriser, pool: list[dict]) -> list[tuple[float, int, int]]:
    """(similarity, i, j), i < j, for every pair of pool rows above the threshold."""
    scores = np.triu(ps.similarity(vectoriser, pool, pool), k=1)
    rows, cols = np.nonzero(scores > ps.THRESHOLD)
    return [(float(scores[i, j]), int(i), int(j)) for i, j in zip(rows, cols)]


def repeated_phrases(prompt: str) -> list[str]:
    return [match.group(1) for match in REPEATED_PHRASE.finditer(prompt)]


def clean(rows: list[dict], bench: list[dict], drops: list[dict]) -> tuple[list[dict], Counter]:
    """The rows that stay, in their order, and how many each rule removed."""
    removed: Counter = Counter()
    for row in rows:
        row["prompt"] = REPEATED_PHRASE.sub(r"\1", row["prompt"])
        row["turns"] = [row["prompt"], *row["turns"][1:]]
    dropped = {drop["prompt"] for drop in drops}
    removed["manual pass"] = sum(row["prompt"] in dropped for row in rows)
    rows = [row for row in rows if row["prompt"] not in dropped]
    vectoriser = ps.fit(bench)
    leaked = {i for _, i, _ in leaks(vectoriser, rows, bench)}
    removed["near-copy of a benchmark row"] = len(leaked)
    rows = [row for i, row in enumerate(rows) if i not in leaked]
    scores = ps.similarity(vectoriser, rows, rows)
    order = sorted(range(len(rows)), key=lambda i: (KEEP_FIRST[rows[i]["origin"]], rows[i]["question_id"]))
    kept: list[int] = []
    for i in order:
        if not kept or scores[i, kept].max() <= ps.THRESHOLD:
            kept.append(i)
    removed["near-copy of a kept pool row"] = len(rows) - len(kept)
    return [rows[i] for i in sorted(kept)], removed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("threshold")
    pairs = commands.add_parser("pairs")
    pairs.add_argument("--top", type=int, default=200)
    cleaning = commands.add_parser("clean")
    cleaning.add_argument("rows", type=Path, nargs="+")
    cleaning.add_argument("--out", type=Path, default=POOL)
    commands.add_parser("check")
    args = parser.parse_args()

    bench = benchmark_rows()
    if args.command == "clean":
        rows, removed = clean([row for path in args.rows for row in read_rows(path)], bench, manual_drops())
        args.out.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows), encoding="utf-8")
        print(f"wrote {len(rows)} rows to {args.out}; removed: {dict(removed)}")
        print("by category:", dict(sorted(Counter(row["category"] for row in rows).items())))
        print("by origin:", dict(sorted(Counter(row["origin"] for row in rows).items())))
        return
    pool = read_rows(POOL)
    vectoriser = ps.fit(bench)
    if args.command == "threshold":
        pairs = ps.labelled_pairs()
        cut, mistakes = ps.choose_threshold(ps.pair_scores(vectoriser, pairs), [label for *_, label in pairs])
        print(f"threshold {cut:.3f}: {mistakes} of {len(pairs)} labelled pairs on the wrong side (in use: {ps.THRESHOLD})")
    elif args.command == "pairs":
        scores = ps.similarity(vectoriser, pool, bench)
        best = scores.argmax(axis=1)
        for i in np.argsort(-scores.max(axis=1))[: args.top]:
            other = bench[best[i]]
            print(f"{scores[i, best[i]]:.3f} {pool[i]['question_id']} {pool[i]['prompt'][:150]!r}\n"
                  f"      {other['question_id']} {other['prompt'][:150]!r}")
    else:
        faults = [f"leak {s:.3f}: {pool[i]['question_id']} ~ {bench[j]['question_id']}"
                  for s, i, j in leaks(vectoriser, pool, bench)]
        faults += [f"near-copy {s:.3f}: {pool[i]['question_id']} ~ {pool[j]['question_id']}"
                   for s, i, j in near_copies(vectoriser, pool)]
        print("\n".join(faults) or f"OK {POOL}: {len(pool)} rows")
        sys.exit(1 if faults else 0)


if __name__ == "__main__":
    main()
