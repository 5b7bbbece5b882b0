"""Exporters: rows -> files other tools read (Spec-Bench `question.jsonl`, a Hub-ready Parquet folder, our JSONL).

Each format round-trips: the Spec-Bench file re-imports through importers.import_spec_bench to the same rows,
and the Hub folder loads back through `datasets.load_dataset(folder)` to the same rows.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from specbench import schema
from specbench.dataset import Row, first_user_turn, summary

SPEC_BENCH_FILE = "question.jsonl"


def write_jsonl(rows: list[Row], path: str | Path) -> Path:
    """Rows as our JSONL (the format of the bundled sets), one object per line, UTF-8."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as handle:
        handle.writelines(json.dumps(row.to_dict(), ensure_ascii=False) + "\n" for row in rows)
    return path


def spec_bench_record(row: Row) -> dict[str, Any]:
    """One Spec-Bench line: the keys vLLM's spec_bench loader reads first, then our fields so nothing is lost.

    vLLM sends turns[0] with no system prompt and no image, so image rows get their caption pasted in, as
    chat_messages does for a text-only target. `reference` follows MT-Bench: a list, one answer per turn.
    """
    record: dict[str, Any] = {
        "question_id": row.question_id,
        "category": row.category,
        "turns": [first_user_turn(row, multimodal=False), *row.turns[1:]],
        "prompt": row.prompt,
        "source_dataset": row.source_dataset,
        "system_prompt_id": row.system_prompt_id,
        "image": row.image,
        "image_caption": row.image_caption,
    }
    if row.reference is not None:
        record["reference"] = [row.reference]
    return record


def export_spec_bench(rows: list[Row], out_dir: str | Path) -> Path:
    """Write out_dir/question.jsonl in Spec-Bench format and return its path."""
    path = Path(out_dir) / SPEC_BENCH_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as handle:
        handle.writelines(json.dumps(spec_bench_record(row), ensure_ascii=False) + "\n" for row in rows)
    return path


def arrow_schema() -> Any:
    """Explicit column types, so a set whose images are all null still gets the same struct column."""
    import pyarrow as pa

    image = pa.struct([(key, pa.string()) for key in schema.IMAGE_KEYS])
    types = {"turns": pa.list_(pa.string()), "image": image}
    return pa.schema([(name, types.get(name, pa.string())) for name in schema.FIELDS])


def export_hub(rows: list[Row], out_dir: str | Path, name: str, split: str = "test", license: str = "unknown") -> Path:
    """Write a folder ready to push as a Hub dataset repo: data/<split>.parquet plus a README.md card."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    out_dir = Path(out_dir)
    (out_dir / "data").mkdir(parents=True, exist_ok=True)
    table = pa.Table.from_pylist([row.to_dict() for row in rows], schema=arrow_schema())
    pq.write_table(table, out_dir / "data" / f"{split}.parquet")
    (out_dir / "README.md").write_text(dataset_card(rows, name, split, license), encoding="utf-8")
    return out_dir


def dataset_card(rows: list[Row], name: str, split: str, license: str) -> str:
    """A Hugging Face dataset card: YAML metadata that tells `datasets` the split, then counts and fields."""
    header = {
        "license": license,
        "pretty_name": name,
        "tags": ["speculative-decoding", "benchmark", "specbench"],
        "configs": [{"config_name": "default", "data_files": [{"split": split, "path": f"data/{split}.parquet"}]}],
    }
    counts = summary(rows)
    lines = [
        "---",
        yaml.safe_dump(header, sort_keys=False).rstrip(),
        "---",
        "",
        f"# {name}",
        "",
        f"{counts['rows']} prompt rows in the specbench schema (Spec-Bench compatible), exported by "
        f"`specbench data export {name} --format hub`. Load them with "
        f"`datasets.load_dataset(<this repo>, split=\"{split}\")` or `specbench data show hf:<this repo>:{split}`.",
        "",
        "## Counts",
        "",
        "| category | rows |",
        "|---|---|",
        *(f"| {category} | {count} |" for category, count in counts["categories"].items()),
        "",
        "| family (source_dataset) | rows |",
        "|---|---|",
        *(f"| {family} | {count} |" for family, count in counts["families"].items()),
        "",
        "## Fields",
        "",
        "`question_id` (unique), `category`, `source_dataset` (prompt family), `prompt`, `turns` (user turns), "
        "`system_prompt_id` (null: the category's default), `image` ({source, name, url} or null), "
        "`image_caption` (for image-conditioned rows), `reference` (expected answer, if any).",
        "",
    ]
    return "\n".join(lines)
