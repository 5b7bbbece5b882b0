"""`specbench data ...` through typer's CliRunner: list, show, validate, export, import."""

import json
import os
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from specbench import schema
from specbench.data_cli import app
from specbench.dataset import Row, load_rows
from specbench.errors import SpecbenchError

runner = CliRunner()


def good_record(question_id="q1", prompt="Say hello."):
    return Row(question_id, "chat", "fixture", prompt, (prompt,)).to_dict()


def test_list_json_counts():
    result = runner.invoke(app, ["list", "--json"])
    assert result.exit_code == 0, result.output
    counts = json.loads(result.stdout)
    pe, fw = counts["prompt-enhancement"], counts["fireworks"]
    assert pe["rows"] == 400 and set(pe["categories"].values()) == {100} and len(pe["categories"]) == 4
    assert len(pe["families"]) == 14 and sum(pe["families"].values()) == 400
    assert fw["rows"] == 138
    assert fw["categories"] == {"chat": 30, "code": 30, "coding-long": 18, "math": 30, "stem": 30}


def test_list_tables():
    result = runner.invoke(app, ["list"])
    assert result.exit_code == 0
    assert "prompt-enhancement: 400 rows" in result.stdout and "fireworks: 138 rows" in result.stdout
    assert "i2v-camera-moves" in result.stdout and "coding-long" in result.stdout


def test_show_filters_and_limits():
    result = runner.invoke(app, ["show", "fireworks", "--category", "math", "--limit", "3", "--seed", "1"])
    assert result.exit_code == 0, result.output
    assert "fireworks: 3 rows" in result.stdout
    shown = [row.question_id for row in load_rows("fireworks", categories=["math"], limit=3, seed=1)]
    assert all(question_id in result.stdout for question_id in shown)
    assert "general-chat" not in result.stdout


def test_show_prints_captions_and_refuses_unknown_categories():
    result = runner.invoke(app, ["show", "prompt-enhancement", "-c", "image-to-video", "--limit", "1"])
    assert "image:" in result.stdout
    result = runner.invoke(app, ["show", "fireworks", "--category", "poetry"])
    assert isinstance(result.exception, SpecbenchError)
    assert "valid: chat, code, coding-long, math, stem" in str(result.exception)


def test_validate_ok_is_one_line(tmp_path):
    path = tmp_path / "good.jsonl"
    path.write_text(json.dumps(good_record()) + "\n")
    result = runner.invoke(app, ["validate", str(path)])
    assert result.exit_code == 0
    assert result.stdout == f"OK {path}: 1 rows\n"


def test_validate_names_broken_line_duplicate_id_and_empty_prompt(tmp_path):
    """Acceptance: a file with a broken line, a duplicate id and an empty prompt -> all three lines, exit 2."""
    path = tmp_path / "bad.jsonl"
    lines = [
        json.dumps(good_record("q1")),
        '{"question_id": "q2", "category": "chat", "prompt": "unterminated',
        json.dumps(good_record("q1")),
        json.dumps(good_record("q4", prompt="")),
    ]
    path.write_text("\n".join(lines) + "\n")
    result = runner.invoke(app, ["validate", str(path)])
    assert result.exit_code == 2
    printed = result.stdout.splitlines()
    assert printed[0].startswith(f"{path}:2: bad JSON")
    assert printed[1] == f"{path}:3: duplicate question_id 'q1' (first on line 1)"
    assert f"{path}:4: empty prompt" in printed
    assert all(line.startswith(f"{path}:4:") for line in printed[2:])
    assert "problem(s) in 3 row(s)" in result.stderr


