"""Row validation: every kind of bad row is reported with its file and line, good rows pass."""

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from specbench import schema
from specbench.errors import SpecbenchError


def record(**changes):
    base = {
        "question_id": "q1",
        "category": "chat",
        "source_dataset": "fixture",
        "prompt": "Say hello.",
        "turns": ["Say hello."],
        "system_prompt_id": None,
        "image": None,
        "image_caption": None,
        "reference": None,
    }
    base.update(changes)
    return base


def write_lines(path, lines):
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def test_valid_file_has_no_problems(tmp_path):
    rows = [
        record(),
        record(question_id="q2", category="image-to-image", prompt="make it night", turns=["make it night"],
               image={"source": "local", "name": "street.png"}, image_caption="A street by day."),
        record(question_id="q3", category="math", prompt="1+1?", turns=["1+1?", "and 2+2?"], reference="2"),
    ]
    path = write_lines(tmp_path / "good.jsonl", [json.dumps(row) for row in rows])
    assert schema.validate_file(path) == []


def test_broken_line_duplicate_id_and_empty_prompt_are_all_named(tmp_path):
    path = write_lines(
        tmp_path / "bad.jsonl",
        [
            json.dumps(record()),
            '{"question_id": "q2", "category": ',
            json.dumps(record()),
            json.dumps(record(question_id="q4", prompt="  ", turns=["  "])),
        ],
    )
    problems = schema.validate_file(path)
    assert [problem.split(": ", 1)[0] for problem in problems] == [f"{path}:2", f"{path}:3", f"{path}:4", f"{path}:4"]
    assert "bad JSON" in problems[0]
    assert "duplicate question_id 'q1' (first on line 1)" in problems[1]
    assert problems[2].endswith("empty prompt")
    assert problems[3].endswith("'turns' holds an empty turn")


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"category": "poetry"}, "unknown category 'poetry'"),
        ({"question_id": 7}, "'question_id' must be a string, got int"),
        ({"turns": "Say hello."}, "'turns' must be a list of strings, got str"),
        ({"turns": []}, "'turns' is empty"),
        ({"turns": ["Something else."]}, "turns[0] differs from prompt"),
        ({"reference": 4}, "'reference' must be a string or null, got int"),
        ({"image": "cat.png"}, "'image' must be null or an object"),
        ({"image": {"path": "cat.png"}}, "unknown image key 'path'"),
        ({"image": {"name": 3}}, "image 'name' must be a string or null, got int"),
        ({"image_caption": ""}, "empty image_caption"),
        ({"question_id": " "}, "empty question_id"),
        ({"extra": 1}, "unknown field 'extra'"),
        ({"category": "image-to-image"}, "image row with neither 'image' nor 'image_caption'"),
        ({"origin": "found"}, "unknown origin 'found'"),
        ({"license": 1}, "'license' must be a string or null, got int"),
    ],
)
def test_each_kind_of_bad_row_is_reported(changes, expected):
    problems = schema.row_problems(record(**changes))
    assert len(problems) == 1 and expected in problems[0], problems


def test_missing_fields_are_each_named_and_optional_ones_may_be_absent():
    incomplete = record()
    del incomplete["source_dataset"], incomplete["turns"], incomplete["reference"], incomplete["image"]
    assert schema.row_problems(incomplete) == ["missing field 'source_dataset'", "missing field 'turns'"]


def test_normalise_fills_what_spec_bench_lines_leave_out():
    line = {"question_id": 81, "category": "writing", "turns": ["Write a haiku.", "Now in French."], "reference": ["a", "b"]}
    row = schema.normalise(line, "mt_bench")
    assert row == record(question_id="81", category="writing", source_dataset="mt_bench", prompt="Write a haiku.",
                         turns=["Write a haiku.", "Now in French."], reference="a", license=None, origin=None)
    assert schema.row_problems(row) == []
    assert schema.normalise({"question_id": "q1", "category": "chat", "prompt": "Hi."}, "s")["turns"] == ["Hi."]


def test_normalise_takes_a_pasted_caption_back_out_and_leaves_bad_values_to_validation():
    pasted = schema.paste_caption("make it night", "A street by day.")
    row = schema.normalise(record(category="image-to-image", prompt="make it night", turns=[pasted],
                                  image_caption="A street by day."), "s")
    assert row["turns"] == ["make it night"]
    assert schema.normalise({"question_id": True}, "s")["question_id"] is True
    assert schema.normalise(["q1"], "s") == ["q1"]


def test_a_row_that_is_not_an_object():
    assert schema.row_problems(["q1"]) == ["expected a JSON object, got list"]


def test_caption_pasted_into_first_turn_is_allowed():
    pasted = schema.paste_caption("make it night", "A street by day.")
    assert pasted == "user_prompt: make it night\nimage_caption: A street by day."
    row = record(category="image-to-image", prompt="make it night", turns=[pasted], image_caption="A street by day.")
    assert schema.row_problems(row) == []


def test_categories_known_to_the_schema():
    for category in ("text-to-video", "image-to-video", "text-to-image", "image-to-image", "chat", "code",
                     "stem", "math", "coding-long", "writing", "roleplay", "math_reasoning", "rag"):
        assert category in schema.KNOWN_CATEGORIES
    assert "poetry" not in schema.KNOWN_CATEGORIES


def test_blank_lines_are_skipped_but_lines_keep_their_numbers(tmp_path):
    path = write_lines(tmp_path / "gaps.jsonl", [json.dumps(record()), "", json.dumps(record(question_id="q3", category="nope"))])
    records, problems = schema.read_file(path)
    assert len(records) == 2
    assert len(problems) == 1 and problems[0].startswith(f"{path}:3: unknown category 'nope'")


def test_non_utf8_line_is_a_problem_not_a_crash(tmp_path):
    path = tmp_path / "latin1.jsonl"
    path.write_bytes(json.dumps(record()).encode() + b"\n" + b'{"prompt": "caf\xe9"}\n')
    assert schema.validate_file(path) == [f"{path}:2: not UTF-8 text"]


def test_parquet_rows_are_numbered_like_lines(tmp_path):
    path = tmp_path / "rows.parquet"
    pq.write_table(pa.Table.from_pylist([record(), record(question_id="q2", prompt="")]), path)
    problems = schema.validate_file(path)
    assert problems[0] == f"{path}:2: empty prompt"


def test_unreadable_inputs_raise(tmp_path):
    with pytest.raises(SpecbenchError, match="no such file"):
        schema.validate_file(tmp_path / "missing.jsonl")
    (tmp_path / "rows.csv").write_text("a,b\n")
    with pytest.raises(SpecbenchError, match="expected a .jsonl or .parquet file"):
        schema.validate_file(tmp_path / "rows.csv")
    (tmp_path / "broken.parquet").write_bytes(b"not parquet")
    with pytest.raises(SpecbenchError, match="not a readable Parquet file"):
        schema.validate_file(tmp_path / "broken.parquet")
