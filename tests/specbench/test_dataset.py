"""The loader: bundled sets, local JSONL/Parquet, hf: specs (local Hub-like folders and offline errors),
selection, chat messages, and the real bundled data and its dataset card."""

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from specbench import dataset, schema
from specbench.dataset import Row, chat_messages, load_rows
from specbench.errors import SpecbenchError

DATA_DIR = Path(__file__).resolve().parents[2] / "data"
CREATIVE = ("text-to-video", "image-to-video", "text-to-image", "image-to-image")


def make_row(number, category="chat", **changes):
    prompt = changes.pop("prompt", f"prompt number {number}")
    fields = {"source_dataset": "fixture", "prompt": prompt, "turns": [prompt]} | changes
    return Row(question_id=f"q{number:02d}", category=category, **fields)


@pytest.fixture
def rows():
    return [make_row(n, "chat" if n % 2 else "math") for n in range(20)]


@pytest.fixture
def jsonl(tmp_path, rows):
    path = tmp_path / "set.jsonl"
    path.write_text("".join(json.dumps(row.to_dict()) + "\n" for row in rows), encoding="utf-8")
    return path


@pytest.fixture
def datasets_cache(tmp_path, monkeypatch):
    """Keep `datasets`' Arrow cache out of the user's home."""
    import datasets

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf-cache")
    return tmp_path / "hf-cache"


def hub_folder(path, splits):
    """A folder laid out like a Hub dataset repo: README.md card with configs + data/<split>.parquet."""
    (path / "data").mkdir(parents=True)
    data_files = []
    for split, split_rows in splits.items():
        pq.write_table(pa.Table.from_pylist([row.to_dict() for row in split_rows]), path / "data" / f"{split}.parquet")
        data_files.append({"split": split, "path": f"data/{split}.parquet"})
    card = {"license": "cc-by-4.0", "configs": [{"config_name": "default", "data_files": data_files}]}
    (path / "README.md").write_text(f"---\n{yaml.safe_dump(card)}---\n# fixture\n", encoding="utf-8")
    return path


# --- Row -----------------------------------------------------------------------------------------------------


def test_row_normalises_turns_and_image_and_round_trips():
    row = make_row(1, "image-to-image", image={"name": "street.png"}, image_caption="A street.")
    assert row.turns == ("prompt number 1",)
    assert row.image == {"source": None, "name": "street.png", "url": None}
    assert list(row.to_dict()) == list(schema.FIELDS)
    assert row.to_dict()["turns"] == ["prompt number 1"]
    assert Row.from_dict(row.to_dict()) == row


# --- local files and selection -------------------------------------------------------------------------------


def test_load_local_jsonl_and_parquet(tmp_path, jsonl, rows):
    assert load_rows(str(jsonl)) == rows
    parquet = tmp_path / "set.parquet"
    pq.write_table(pa.Table.from_pylist([row.to_dict() for row in rows]), parquet)
    assert load_rows(str(parquet)) == rows


def test_category_filter_and_unknown_category(jsonl):
    assert {row.category for row in load_rows(str(jsonl), categories=["math"])} == {"math"}
    assert len(load_rows(str(jsonl), categories=["math", "chat"])) == 20
    with pytest.raises(SpecbenchError, match=r"no category stem \(valid: chat, math\)"):
        load_rows(str(jsonl), categories=["stem"])


def test_seed_shuffles_deterministically_before_limit(jsonl, rows):
    first = load_rows(str(jsonl), seed=3)
    assert first == load_rows(str(jsonl), seed=3)
    assert first != rows and sorted(first, key=lambda row: row.question_id) == rows
    assert first != load_rows(str(jsonl), seed=4)
    assert load_rows(str(jsonl), seed=3, limit=5) == first[:5]
    assert load_rows(str(jsonl), limit=5) == rows[:5]


