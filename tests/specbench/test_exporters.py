"""Exporters round-trip: Spec-Bench question.jsonl re-imports to the same rows, the Hub folder loads back
through `datasets` to the same rows, and vLLM's way of reading question.jsonl sees the right first turn."""

import json

import pandas as pd
import pytest
import yaml

from specbench import exporters, importers, schema
from specbench.dataset import Row, bundled_version, chat_messages, first_user_turn, load_rows, system_prompts


@pytest.fixture
def rows():
    return [
        Row("t1", "text-to-image", "fixture-t2i", "a red kite", ("a red kite",)),
        Row("i1", "image-to-image", "fixture-i2i", "make it night", ("make it night",),
            image={"source": "local", "name": "street.png", "url": "https://example.org/street.png"},
            image_caption="A quiet street by day."),
        Row("i2", "image-to-video", "fixture-i2v", "orbit it", ("orbit it",), image_caption="A bronze statue."),
        Row("m1", "math", "fixture-math", "What is 6*7?", ("What is 6*7?", "And 6*8?"), system_prompt_id="general", reference="42"),
    ]


@pytest.fixture
def datasets_cache(tmp_path, monkeypatch):
    import datasets

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf-cache")


def test_spec_bench_record_pastes_the_caption_and_keeps_everything_else(rows):
    record = exporters.spec_bench_record(rows[1])
    assert list(record)[:3] == ["question_id", "category", "turns"]
    assert record["turns"] == ["user_prompt: make it night\nimage_caption: A quiet street by day."]
    assert record["prompt"] == "make it night" and record["image"]["name"] == "street.png"
    math = exporters.spec_bench_record(rows[3])
    assert math["turns"] == ["What is 6*7?", "And 6*8?"] and math["reference"] == ["42"]
    assert "reference" not in exporters.spec_bench_record(rows[0])


def test_spec_bench_export_reimports_identically(tmp_path, rows):
    path = exporters.export_spec_bench(rows, tmp_path / "out")
    assert path == tmp_path / "out" / "question.jsonl"
    assert importers.import_file("spec-bench", path) == rows
    again = exporters.export_spec_bench(importers.import_file("spec-bench", path), tmp_path / "again")
    assert again.read_bytes() == path.read_bytes()


def test_spec_bench_export_reads_like_vllm_does(tmp_path, rows):
    """vLLM's spec_bench loader: pandas.read_json(lines=True), optional category filter, prompt = turns[0]."""
    frame = pd.read_json(exporters.export_spec_bench(rows, tmp_path), lines=True)
    assert [turns[0] for turns in frame["turns"]] == [first_user_turn(row) for row in rows]
    assert list(frame["category"]) == [row.category for row in rows]


@pytest.mark.parametrize("name", ["prompt-enhancement", "fireworks"])
def test_bundled_sets_round_trip_through_spec_bench(tmp_path, name):
    bundled = load_rows(name)
    assert importers.import_file("spec-bench", exporters.export_spec_bench(bundled, tmp_path)) == bundled


def test_hub_export_loads_back_identically(tmp_path, rows, datasets_cache):
    import datasets

    folder = exporters.export_hub(rows, tmp_path / "hub", name="fixture", split="test", license="cc-by-4.0")
    loaded = datasets.load_dataset(str(folder))
    assert list(loaded) == ["test"]
    assert list(loaded["test"]) == [row.to_dict() for row in rows]
    assert load_rows(f"hf:{folder}") == rows


def test_hub_export_of_a_set_without_images(tmp_path, rows, datasets_cache):
    """All-null image columns keep their struct type, so such a set loads back the same way."""
    import datasets

    plain = [rows[0], rows[3]]
    folder = exporters.export_hub(plain, tmp_path / "hub", name="plain", split="validation")
    assert list(datasets.load_dataset(str(folder), split="validation")) == [row.to_dict() for row in plain]


def test_bundled_set_round_trips_through_the_hub_export(tmp_path, datasets_cache):
    import datasets

    bundled = load_rows("prompt-enhancement")
    folder = exporters.export_hub(bundled, tmp_path / "hub", name="prompt-enhancement")
    assert [Row.from_dict(record) for record in datasets.load_dataset(str(folder), split="test")] == bundled


def test_bundled_hub_export_carries_the_card_system_prompts_and_a_working_snippet(tmp_path, datasets_cache):
    """The folder loads with datasets.load_dataset(folder); its card is the bundled card; the snippet builds the
    same chat specbench sends."""
    import datasets

    bundled = load_rows("prompt-enhancement")
    folder = exporters.export_hub(bundled, tmp_path / "hub", name="prompt-enhancement", license="cc-by-4.0",
                                  bundled=True)
    assert len(datasets.load_dataset(str(folder), split="test")) == 400
    card = (folder / "README.md").read_text(encoding="utf-8")
    _, header, body = card.split("---\n", 2)
    meta = yaml.safe_load(header)
    assert meta["dataset_version"] == bundled_version() and meta["source_datasets"]
    assert "**stand-ins**" in body and "## Limitations" in body and "## Training-prompt pool" not in body
    assert json.loads((folder / "system_prompts.json").read_text(encoding="utf-8")) == system_prompts()
    snippet = body.split("```python\n", 1)[1].split("```", 1)[0]
    namespace = {"system_prompts": system_prompts()}
    exec(snippet[snippet.index("def messages"):], namespace)
    for row in bundled[::50]:
        assert namespace["messages"](row.to_dict()) == chat_messages(row)


def test_dataset_card(rows):
    card = exporters.dataset_card(rows, "fixture", "test", "cc-by-4.0")
    _, header, body = card.split("---\n", 2)
    meta = yaml.safe_load(header)
    assert meta["license"] == "cc-by-4.0"
    assert meta["configs"] == [{"config_name": "default", "data_files": [{"split": "test", "path": "data/test.parquet"}]}]
    assert "4 prompt rows" in body
    assert "| image-to-image | 1 |" in body and "| fixture-math | 1 |" in body


def test_write_jsonl_is_the_bundled_format(tmp_path, rows):
    path = exporters.write_jsonl(rows, tmp_path / "sub" / "rows.jsonl")
    assert schema.validate_file(path) == []
    assert load_rows(str(path)) == rows
    assert json.loads(path.read_text().splitlines()[0]) == rows[0].to_dict()
