"""The one loader every command uses: bundled sets, local JSONL/Parquet files and Hugging Face Hub datasets.

Each source goes through the same validation (specbench.schema), so `run`, `show` and `export` refuse a bad
row the same way `validate` reports it, and the rows a benchmark sees never depend on where they came from.
"""

from __future__ import annotations

import hashlib
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

import yaml

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
    license: str | None = None              # null: the set's license
    origin: str | None = None               # authored, template or package (schema.ORIGINS)

    def __post_init__(self) -> None:
        # Normalise so rows compare equal however they were stored: JSON gives lists and may omit image keys,
        # Parquet gives every struct key.
        object.__setattr__(self, "turns", tuple(self.turns))
        if self.image is not None:
            object.__setattr__(self, "image", {key: self.image.get(key) for key in schema.IMAGE_KEYS})

    @classmethod
    def from_dict(cls, record: dict[str, Any]) -> Row:
        """Build a row from a record that schema.row_problems has accepted (absent optional fields are null)."""
        return cls(**{name: record.get(name) for name in schema.FIELDS})

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


def bundled_card() -> tuple[dict[str, Any], str]:
    """The bundled dataset card (data/README.md) as its YAML header and its Markdown body."""
    card = resources.files(_BUNDLE).joinpath("README.md").read_text(encoding="utf-8")
    _, header, body = card.split("---\n", 2)
    return yaml.safe_load(header), body


@lru_cache(maxsize=1)
def bundled_version() -> str:
    """The bundled sets' release, read from the dataset card's `dataset_version` (the one place it is stated)."""
    return str(bundled_card()[0]["dataset_version"])


def dataset_version(spec: str) -> str:
    """What a run manifest records of its prompts: the bundled release, or a digest of another set's rows.

    A digest names the rows themselves, so two runs on a user's file compare only when the file did not change.
    """
    if spec in bundled_names():
        return bundled_version()
    rows = json.dumps([row.to_dict() for row in _resolve(spec)], sort_keys=True, ensure_ascii=False)
    return "sha256:" + hashlib.sha256(rows.encode("utf-8")).hexdigest()[:16]


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


def read_set(spec: str) -> tuple[list[dict[str, Any]], list[str]]:
    """Decode a set from any source into normalised records and every problem as `WHERE:LINE: problem`.

    spec is what load_rows takes, or a folder of .jsonl/.parquet shards (read in name order as one set).
    Records come back even when there are problems, so `specbench data validate` can count them; a set with
    no rows is a problem too (a benchmark of nothing would pass silently).
    """
    known_prompts = set(_bundled_system_prompts())
    path = Path(spec)
    if spec.startswith(_HF_PREFIX):
        records = [schema.normalise(record, spec[len(_HF_PREFIX):]) for record in _hub_records(spec)]
        problems = schema.validate_records(enumerate(records, start=1), spec, known_prompts)
    elif spec in bundled_names():
        with _bundled_path(spec) as bundled:
            records, problems = schema.read_file(bundled, known_prompts)
    elif path.is_dir():
        records, problems = _read_shards(path, known_prompts)
    elif path.is_file():
        records, problems = schema.read_file(path, known_prompts)
    else:
        raise SpecbenchError(
            f"unknown dataset '{spec}': not a bundled set ({', '.join(bundled_names())}), not an existing "
            ".jsonl/.parquet file or folder of them, and not hf:<repo_id>[:<split>]"
        )
    if not records and not problems:
        problems = [f"{spec}: holds no rows"]
    return records, problems


def _read_shards(folder: Path, known_prompts: set[str]) -> tuple[list[dict[str, Any]], list[str]]:
    """Every .jsonl/.parquet file under `folder` as one set: each shard checked, ids unique across shards."""
    shards = sorted(path for path in folder.rglob("*") if path.suffix in (".jsonl", ".parquet") and path.is_file())
    if not shards:
        raise SpecbenchError(f"{folder}: a folder with no .jsonl or .parquet shards")
    records: list[dict[str, Any]] = []
    problems: list[str] = []
    first_shard: dict[str, Path] = {}
    for shard in shards:
        shard_records, shard_problems = schema.read_file(shard, known_prompts)
        problems += shard_problems
        for number, record in enumerate(shard_records, start=1):
            question_id = record.get("question_id") if isinstance(record, dict) else None
            if isinstance(question_id, str) and first_shard.setdefault(question_id, shard) != shard:
                problems.append(f"{shard}: row {number}: duplicate question_id '{question_id}' "
                                f"(also in {first_shard[question_id]})")
        records += shard_records
    return records, problems


def _resolve(spec: str) -> list[Row]:
    records, problems = read_set(spec)
    _refuse(problems, spec)
    return [Row.from_dict(record) for record in records]


@contextmanager
def _bundled_path(name: str) -> Iterator[Path]:
    """A filesystem path to a bundled set, even when the package is installed as a zip."""
    with resources.as_file(resources.files(_BUNDLE).joinpath(f"{name}.jsonl")) as path:
        yield path


def _refuse(problems: list[str], where: str, shown: int = 20) -> None:
    """Name the first problems; `specbench data validate` lists every one."""
    if problems:
        more = len(problems) - shown
        tail = f"\n... and {more} more (all of them: specbench data validate {where})" if more > 0 else ""
        raise SpecbenchError(f"{where} is not a valid prompt set ({len(problems)} problem(s)):\n"
                             + "\n".join(problems[:shown]) + tail)


def _hub_records(spec: str) -> list[dict[str, Any]]:
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
    return list(loaded)


def _network_hint(err: Exception) -> str:
    """Why a repo could not be reached, in the words a user can act on."""
    if not isinstance(err, ConnectionError):
        return ""
    import datasets

    if datasets.config.HF_HUB_OFFLINE:
        return " (HF_HUB_OFFLINE is set and the dataset is not in the local cache)"
    return " (the Hub is unreachable and the dataset is not in the local cache)"
