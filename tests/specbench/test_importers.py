"""Importers on small fixtures in each public format: rows in our schema, bad items reported by line."""

import json

import pytest

from specbench import exporters, importers, schema
from specbench.dataset import Row
from specbench.errors import SpecbenchError


def write(path, text):
    path.write_text(text, encoding="utf-8")
    return path


def jsonl(path, items):
    return write(path, "".join(json.dumps(item) + "\n" for item in items))


def assert_valid(rows, tmp_path):
    """Imported rows must pass the same validation as any other file."""
    assert schema.validate_file(exporters.write_jsonl(rows, tmp_path / "imported.jsonl")) == []


def test_spec_bench_and_mt_bench_lines(tmp_path):
    path = jsonl(
        tmp_path / "question.jsonl",
        [
            {"question_id": 81, "category": "writing", "turns": ["Write a haiku about tea.", "Now make it rhyme."]},
            {"question_id": 111, "category": "math", "turns": ["What is 3*4?", "And 3*5?"], "reference": ["12", "15"]},
            {"question_id": "sb-7", "category": "summarization", "turns": ["Summarize: the cat sat."]},
        ],
    )
    rows = importers.import_file("spec-bench", path)
    assert rows[0] == Row("81", "writing", "spec-bench", "Write a haiku about tea.", ("Write a haiku about tea.", "Now make it rhyme."))
    assert rows[1].reference == "12" and rows[1].turns == ("What is 3*4?", "And 3*5?")
    assert rows[2].question_id == "sb-7" and rows[2].reference is None
    assert {row.source_dataset for row in importers.import_file("spec-bench", path, source="mt-bench")} == {"mt-bench"}
    assert_valid(rows, tmp_path)


def test_spec_bench_bad_lines_fail_the_whole_import(tmp_path):
    path = jsonl(
        tmp_path / "question.jsonl",
        [
            {"question_id": 1, "category": "writing", "turns": ["fine"]},
            {"question_id": 2, "category": "writing"},
            {"question_id": 3, "category": "poetry", "turns": ["a poem"]},
            {"question_id": [4], "category": "writing", "turns": ["x"]},
            {"question_id": 5, "category": "writing", "turns": []},
        ],
    )
    with path.open("a") as handle:
        handle.write("{not json\n")
    with pytest.raises(SpecbenchError) as caught:
        importers.import_file("spec-bench", path)
    message = str(caught.value)
    assert "5 problem(s)" in message
    assert f"{path}:2: missing 'turns'" in message
    assert f"{path}:3: unknown category 'poetry'" in message
    assert f"{path}:4: 'question_id' must be a string or an integer" in message
    assert f"{path}:5: 'turns' must be a non-empty list" in message
    assert f"{path}:6: bad JSON" in message


def test_vbench(tmp_path):
    items = [
        {"prompt_en": "a kite rising over a green hill", "dimension": ["subject_consistency", "motion_smoothness"]},
        {"prompt_en": "waves rolling onto a pebble beach", "dimension": ["scene"]},
    ]
    rows = importers.import_file("vbench", write(tmp_path / "VBench_full_info.json", json.dumps(items)))
    assert [row.question_id for row in rows] == ["vbench-0001", "vbench-0002"]
    assert {row.category for row in rows} == {"text-to-video"}
    assert [row.source_dataset for row in rows] == ["vbench/subject_consistency+motion_smoothness", "vbench/scene"]
    assert rows[1].prompt == "waves rolling onto a pebble beach" and rows[1].turns == (rows[1].prompt,)
    assert_valid(rows, tmp_path)


def test_vbench_problems(tmp_path):
    with pytest.raises(SpecbenchError, match="expected a JSON list"):
        importers.import_file("vbench", write(tmp_path / "a.json", '{"prompt_en": "x"}'))
    with pytest.raises(SpecbenchError, match="not a JSON file"):
        importers.import_file("vbench", write(tmp_path / "b.json", "[{"))
    items = [{"prompt_en": "ok"}, {"prompt": "wrong key"}, {"prompt_en": ""}, {"prompt_en": "x", "dimension": "scene"}]
    with pytest.raises(SpecbenchError) as caught:
        importers.import_file("vbench", write(tmp_path / "c.json", json.dumps(items)))
    message = str(caught.value)
    assert ":2: missing 'prompt_en'" in message and ":3: empty prompt" in message and ":4: 'dimension' must be" in message


