"""Importers: published prompt files -> rows in our schema, so public benchmarks run through the same loader.

Formats: Spec-Bench / MT-Bench `question.jsonl`, VBench `VBench_full_info.json`, PartiPrompts TSV, GenEval
`evaluation_metadata.jsonl` and HumanEval `HumanEval.jsonl.gz`. A bad item is reported as `PATH:LINE: problem` (for a JSON array, LINE is the
item's number) and the import fails as a whole: a partial import would silently drop prompts.
"""

from __future__ import annotations

import csv
import gzip
import json
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from specbench import schema
from specbench.dataset import Row
from specbench.errors import SpecbenchError


class _Bad(Exception):
    """One source item that cannot become a row; collected, never raised past this module."""


def import_spec_bench(path: Path, source: str = "spec-bench") -> list[Row]:
    """Spec-Bench or MT-Bench `question.jsonl`: {question_id, category, turns[, reference]} per line.

    Lines written by our Spec-Bench exporter also carry our other fields; those are read back, and a caption
    the exporter pasted into turns[0] is taken out again, so an export re-imports to the identical rows. Keys
    outside our schema are dropped. The conversion is the loader's own (schema.normalise), so `--dataset
    question.jsonl` gives the same rows.
    """

    def convert(_: int, text: str) -> dict[str, Any]:
        item = _require(_json_object(text), "question_id", "category", "turns")
        if not isinstance(item["turns"], list) or not item["turns"]:
            raise _Bad("'turns' must be a non-empty list of strings")
        if not isinstance(item["question_id"], (str, int)) or isinstance(item["question_id"], bool):
            raise _Bad(f"'question_id' must be a string or an integer, got {type(item['question_id']).__name__}")
        return schema.normalise({name: value for name, value in item.items() if name in schema.FIELDS}, source)

    return _convert(_lines(path), convert, path)


def import_vbench(path: Path, source: str = "vbench") -> list[Row]:
    """VBench `VBench_full_info.json`: a list of {prompt_en, dimension: [...]}; dimensions name the family."""
    try:
        items = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise SpecbenchError(f"{path}: not a JSON file ({err})") from err
    if not isinstance(items, list):
        raise SpecbenchError(f"{path}: expected a JSON list of {{prompt_en, dimension}} objects")

    def convert(number: int, item: Any) -> dict[str, Any]:
        item = _require(_object(item), "prompt_en")
        dimensions = item.get("dimension") or []
        if not isinstance(dimensions, list) or not all(isinstance(name, str) for name in dimensions):
            raise _Bad("'dimension' must be a list of strings")
        family = f"{source}/{'+'.join(dimensions)}" if dimensions else source
        return _text_row(f"{source}-{number:04d}", "text-to-video", family, item["prompt_en"])

    return _convert(enumerate(items, start=1), convert, path)


def import_partiprompts(path: Path, source: str = "partiprompts") -> list[Row]:
    """PartiPrompts TSV with a header `Prompt  Category  Challenge  Note`; Category names the family."""
    with path.open(encoding="utf-8", newline="") as handle:
        reader = csv.DictReader(handle, delimiter="\t", quoting=csv.QUOTE_NONE)
        missing = [column for column in ("Prompt", "Category") if column not in (reader.fieldnames or [])]
        if missing:
            raise SpecbenchError(f"{path}:1: missing column(s) {', '.join(missing)} in the TSV header")
        numbered = [(reader.line_num, line) for line in reader]

    def convert(number: int, item: dict[str, Any]) -> dict[str, Any]:
        if item["Prompt"] is None or item["Category"] is None:
            raise _Bad("too few columns")
        return _text_row(f"{source}-{number:04d}", "text-to-image", f"{source}/{item['Category']}", item["Prompt"])

    return _convert(numbered, convert, path)


