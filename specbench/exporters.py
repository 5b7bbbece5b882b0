"""Exporters: rows -> files other tools read (Spec-Bench `question.jsonl`, a Hub-ready Parquet folder, our JSONL).

Each format round-trips: the Spec-Bench file re-imports through importers.import_spec_bench to the same rows,
and the Hub folder loads back through `datasets.load_dataset(folder)` to the same rows.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml

from specbench import schema
from specbench.dataset import Row, bundled_card, first_user_turn, summary, system_prompts

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
        "license": row.license,
        "origin": row.origin,
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


def export_hub(
    rows: list[Row], out_dir: str | Path, name: str, split: str = "test", license: str = "unknown",
    bundled: bool = False,
) -> Path:
    """Write a folder ready to push as a Hub dataset repo: data/<split>.parquet, system_prompts.json and a card.

    The system prompts travel with the rows because a row names its prompt only by id (null: its category's).
    A bundled set's card is the bundled card itself, its loading section replaced by this export's.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    out_dir = Path(out_dir)
    (out_dir / "data").mkdir(parents=True, exist_ok=True)
    table = pa.Table.from_pylist([row.to_dict() for row in rows], schema=arrow_schema())
    pq.write_table(table, out_dir / "data" / f"{split}.parquet")
    (out_dir / SYSTEM_PROMPTS_FILE).write_text(
        json.dumps(system_prompts(), indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    (out_dir / "README.md").write_text(dataset_card(rows, name, split, license, bundled), encoding="utf-8")
    return out_dir


def dataset_card(rows: list[Row], name: str, split: str, license: str, bundled: bool = False) -> str:
    """A Hugging Face dataset card: YAML metadata that tells `datasets` the split, a loading snippet, then either
    the bundled card's sections (bundled sets) or the counts and fields (any other set)."""
    configs = [{"config_name": "default", "data_files": [{"split": split, "path": f"data/{split}.parquet"}]}]
    if bundled:
        header, body = bundled_card()
        header = {key: value for key, value in header.items() if key != "configs"} | {"configs": configs}
        sections = _card_sections(body)
        title = sections.pop(0).rstrip()
        kept = [section for section in sections if not section.startswith(_BUNDLED_ONLY_SECTIONS)]
        lines = [title, "", f"This repository holds the `{name}` set ({len(rows)} rows, split `{split}`) of the "
                 f"bundled sets described below.", "", *_loading_section(name, split), *kept]
    else:
        header = {
            "license": license,
            "pretty_name": name,
            "size_categories": [_size_category(len(rows))],
            "task_categories": ["text-generation"],
            "tags": ["speculative-decoding", "benchmark", "specbench"],
            "configs": configs,
        }
        lines = [f"# {name}", "", f"{len(rows)} prompt rows in the specbench schema (Spec-Bench compatible), "
                 f"exported by `specbench data export {name} --format hub`.", "",
                 *_loading_section(name, split), *_counts_and_fields(rows)]
    return "\n".join(["---", yaml.safe_dump(header, sort_keys=False).rstrip(), "---", "", *lines]).rstrip() + "\n"


SYSTEM_PROMPTS_FILE = "system_prompts.json"
# Sections of the bundled card that describe the package folder rather than an exported set.
_BUNDLED_ONLY_SECTIONS = ("## Loading", "## Training-prompt pool")


def _card_sections(body: str) -> list[str]:
    """The card's text before its first `## ` heading, then one string per `## ` section."""
    return re.split(r"(?m)^(?=## )", body.lstrip("\n"))


def _loading_section(name: str, split: str) -> list[str]:
    """How to load the export and send a row as specbench does (system prompt by id, caption pasted in)."""
    creative = ", ".join(f'"{category}"' for category in schema.CREATIVE_CATEGORIES)
    return [
        "## Loading",
        "",
        "```python",
        "import json",
        "from datasets import load_dataset",
        "from huggingface_hub import hf_hub_download",
        "",
        f'rows = load_dataset("<this repo>", split="{split}")',
        'with open(hf_hub_download("<this repo>", "system_prompts.json", repo_type="dataset")) as f:',
        "    system_prompts = json.load(f)",
        "",
        "def messages(row):",
        '    """The chat a text-only target gets: the row\'s system prompt, its caption pasted after the request."""',
        f'    default = row["category"] if row["category"] in ({creative}) else "general"',
        '    user = row["prompt"]',
        '    if row["image_caption"] is not None:',
        '        user = f"user_prompt: {row[\'prompt\']}\\nimage_caption: {row[\'image_caption\']}"',
        '    return [{"role": "system", "content": system_prompts[row["system_prompt_id"] or default]},',
        '            {"role": "user", "content": user}]',
        "```",
        "",
        f"With specbench: `specbench run --dataset hf:<this repo>:{split}` (or `specbench data show` the same NAME).",
        f"`{SYSTEM_PROMPTS_FILE}` holds the system prompts by id; a row whose `system_prompt_id` is null takes its "
        "category's (the creative categories have their own, every other category `general`).",
        "",
    ]


def _counts_and_fields(rows: list[Row]) -> list[str]:
    counts = summary(rows)
    return [
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
        "`image_caption` (for image-conditioned rows), `reference` (expected answer, if any), `license` (null: the "
        "set's), `origin` (authored, template or package).",
        "",
    ]


def _size_category(n: int) -> str:
    """The Hub's size bucket for n rows."""
    for limit, label in ((1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K")):
        if n < limit:
            return label
    return "n>100K"
