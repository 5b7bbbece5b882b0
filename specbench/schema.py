"""The row schema and its validation: one place that decides what a valid prompt row is.

Every source (bundled JSONL, a user's JSONL or Parquet, a Hub dataset, an importer's output) is checked here,
and every problem is reported as `WHERE:LINE: what is wrong` so that a bad row is fixed, never silently dropped.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable
from pathlib import Path
from typing import Any

from specbench.errors import SpecbenchError

FIELDS = (
    "question_id",
    "category",
    "source_dataset",
    "prompt",
    "turns",
    "system_prompt_id",
    "image",
    "image_caption",
    "reference",
    "license",
    "origin",
)
IMAGE_KEYS = ("source", "name", "url")

CREATIVE_CATEGORIES = ("text-to-video", "image-to-video", "text-to-image", "image-to-image")
IMAGE_CATEGORIES = ("image-to-video", "image-to-image")
GENERAL_CATEGORIES = ("chat", "code", "stem", "math", "coding-long")
# What the importers produce: Spec-Bench (MT-Bench's eight plus five task categories).
IMPORTED_CATEGORIES = (
    "writing",
    "roleplay",
    "reasoning",
    "extraction",
    "coding",
    "humanities",
    "translation",
    "summarization",
    "qa",
    "math_reasoning",
    "rag",
)
KNOWN_CATEGORIES = frozenset(CREATIVE_CATEGORIES + GENERAL_CATEGORIES + IMPORTED_CATEGORIES)

_REQUIRED_STR = ("question_id", "category", "source_dataset", "prompt")
_OPTIONAL_STR = ("system_prompt_id", "image_caption", "reference", "license")
OPTIONAL_FIELDS = ("system_prompt_id", "image", "image_caption", "reference", "license", "origin")
# Who wrote a row's text: people for this project, a template filled in by a script, or a published prompt set
# (then `source_dataset` names it and `license` is its license).
ORIGINS = ("authored", "template", "package")


def paste_caption(prompt: str, caption: str) -> str:
    """The user turn a text-only target sees for an image row: the request plus what the image shows."""
    return f"user_prompt: {prompt}\nimage_caption: {caption}"


def normalise(record: Any, source: str) -> Any:
    """A row as users have it, in the full schema: Spec-Bench / MT-Bench lines and rows that leave fields out.

    Integer ids become strings, `prompt` is the first turn (and `turns` the prompt) when one is missing, a
    caption our Spec-Bench export pasted into turns[0] is taken out again, MT-Bench's per-turn `reference` list
    keeps the first turn's answer (the turn that is benchmarked), a missing `source_dataset` is `source`, and
    absent optional fields are null. Anything else is left for row_problems to report.
    """
    if not isinstance(record, dict):
        return record
    row = dict(record)
    question_id = row.get("question_id")
    if isinstance(question_id, int) and not isinstance(question_id, bool):
        row["question_id"] = str(question_id)
    turns = row.get("turns")
    if "prompt" not in row and isinstance(turns, list) and turns and isinstance(turns[0], str):
        row["prompt"] = turns[0]
    if "turns" not in row and isinstance(row.get("prompt"), str):
        row["turns"] = [row["prompt"]]
    caption, turns = row.get("image_caption"), row.get("turns")
    if isinstance(caption, str) and isinstance(turns, list) and turns and isinstance(row.get("prompt"), str) \
            and turns[0] == paste_caption(row["prompt"], caption):
        row["turns"] = [row["prompt"], *turns[1:]]
    if isinstance(row.get("reference"), list):
        row["reference"] = row["reference"][0] if row["reference"] else None
    row.setdefault("source_dataset", source)
    for name in OPTIONAL_FIELDS:
        row.setdefault(name, None)
    return row


def row_problems(record: Any) -> list[str]:
    """Everything wrong with one decoded row, without its location (the caller knows where it came from)."""
    if not isinstance(record, dict):
        return [f"expected a JSON object, got {type(record).__name__}"]
    problems = [f"missing field '{name}'" for name in FIELDS if name not in record and name not in OPTIONAL_FIELDS]
    problems += [f"unknown field '{name}'" for name in record if name not in FIELDS]
    for name in _REQUIRED_STR:
        if name in record and not isinstance(record[name], str):
            problems.append(f"'{name}' must be a string, got {_type(record[name])}")
    for name in _OPTIONAL_STR:
        if record.get(name) is not None and not isinstance(record[name], str):
            problems.append(f"'{name}' must be a string or null, got {_type(record[name])}")
    problems += _content_problems(record)
    return problems


def _content_problems(record: dict[str, Any]) -> list[str]:
    """Checks on values whose types are already right: empty text, unknown category, turns, image."""
    problems = []
    if isinstance(record.get("question_id"), str) and not record["question_id"].strip():
        problems.append("empty question_id")
    if isinstance(record.get("prompt"), str) and not record["prompt"].strip():
        problems.append("empty prompt")
    category = record.get("category")
    if isinstance(category, str) and category not in KNOWN_CATEGORIES:
        problems.append(f"unknown category '{category}' (known: {', '.join(sorted(KNOWN_CATEGORIES))})")
    origin = record.get("origin")
    if origin is not None and origin not in ORIGINS:
        problems.append(f"unknown origin {origin!r} (known: {', '.join(ORIGINS)}, or null)")
    caption = record.get("image_caption")
    if isinstance(caption, str) and not caption.strip():
        problems.append("empty image_caption (use null when there is none)")
    if "turns" in record:
        problems += _turn_problems(record["turns"], record.get("prompt"), caption)
    if record.get("image") is not None:
        problems += _image_problems(record["image"])
    elif category in IMAGE_CATEGORIES and caption is None:
        problems.append("image row with neither 'image' nor 'image_caption' (a text-only target would see no input)")
    return problems


def _turn_problems(turns: Any, prompt: Any, caption: Any) -> list[str]:
    """turns must be non-empty user turns; the first one is the prompt, or the prompt with the caption pasted."""
    if not isinstance(turns, list) or not all(isinstance(turn, str) for turn in turns):
        return [f"'turns' must be a list of strings, got {_type(turns)}"]
    if not turns:
        return ["'turns' is empty"]
    if any(not turn.strip() for turn in turns):
        return ["'turns' holds an empty turn"]
    if isinstance(prompt, str) and turns[0] != prompt:
        pasted = isinstance(caption, str) and turns[0] == paste_caption(prompt, caption)
        if not pasted:
            return ["turns[0] differs from prompt (allowed only as the prompt with its image_caption pasted in)"]
    return []


def _image_problems(image: Any) -> list[str]:
    if not isinstance(image, dict):
        return [f"'image' must be null or an object {{{', '.join(IMAGE_KEYS)}}}, got {_type(image)}"]
    allowed = ", ".join(IMAGE_KEYS)
    problems = [f"unknown image key '{key}' (allowed: {allowed})" for key in image if key not in IMAGE_KEYS]
    problems += [
        f"image '{key}' must be a string or null, got {_type(value)}"
        for key, value in image.items()
        if key in IMAGE_KEYS and value is not None and not isinstance(value, str)
    ]
    return problems


def _type(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def validate_records(
    records: Iterable[tuple[int, Any]], where: str, system_prompt_ids: Collection[str] | None = None
) -> list[str]:
    """Problems of numbered rows from one source, duplicate ids included, as `WHERE:LINE: problem`."""
    return [f"{where}:{line}: {problem}" for line, problem in numbered_problems(records, system_prompt_ids)]


def numbered_problems(
    records: Iterable[tuple[int, Any]], system_prompt_ids: Collection[str] | None = None
) -> list[tuple[int, str]]:
    """(line, problem) for numbered rows, duplicate ids included, for callers that merge other problems in.

    With `system_prompt_ids`, a row naming a system prompt outside them is a problem too (it would fail only
    when a run reaches it).
    """
    problems = []
    first_seen: dict[str, int] = {}
    for line, record in records:
        problems += [(line, problem) for problem in row_problems(record)]
        prompt_id = record.get("system_prompt_id") if isinstance(record, dict) else None
        if system_prompt_ids is not None and isinstance(prompt_id, str) and prompt_id not in system_prompt_ids:
            have = ", ".join(sorted(system_prompt_ids))
            problems.append((line, f"unknown system_prompt_id '{prompt_id}' (have: {have})"))
        question_id = record.get("question_id") if isinstance(record, dict) else None
        if not isinstance(question_id, str):
            continue
        if question_id in first_seen:
            problems.append((line, f"duplicate question_id '{question_id}' (first on line {first_seen[question_id]})"))
        else:
            first_seen[question_id] = line
    return problems


def default_source(path: Path) -> str:
    """The source_dataset of rows that name none: the file's stem, or its folder for Spec-Bench's question.jsonl."""
    return (path.parent.name or path.stem) if path.stem == "question" else path.stem


def read_file(
    path: str | Path, system_prompt_ids: Collection[str] | None = None
) -> tuple[list[dict[str, Any]], list[str]]:
    """Decode a .jsonl or .parquet file into normalised rows and list its problems in file order (empty when valid).

    Rows are returned even when there are problems so that a caller can count them, but the loader refuses
    any file with a problem. Blank JSONL lines hold no row and are skipped.
    """
    path = Path(path)
    if not path.is_file():
        raise SpecbenchError(f"no such file: {path}")
    if path.suffix == ".jsonl":
        numbered, problems = _decode_jsonl(path)
    elif path.suffix == ".parquet":
        numbered, problems = _decode_parquet(path), []
    else:
        raise SpecbenchError(f"{path}: expected a .jsonl or .parquet file{_import_hint(path)}")
    numbered = [(line, normalise(record, default_source(path))) for line, record in numbered]
    problems += numbered_problems(numbered, system_prompt_ids)
    problems.sort(key=lambda item: item[0])
    return [record for _, record in numbered], [f"{path}:{line}: {problem}" for line, problem in problems]


def _import_hint(path: Path) -> str:
    """Published prompt files in other formats convert with `specbench data import`."""
    if path.suffix in (".json", ".tsv", ".csv", ".txt"):
        return (f" (a VBench .json, PartiPrompts .tsv or other published format converts with "
                f"`specbench data import KIND {path} --out rows.jsonl`)")
    return ""


def validate_file(path: str | Path, system_prompt_ids: Collection[str] | None = None) -> list[str]:
    """`PATH:LINE: what is wrong` for every bad row of a .jsonl or .parquet file; empty when it is valid."""
    return read_file(path, system_prompt_ids)[1]


def _decode_jsonl(path: Path) -> tuple[list[tuple[int, Any]], list[tuple[int, str]]]:
    numbered, problems = [], []
    with path.open("rb") as handle:
        for line, raw in enumerate(handle, start=1):
            if not raw.strip():
                continue
            try:
                numbered.append((line, json.loads(raw.decode("utf-8"))))
            except UnicodeDecodeError:
                problems.append((line, "not UTF-8 text"))
            except json.JSONDecodeError as err:
                problems.append((line, f"bad JSON: {err.msg} (column {err.colno})"))
    return numbered, problems


def _decode_parquet(path: Path) -> list[tuple[int, Any]]:
    """Parquet rows are numbered from 1 like lines, so problems read the same for both formats."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except (pa.ArrowException, OSError) as err:
        raise SpecbenchError(f"{path}: not a readable Parquet file ({err})") from err
    return list(enumerate(table.to_pylist(), start=1))