def test_export_spec_bench_and_hub(tmp_path, monkeypatch):
    import datasets

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf-cache")
    result = runner.invoke(app, ["export", "fireworks", "--format", "spec-bench", "--out", str(tmp_path / "sb")])
    assert result.exit_code == 0, result.output
    lines = (tmp_path / "sb" / "question.jsonl").read_text().splitlines()
    assert len(lines) == 138 and set(json.loads(lines[0])) >= {"question_id", "category", "turns"}

    result = runner.invoke(app, ["export", "fireworks", "-f", "hub", "-o", str(tmp_path / "hub")])
    assert result.exit_code == 0, result.output
    assert "- cc-by-4.0\n- apache-2.0\n- mit" in (tmp_path / "hub" / "README.md").read_text()
    assert load_rows(f"hf:{tmp_path / 'hub'}:test") == load_rows("fireworks")


def test_export_rejects_unknown_format(tmp_path):
    result = runner.invoke(app, ["export", "fireworks", "--format", "csv", "--out", str(tmp_path)])
    assert result.exit_code == 2 and "csv" in result.output


@pytest.mark.parametrize(
    ("kind", "file_name", "content", "source_dataset"),
    [
        ("spec-bench", "question.jsonl", '{"question_id": 81, "category": "writing", "turns": ["Write a limerick."]}\n', "mt-bench"),
        ("vbench", "VBench_full_info.json", '[{"prompt_en": "a paper boat drifting", "dimension": ["scene"]}]', "mt-bench/scene"),
        ("partiprompts", "PartiPrompts.tsv", "Prompt\tCategory\tChallenge\tNote\na tin robot\tArts\tBasic\t\n", "mt-bench/Arts"),
        ("geneval", "evaluation_metadata.jsonl", '{"tag": "colors", "prompt": "a photo of a green cup"}\n', "mt-bench/colors"),
    ],
)
def test_import_each_kind(tmp_path, kind, file_name, content, source_dataset):
    source = tmp_path / file_name
    source.write_text(content)
    out = tmp_path / "out.jsonl"
    result = runner.invoke(app, ["import", kind, str(source), "--out", str(out), "--source", "mt-bench"])
    assert result.exit_code == 0, result.output
    assert result.stdout == f"wrote 1 rows to {out}\n"
    assert schema.validate_file(out) == []
    assert load_rows(str(out))[0].source_dataset == source_dataset


def test_import_rejects_unknown_kind(tmp_path):
    result = runner.invoke(app, ["import", "sharegpt", str(tmp_path / "x.json"), "--out", str(tmp_path / "o.jsonl")])
    assert result.exit_code == 2 and "sharegpt" in result.output


@pytest.mark.parametrize("command", ["list", "show", "validate", "export", "import"])
def test_every_command_has_help(command):
    callback = next(info.callback for info in app.registered_commands if (info.name or info.callback.__name__) == command)
    result = runner.invoke(app, [command, "--help"])
    assert result.exit_code == 0
    assert callback.__doc__.splitlines()[0] in " ".join(result.stdout.split())


# --- validate: what users have -------------------------------------------------------------------------------


def write_lines(path, items):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(item) + "\n" for item in items), encoding="utf-8")
    return path


def test_validate_takes_a_spec_bench_question_file_as_it_is(tmp_path):
    """Spec-Bench's own lines: integer ids, no prompt, none of our optional fields."""
    path = write_lines(tmp_path / "spec_bench" / "question.jsonl", [
        {"question_id": 1, "category": "writing", "turns": ["Write a short note to a neighbour."]},
        {"question_id": 2, "category": "summarization", "turns": ["Summarize: the river rose overnight."]},
    ])
    result = runner.invoke(app, ["validate", str(path)])
    assert result.exit_code == 0, result.output
    assert result.stdout == f"OK {path}: 2 rows\n"


def test_validate_takes_an_mt_bench_file_with_per_turn_references(tmp_path):
    path = write_lines(tmp_path / "mt_bench" / "question.jsonl", [
        {"question_id": 111, "category": "math", "turns": ["What is 3*4?", "And 3*5?"], "reference": ["12", "15"]},
        {"question_id": 81, "category": "writing", "turns": ["Write a haiku.", "Now in French."]},
    ])
    result = runner.invoke(app, ["validate", str(path)])
    assert result.exit_code == 0, result.output