def test_bad_limit_and_unknown_spec(jsonl, tmp_path):
    with pytest.raises(SpecbenchError, match="limit must be at least 1"):
        load_rows(str(jsonl), limit=0)
    with pytest.raises(SpecbenchError, match="unknown dataset 'nope'.*fireworks, prompt-enhancement"):
        load_rows("nope")
    with pytest.raises(SpecbenchError, match="unknown dataset"):
        load_rows(str(tmp_path / "missing.jsonl"))


def test_unknown_system_prompt_id_is_refused_when_the_set_loads(tmp_path):
    """Not only when a run reaches the row."""
    path = tmp_path / "set.jsonl"
    path.write_text(json.dumps(make_row(1, system_prompt_id="poet").to_dict()) + "\n", encoding="utf-8")
    with pytest.raises(SpecbenchError, match=f"{path}:1: unknown system_prompt_id 'poet'"):
        load_rows(str(path))


def test_invalid_file_is_refused_with_every_problem(tmp_path):
    path = tmp_path / "bad.jsonl"
    good = make_row(1).to_dict()
    path.write_text("\n".join([json.dumps(good), json.dumps(good), "{oops", json.dumps(good | {"question_id": "x", "category": "poetry"})]))
    with pytest.raises(SpecbenchError) as caught:
        load_rows(str(path))
    message = str(caught.value)
    assert "3 problem(s)" in message
    for line in (2, 3, 4):
        assert f"{path}:{line}:" in message


def test_spec_bench_and_mt_bench_files_load_as_they_are(tmp_path):
    """`--dataset question.jsonl` straight from Spec-Bench or MT-Bench: the same rows `data import` gives."""
    path = tmp_path / "mt_bench" / "question.jsonl"
    path.parent.mkdir()
    lines = [{"question_id": 81, "category": "writing", "turns": ["Write a haiku about tea.", "Now make it rhyme."]},
             {"question_id": 111, "category": "math", "turns": ["What is 3*4?", "And 3*5?"], "reference": ["12", "15"]}]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    rows = load_rows(str(path))
    assert rows[0] == Row("81", "writing", "mt_bench", "Write a haiku about tea.",
                          ("Write a haiku about tea.", "Now make it rhyme."))
    assert rows[1].reference == "12" and rows[1].image is None and rows[1].system_prompt_id is None
    from specbench import importers

    assert importers.import_file("spec-bench", path, source="mt_bench") == rows


def test_a_folder_of_shards_loads_as_one_set(tmp_path, rows):
    for number, part in enumerate((rows[:7], rows[7:])):
        path = tmp_path / "set" / f"part-{number}.jsonl"
        path.parent.mkdir(exist_ok=True)
        path.write_text("".join(json.dumps(row.to_dict()) + "\n" for row in part), encoding="utf-8")
    assert load_rows(str(tmp_path / "set")) == rows
    (tmp_path / "none").mkdir()
    with pytest.raises(SpecbenchError, match="a folder with no .jsonl or .parquet shards"):
        load_rows(str(tmp_path / "none"))


def test_an_empty_set_is_refused(tmp_path):
    path = tmp_path / "empty.jsonl"
    path.write_text("")
    with pytest.raises(SpecbenchError, match="holds no rows"):
        load_rows(str(path))


def test_a_published_file_in_another_format_points_to_data_import(tmp_path):
    path = tmp_path / "VBench_full_info.json"
    path.write_text("[]")
    with pytest.raises(SpecbenchError, match="specbench data import KIND"):
        load_rows(str(path))


def test_dataset_version_is_the_bundled_release_or_a_digest_of_the_rows(jsonl, rows):
    assert dataset.dataset_version("fireworks") == card()[0]["dataset_version"] == dataset.bundled_version()
    digest = dataset.dataset_version(str(jsonl))
    assert digest.startswith("sha256:") and digest == dataset.dataset_version(str(jsonl))
    jsonl.write_text("".join(json.dumps(row.to_dict()) + "\n" for row in rows[:-1]), encoding="utf-8")
    assert dataset.dataset_version(str(jsonl)) != digest


# --- chat messages -------------------------------------------------------------------------------------------

PROMPTS = {name: f"system for {name}" for name in (*CREATIVE, "general", "custom")}


