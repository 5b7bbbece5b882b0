"""The one loader every command uses: bundled sets, local JSONL/Parquet files and Hugging Face Hub datasets.

Each source goes through the same validation (specbench.schema), so `run`, `show` and `export` refuse a bad
row the same way `validate` reports it, and the rows a benchmark sees never depend on where they came from.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from specbench import schema
from specbench.errors import SpecbenchError

_BUNDLE = "specbench.bundled"
_HF_PREFIX = "hf:"


@dataclass(frozen=True)
class Row:
    """One prompt. `turns` are the user turns; benchmarks send the first one (see chat_messages)."""

    question_id: str
    category: str
    source_dataset: str
    prompt: str
    turns: tuple[str, ...]
    system_prompt_id: str | None = None
    image: dict[str, str | None] | None = None
    image_caption: str | None = None
    reference: str | None = None

    def __post_init__(self) -> None:
        # Normalise so rows compare equal however they were stored: JSON gives lists and may omit image keys,
        # Parquet gives every struct key.
        object.__setattr__(self, "turns", tuple(self.turns))
        if self.image is not None:
            object.__setattr__(self, "image", {key: self.image.get(key) for key in schema.IMAGE_KEYS})

    @classmethod
    def from_dict(cls, record: dict[str, Any]) -> Row:
        """Build a row from a record that schema.row_problems has accepted."""
        return cls(**{name: record[name] for name in schema.FIELDS})

    def to_dict(self) -> dict[str, Any]:
        """The JSON form, keys in schema order, turns as a list."""
        record = asdict(self)
        record["turns"] = list(self.turns)
        return record


# The benchmark sets. data/ also holds the drafters' training-prompt pool, which is deliberately not one.
BUNDLED = ("fireworks", "prompt-enhancement")


def bundled_names() -> list[str]:
    """Names of the prompt sets shipped in the package (data/<name>.jsonl)."""
    return list(BUNDLED)


@lru_cache(maxsize=1)
def _bundled_system_prompts() -> dict[str, str]:
    return json.loads(resources.files(_BUNDLE).joinpath("system_prompts.json").read_text(encoding="utf-8"))


def system_prompts() -> dict[str, str]:
    """The bundled system prompts (data/system_prompts.json), keyed by system_prompt_id."""
    return dict(_bundled_system_prompts())


def default_system_prompt_id(category: str) -> str:
    """Creative categories have their own prompt-enhancer prompt; every other category gets 'general'."""
    return category if category in schema.CREATIVE_CATEGORIES else "general"


def first_user_turn(row: Row, multimodal: bool = False) -> str:
    """The first user turn: a text-only target cannot see the image, so it gets the caption pasted in."""
    if row.image_caption is not None and not multimodal:
        return schema.paste_caption(row.prompt, row.image_caption)
    return row.prompt


def chat_messages(
    row: Row, system_prompts: dict[str, str] | None = None, multimodal: bool = False
) -> list[dict[str, str]]:
    """System + first user message for a row, as every engine adapter sends it."""
    prompts = _bundled_system_prompts() if system_prompts is None else system_prompts
    prompt_id = row.system_prompt_id or default_system_prompt_id(row.category)
    if prompt_id not in prompts:
        have = ", ".join(sorted(prompts))
        raise SpecbenchError(f"row {row.question_id}: no system prompt '{prompt_id}' (have: {have})")
    return [
        {"role": "system", "content": prompts[prompt_id]},
        {"role": "user", "content": first_user_turn(row, multimodal)},
    ]


def load_rows(
    spec: str,
    categories: list[str] | None = None,
    limit: int | None = None,
    seed: int | None = None,
) -> list[Row]:
    """Load, validate and select rows.

    spec is a bundled name, a .jsonl/.parquet path, or hf:<repo_id>[:<split>] (hf:<repo_id>:<config>:<split>
    for a repo with several configs; <repo_id> may also be a local folder laid out like a Hub repo).
    Selection order: category filter, then a shuffle with `seed` (when given), then the first `limit` rows.
    """
    if limit is not None and limit < 1:
        raise SpecbenchError(f"limit must be at least 1, got {limit}")
    rows = _resolve(spec)
    if categories:
        present = sorted({row.category for row in rows})
        unknown = [category for category in categories if category not in present]
        if unknown:
            raise SpecbenchError(f"{spec} has no category {', '.join(unknown)} (valid: {', '.join(present)})")
        rows = [row for row in rows if row.category in categories]
    if seed is not None:
        random.Random(seed).shuffle(rows)
    return rows[:limit] if limit is not None else rows


def summary(rows: list[Row]) -> dict[str, Any]:
    """Row counts in total, per category and per family (source_dataset), as `data list` and dataset cards show."""
    return {
        "rows": len(rows),
        "categories": dict(sorted(Counter(row.category for row in rows).items())),
        "families": dict(sorted(Counter(row.source_dataset for row in rows).items())),
    }


def _resolve(spec: str) -> list[Row]:
    if spec.startswith(_HF_PREFIX):
        return _load_hub(spec)
    if spec in bundled_names():
        with _bundled_path(spec) as path:
            return _load_file(path)
    path = Path(spec)
    if path.suffix in (".jsonl", ".parquet") and path.is_file():
        return _load_file(path)
    raise SpecbenchError(
        f"unknown dataset '{spec}': not a bundled set ({', '.join(bundled_names())}), "
        "not an existing .jsonl/.parquet file, and not hf:<repo_id>[:<split>]"
    )


@contextmanager
def _bundled_path(name: str) -> Iterator[Path]:
    """A filesystem path to a bundled set, even when the package is installed as a zip."""
    with resources.as_file(resources.files(_BUNDLE).joinpath(f"{name}.jsonl")) as path:
        yield path


def _load_file(path: Path) -> list[Row]:
    records, problems = schema.read_file(path)
    _refuse(problems, str(path))
    return [Row.from_dict(record) for record in records]


def _refuse(problems: list[str], where: str, shown: int = 20) -> None:
    """Name the first problems; `specbench data validate` lists every one."""
    if problems:
        more = len(problems) - shown
        tail = f"\n... and {more} more (all of them: specbench data validate {where})" if more > 0 else ""
        raise SpecbenchError(f"{where} is not a valid prompt set ({len(problems)} problem(s)):\n"
                             + "\n".join(problems[:shown]) + tail)


def _load_hub(spec: str) -> list[Row]:
    """Load through `datasets`, which caches downloads and honours HF_HUB_OFFLINE; failures become one line."""
    parts = spec[len(_HF_PREFIX) :].split(":")
    if not parts[0] or len(parts) > 3:
        raise SpecbenchError(f"bad Hub spec '{spec}': expected hf:<repo_id>[:<split>] or hf:<repo_id>:<config>:<split>")
    repo_id = parts[0]
    config = parts[1] if len(parts) == 3 else None
    split = parts[-1] if len(parts) > 1 else None

    import datasets

    try:
        loaded = datasets.load_dataset(repo_id, config, split=split)
    except (OSError, ValueError, datasets.exceptions.DatasetsError) as err:
        reason = " ".join(str(err).split()) or type(err).__name__
        raise SpecbenchError(f"cannot load Hugging Face dataset '{repo_id}'{_network_hint(err)}: {reason}") from err
    if isinstance(loaded, datasets.DatasetDict):
        if len(loaded) != 1:
            raise SpecbenchError(f"{repo_id} has splits {', '.join(loaded)}: name one as hf:{repo_id}:<split>")
        loaded = next(iter(loaded.values()))
    records = list(loaded)
    _refuse(schema.validate_records(enumerate(records, start=1), spec), spec)
    return [Row.from_dict(record) for record in records]


def _network_hint(err: Exception) -> str:
    """Why a repo could not be reached, in the words a user can act on."""
    if not isinstance(err, ConnectionError):
        return ""
    import datasets

    if datasets.config.HF_HUB_OFFLINE:
        return " (HF_HUB_OFFLINE is set and the dataset is not in the local cache)"
    return " (the Hub is unreachable and the dataset is not in the local cache)"