def test_validate_rejects_an_empty_file(tmp_path):
    path = tmp_path / "empty.jsonl"
    path.write_text("\n")
    result = runner.invoke(app, ["validate", str(path)])
    assert result.exit_code == 2
    assert result.stdout == f"{path}: holds no rows\n"


def test_validate_takes_a_folder_of_shards_as_one_set(tmp_path):
    write_lines(tmp_path / "set" / "data" / "test-00000.jsonl", [good_record("q1"), good_record("q2")])
    write_lines(tmp_path / "set" / "data" / "test-00001.jsonl", [good_record("q3")])
    result = runner.invoke(app, ["validate", str(tmp_path / "set")])
    assert result.exit_code == 0, result.output
    assert result.stdout == f"OK {tmp_path / 'set'}: 3 rows\n"

    write_lines(tmp_path / "set" / "data" / "test-00002.jsonl", [good_record("q2")])
    result = runner.invoke(app, ["validate", str(tmp_path / "set")])
    assert result.exit_code == 2
    assert "test-00002.jsonl: row 1: duplicate question_id 'q2' (also in " in result.stdout


def test_validate_names_an_unknown_system_prompt_id(tmp_path):
    path = write_lines(tmp_path / "rows.jsonl", [good_record("q1"), good_record("q2") | {"system_prompt_id": "poet"}])
    result = runner.invoke(app, ["validate", str(path)])
    assert result.exit_code == 2
    assert result.stdout.startswith(f"{path}:2: unknown system_prompt_id 'poet' (have: general, image-to-image, ")


def test_validate_names_an_image_row_without_image_or_caption(tmp_path):
    row = Row("i1", "image-to-video", "fixture", "orbit around it", ("orbit around it",)).to_dict()
    path = write_lines(tmp_path / "rows.jsonl", [row])
    result = runner.invoke(app, ["validate", str(path)])
    assert result.exit_code == 2
    assert result.stdout == f"{path}:1: image row with neither 'image' nor 'image_caption' (a text-only target would see no input)\n"


def test_validate_a_bundled_set_by_name():
    result = runner.invoke(app, ["validate", "fireworks"])
    assert result.exit_code == 0 and result.stdout == "OK fireworks: 138 rows\n"


def test_validate_an_hf_id_without_the_hub_says_so_in_one_line(tmp_path):
    """A fresh process with HF_HUB_OFFLINE set, as a machine without a network runs it: never 'no such file'."""
    env = os.environ | {"HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf"), "COLUMNS": "400"}
    done = subprocess.run([sys.executable, "-m", "specbench.cli", "data", "validate", "hf:specbench-tests/absent:test"],
                          capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "no such file" not in errors[0]
    assert "cannot load Hugging Face dataset 'specbench-tests/absent' (HF_HUB_OFFLINE is set" in errors[0]


def test_errors_print_as_written(tmp_path, monkeypatch, capsys):
    """rich would turn `:a:` into an emoji and eat `[b]` as markup; the message must reach the user unchanged."""
    from specbench import cli

    spec = "hf:a:b:c:d [b]:smile:"
    monkeypatch.setattr(sys, "argv", ["specbench", "data", "validate", spec])
    with pytest.raises(SystemExit) as stopped:
        cli.main()
    assert stopped.value.code == 2
    assert f"bad Hub spec '{spec}'" in " ".join(capsys.readouterr().err.split())


def test_show_prints_prompts_as_written(tmp_path):
    prompt = "hf:a:b says :smile: and [bold]hi[/bold]"
    path = write_lines(tmp_path / "rows.jsonl", [good_record("q1", prompt=prompt)])
    result = runner.invoke(app, ["show", str(path)], env={"COLUMNS": "300"})
    assert result.exit_code == 0, result.output
    assert prompt in result.stdout


def test_spec_bench_export_warns_that_system_prompts_stay_behind(tmp_path):
    result = runner.invoke(app, ["export", "prompt-enhancement", "-f", "spec-bench", "-o", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert result.stderr.startswith("warning: Spec-Bench's question.jsonl carries no system prompt")