def test_partiprompts(tmp_path):
    tsv = (
        "Prompt\tCategory\tChallenge\tNote\n"
        'a sign that says "open late" in neon\tWorld Knowledge\tWriting & Symbols\t\n'
        "three red apples on a blue plate\tProduce & Plants\tCounting\tcolor binding\n"
    )
    rows = importers.import_file("partiprompts", write(tmp_path / "PartiPrompts.tsv", tsv))
    assert [row.question_id for row in rows] == ["partiprompts-0001", "partiprompts-0002"]
    assert rows[0].prompt == 'a sign that says "open late" in neon'
    assert [row.source_dataset for row in rows] == ["partiprompts/World Knowledge", "partiprompts/Produce & Plants"]
    assert {row.category for row in rows} == {"text-to-image"}
    assert_valid(rows, tmp_path)


def test_partiprompts_problems(tmp_path):
    with pytest.raises(SpecbenchError, match="missing column.*Category"):
        importers.import_file("partiprompts", write(tmp_path / "a.tsv", "Prompt\tKind\nx\ty\n"))
    tsv = "Prompt\tCategory\nfine\tAnimals\n\tAnimals\nonly a prompt\n"
    with pytest.raises(SpecbenchError) as caught:
        importers.import_file("partiprompts", write(tmp_path / "b.tsv", tsv))
    message = str(caught.value)
    assert f"{tmp_path / 'b.tsv'}:3: empty prompt" in message and f"{tmp_path / 'b.tsv'}:4: too few columns" in message


def test_geneval(tmp_path):
    path = jsonl(
        tmp_path / "evaluation_metadata.jsonl",
        [
            {"tag": "single_object", "include": [{"class": "bench", "count": 1}], "prompt": "a photo of a bench"},
            {"tag": "counting", "include": [{"class": "cup", "count": 3}], "prompt": "a photo of three cups"},
        ],
    )
    rows = importers.import_file("geneval", path, source="gen")
    assert [(row.question_id, row.source_dataset) for row in rows] == [("gen-0001", "gen/single_object"), ("gen-0002", "gen/counting")]
    assert rows[1].prompt == "a photo of three cups" and rows[1].category == "text-to-image"
    assert_valid(rows, tmp_path)


def test_geneval_missing_tag(tmp_path):
    path = jsonl(tmp_path / "meta.jsonl", [{"prompt": "a photo of a cat"}])
    with pytest.raises(SpecbenchError, match=r"meta.jsonl:1: missing 'tag'"):
        importers.import_file("geneval", path)


def test_import_file_errors(tmp_path):
    with pytest.raises(SpecbenchError, match="unknown import kind 'sharegpt'.*spec-bench, vbench, partiprompts, geneval"):
        importers.import_file("sharegpt", tmp_path / "x")
    with pytest.raises(SpecbenchError, match="no such file"):
        importers.import_file("geneval", tmp_path / "missing.jsonl")
    (tmp_path / "latin1.jsonl").write_bytes(b'{"tag": "x", "prompt": "caf\xe9"}\n')
    with pytest.raises(SpecbenchError, match="not UTF-8"):
        importers.import_file("geneval", tmp_path / "latin1.jsonl")


def test_humaneval_gzip(tmp_path):
    import gzip

    path = tmp_path / "HumanEval.jsonl.gz"
    with gzip.open(path, "wt", encoding="utf-8") as handle:
        handle.write(json.dumps({"task_id": "HumanEval/0", "prompt": "def add(a, b):\n    \"\"\"Add.\"\"\"\n",
                                 "entry_point": "add"}) + "\n")
        handle.write(json.dumps({"prompt": "def f():\n"}) + "\n")
    with pytest.raises(SpecbenchError, match=f"{path}:2: missing 'task_id'"):
        importers.import_file("humaneval", path)
    path.write_bytes(gzip.compress(b'{"task_id": "HumanEval/0", "prompt": "def add(a, b):\\n"}\n'))
    rows = importers.import_file("humaneval", path)
    assert rows == [Row("humaneval-0001", "code", "humaneval", "def add(a, b):\n", ("def add(a, b):\n",),
                        origin="package")]
    assert_valid(rows, tmp_path)