@pytest.mark.parametrize(
    ("category", "expected"),
    [*((category, category) for category in CREATIVE), *((c, "general") for c in ("chat", "code", "stem", "math", "coding-long", "writing"))],
)
def test_default_system_prompt_per_category(category, expected):
    messages = chat_messages(make_row(1, category), PROMPTS)
    assert messages == [
        {"role": "system", "content": f"system for {expected}"},
        {"role": "user", "content": "prompt number 1"},
    ]


def test_row_system_prompt_id_wins_and_unknown_id_is_an_error():
    assert chat_messages(make_row(1, "chat", system_prompt_id="custom"), PROMPTS)[0]["content"] == "system for custom"
    with pytest.raises(SpecbenchError, match="no system prompt 'missing'"):
        chat_messages(make_row(1, "chat", system_prompt_id="missing"), PROMPTS)


def test_caption_is_pasted_only_for_text_only_targets():
    row = make_row(1, "image-to-video", prompt="orbit around it", image_caption="A statue in a square.")
    assert chat_messages(row, PROMPTS)[1]["content"] == "user_prompt: orbit around it\nimage_caption: A statue in a square."
    assert chat_messages(row, PROMPTS, multimodal=True)[1]["content"] == "orbit around it"


def test_chat_messages_default_to_the_bundled_system_prompts():
    bundled = dataset.system_prompts()
    assert chat_messages(make_row(1, "text-to-image"), None)[0]["content"] == bundled["text-to-image"]


# --- hf: -----------------------------------------------------------------------------------------------------


def test_hf_spec_loads_a_hub_like_folder(tmp_path, rows, datasets_cache):
    repo = hub_folder(tmp_path / "repo", {"test": rows[:12], "train": rows[12:]})
    assert load_rows(f"hf:{repo}:test") == rows[:12]
    assert load_rows(f"hf:{repo}:train", categories=["math"]) == [row for row in rows[12:] if row.category == "math"]
    assert any(datasets_cache.iterdir()), "datasets should cache under the configured cache dir"
    with pytest.raises(SpecbenchError, match="has splits test, train: name one"):
        load_rows(f"hf:{repo}")
    with pytest.raises(SpecbenchError, match=f"cannot load Hugging Face dataset '{repo}'.*validation"):
        load_rows(f"hf:{repo}:validation")


def test_hf_spec_with_one_split_needs_no_split_name(tmp_path, rows, datasets_cache):
    repo = hub_folder(tmp_path / "repo", {"test": rows})
    assert load_rows(f"hf:{repo}") == rows


def test_hf_rows_are_validated_too(tmp_path, datasets_cache):
    repo = hub_folder(tmp_path / "repo", {"test": [make_row(1), make_row(1)]})
    with pytest.raises(SpecbenchError, match=rf"hf:{repo}:test:2: duplicate question_id 'q01'"):
        load_rows(f"hf:{repo}:test")


def test_bad_hf_spec():
    with pytest.raises(SpecbenchError, match="bad Hub spec"):
        load_rows("hf:")
    with pytest.raises(SpecbenchError, match="bad Hub spec"):
        load_rows("hf:a/b:c:d:e")


def test_offline_uncached_repo_gives_one_clear_line(tmp_path):
    """Through the real CLI entry point in a fresh process, so HF_HUB_OFFLINE is read at import as in use."""
    env = os.environ | {"HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf"), "COLUMNS": "400"}
    done = subprocess.run(
        [sys.executable, "-m", "specbench.cli", "data", "show", "hf:specbench-tests/never-cached:test"],
        capture_output=True, text=True, env=env, timeout=120,
    )
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1
    assert "'specbench-tests/never-cached'" in errors[0] and "HF_HUB_OFFLINE is set" in errors[0]


# --- the bundled data ----------------------------------------------------------------------------------------


def test_bundled_names():
    assert dataset.bundled_names() == ["fireworks", "prompt-enhancement"]