def import_geneval(path: Path, source: str = "geneval") -> list[Row]:
    """GenEval `evaluation_metadata.jsonl`: {tag, include, prompt, ...} per line; the tag names the family."""

    def convert(number: int, text: str) -> dict[str, Any]:
        item = _require(_json_object(text), "tag", "prompt")
        return _text_row(f"{source}-{number:04d}", "text-to-image", f"{source}/{item['tag']}", item["prompt"])

    return _convert(_lines(path), convert, path)


def import_humaneval(path: Path, source: str = "humaneval") -> list[Row]:
    """HumanEval `HumanEval.jsonl.gz` (or the .jsonl inside): {task_id, prompt, ...} per line; the prompt (a
    signature and docstring to complete) is the user turn, the way Spec-Bench-style suites send it."""

    def convert(number: int, text: str) -> dict[str, Any]:
        item = _require(_json_object(text), "task_id", "prompt")
        return _text_row(f"{source}-{number:04d}", "code", source, item["prompt"])

    return _convert(_lines(path), convert, path)


IMPORTERS: dict[str, Callable[[Path, str], list[Row]]] = {
    "spec-bench": import_spec_bench,
    "vbench": import_vbench,
    "partiprompts": import_partiprompts,
    "geneval": import_geneval,
    "humaneval": import_humaneval,
}


def import_file(kind: str, path: str | Path, source: str | None = None) -> list[Row]:
    """Import a public prompt file of `kind`; `source` overrides the source_dataset (and id) prefix."""
    if kind not in IMPORTERS:
        raise SpecbenchError(f"unknown import kind '{kind}' (known: {', '.join(IMPORTERS)})")
    path = Path(path)
    if not path.is_file():
        raise SpecbenchError(f"no such file: {path}")
    try:
        return IMPORTERS[kind](path, source or kind)
    except UnicodeDecodeError as err:
        raise SpecbenchError(f"{path}: not UTF-8 text ({err.reason} at byte {err.start})") from err


def _text_row(question_id: str, category: str, family: str, prompt: Any) -> dict[str, Any]:
    """A row of a published prompt set (origin `package`): the prompt is the only user turn."""
    return {
        "question_id": question_id,
        "category": category,
        "source_dataset": family,
        "prompt": prompt,
        "turns": [prompt],
        "system_prompt_id": None,
        "image": None,
        "image_caption": None,
        "reference": None,
        "origin": "package",
    }


def _convert(items: Iterable[tuple[int, Any]], convert: Callable[[int, Any], dict[str, Any]], path: Path) -> list[Row]:
    """Convert every (line, item) with its 1-based item number, then validate the records.

    Any problem fails the whole import, all of them listed by line.
    """
    records, problems = [], []
    for number, (line, item) in enumerate(items, start=1):
        try:
            records.append((line, convert(number, item)))
        except _Bad as bad:
            problems.append((line, str(bad)))
    problems = sorted(problems + schema.numbered_problems(records), key=lambda problem: problem[0])
    if problems:
        listed = "\n".join(f"{path}:{line}: {problem}" for line, problem in problems)
        raise SpecbenchError(f"cannot import {path}: {len(problems)} problem(s):\n{listed}")
    return [Row.from_dict(record) for _, record in records]


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    """Numbered non-blank lines of a text file, gzip-compressed when its name ends in .gz."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as handle:
        yield from ((number, text) for number, text in enumerate(handle, start=1) if text.strip())


def _json_object(text: str) -> dict[str, Any]:
    try:
        return _object(json.loads(text))
    except json.JSONDecodeError as err:
        raise _Bad(f"bad JSON: {err.msg} (column {err.colno})") from err


def _object(item: Any) -> dict[str, Any]:
    if not isinstance(item, dict):
        raise _Bad(f"expected an object, got {type(item).__name__}")
    return item


def _require(item: dict[str, Any], *names: str) -> dict[str, Any]:
    missing = [name for name in names if name not in item]
    if missing:
        raise _Bad(f"missing {', '.join(repr(name) for name in missing)}")
    return item