def test_prompt_enhancement_counts():
    rows = load_rows("prompt-enhancement")
    assert len(rows) == 400
    assert Counter(row.category for row in rows) == {category: 100 for category in CREATIVE}
    families = Counter(row.source_dataset for row in rows)
    assert len(families) == 14 and min(families.values()) >= 20
    assert {row.source_dataset for row in rows if row.category == "text-to-video"} == {"vbench"}
    for row in rows:
        needs_caption = row.category.startswith("image-to-")
        assert (row.image_caption is not None) == needs_caption, row.question_id


def test_every_bundled_row_names_its_origin_and_license():
    """Drawn rows carry their published set's license; authored rows the card's."""
    licenses = {"vbench": "apache-2.0", "humaneval": "mit"}
    for name in dataset.bundled_names():
        for row in load_rows(name):
            if row.source_dataset in licenses:
                assert (row.origin, row.license) == ("package", licenses[row.source_dataset]), row.question_id
            else:
                assert (row.origin, row.license) == ("authored", "cc-by-4.0"), row.question_id


def test_card_states_the_measured_traits():
    """The card's trait table is what tools/prompt_traits.py measures on the bundled rows."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("prompt_traits", DATA_DIR.parent / "tools" / "prompt_traits.py")
    traits = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(traits)
    measured = traits.table([row.to_dict() for row in load_rows("prompt-enhancement")])
    _, body = card()
    assert "\n".join(measured) in body
    assert traits.traits("a cat on a roof --ar 16:9 🐱") == {"emoji", "parameter syntax"}
    assert traits.traits("mach den Himmel blau und die Wolken zu einem Sturm") == {"non-English"}
    assert traits.traits("make the den cozy and let the old plant die back a little") == set()


def test_fireworks_counts():
    rows = load_rows("fireworks")
    assert Counter(row.category for row in rows) == {"chat": 30, "code": 30, "stem": 30, "math": 30, "coding-long": 18}
    assert all(row.reference for row in rows if row.category == "math")
    assert all(len(row.prompt.split()) >= 300 for row in rows if row.category == "coding-long")


def test_bundled_system_prompts_cover_every_bundled_category():
    prompts = dataset.system_prompts()
    for name in dataset.bundled_names():
        for row in load_rows(name):
            assert chat_messages(row)[0]["content"] == prompts[dataset.default_system_prompt_id(row.category)]


def card():
    text = (DATA_DIR / "README.md").read_text(encoding="utf-8")
    _, header, body = text.split("---\n", 2)
    return yaml.safe_load(header), body


def test_dataset_card_header_matches_the_files():
    header, _ = card()
    assert header["license"] == ["cc-by-4.0", "apache-2.0", "mit"]
    for key in ("task_categories", "size_categories", "source_datasets", "annotations_creators", "language_creators"):
        assert header[key], key
    configs = {config["config_name"]: config["data_files"] for config in header["configs"]}
    assert set(configs) == set(dataset.bundled_names())
    for name, files in configs.items():
        assert [(entry["split"], entry["path"]) for entry in files] == [("test", f"{name}.jsonl")]


def test_dataset_card_counts_match_the_data():
    _, body = card()
    for name in dataset.bundled_names():
        rows = load_rows(name)
        assert f"### {name} ({len(rows)})" in body
        for (category, family), count in Counter((row.category, row.source_dataset) for row in rows).items():
            assert f"| {category} | {family} | {count} |" in body


def test_dataset_card_says_what_the_sets_stand_for_first():
    _, body = card()
    first = body.split("\n\n")[1]
    assert "**stand-ins**" in first and "fal's 400 prompt-enhancement" in first and "Fireworks' 138" in first
    assert "VBench" in first and "HumanEval" in first and "written for this project" in first
    for section in ("## What differs from the originals", "## Running the originals", "## Out-of-scope use",
                    "## Limitations", "## Citation"):
        assert section in body


def test_data_folder_loads_as_a_hub_repo_through_its_card(datasets_cache):
    assert load_rows(f"hf:{DATA_DIR}:fireworks:test") == load_rows("fireworks")
