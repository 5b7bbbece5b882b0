"""`specbench engines preset`: the exact server launch commands and run commands of the seed's setup."""

from __future__ import annotations

import json
import shlex
import subprocess

import pytest
from typer.testing import CliRunner

from specbench.cli import app
from specbench.runners.presets import preset_commands
from specbench.errors import SpecbenchError

cli = CliRunner()
VLLM = "env VLLM_SERVER_DEV_MODE=1 python -m vllm.entrypoints.openai.api_server --model \"$TARGET\" --host 0.0.0.0 --port 8000 " \
       "--tensor-parallel-size 4 --dtype bfloat16"
SGLANG = "python -m sglang.launch_server --model-path \"$TARGET\" --host 0.0.0.0 --port 30000 " \
         "--tensor-parallel-size 4 --dtype bfloat16"


@pytest.mark.parametrize("engine,method,drafter,expected", [
    ("vllm", "vanilla", None, VLLM),
    ("vllm", "ngram", None, VLLM + " --speculative-config '{\"method\": \"ngram\", \"num_speculative_tokens\": 7, "
     "\"prompt_lookup_max\": 3, \"prompt_lookup_min\": 1}' --per-request-spec-decode-metrics detailed"),
    ("vllm", "eagle3", "/ckpt/eagle3", VLLM + " --speculative-config '{\"method\": \"eagle3\", \"model\": "
     "\"/ckpt/eagle3\", \"num_speculative_tokens\": 7}' --per-request-spec-decode-metrics detailed"),
    ("vllm", "eagle4-chain", None, VLLM + " --speculative-config \"{\\\"method\\\": \\\"eagle3\\\", \\\"model\\\": "
     "\\\"$DRAFTER\\\", \\\"num_speculative_tokens\\\": 7}\" --per-request-spec-decode-metrics detailed"),
    ("vllm", "dflash", "/ckpt/dflash", VLLM + " --speculative-config '{\"method\": \"dflash\", \"model\": "
     "\"/ckpt/dflash\", \"num_speculative_tokens\": 7, \"attention_backend\": \"flash_attn\"}' "
     "--per-request-spec-decode-metrics detailed --max-num-batched-tokens 32768"),
    ("vllm", "dspark", "/ckpt/dspark", VLLM + " --speculative-config '{\"method\": \"dspark\", \"model\": "
     "\"/ckpt/dspark\", \"num_speculative_tokens\": 7, \"enable_adaptive_verification\": true}' "
     "--per-request-spec-decode-metrics detailed --max-num-batched-tokens 32768"),
    ("vllm", "draft_model", "/ckpt/small", VLLM + " --speculative-config '{\"method\": \"draft_model\", \"model\": "
     "\"/ckpt/small\", \"num_speculative_tokens\": 7}' --per-request-spec-decode-metrics detailed"),
    ("sglang", "vanilla", None, SGLANG),
    ("sglang", "sglang-ngram", None, SGLANG + " --speculative-algorithm NGRAM --speculative-num-draft-tokens 8"),
    ("sglang", "eagle3", "/ckpt/eagle3", SGLANG + " --speculative-algorithm EAGLE3 --speculative-draft-model-path "
     "/ckpt/eagle3 --speculative-num-steps 7 --speculative-eagle-topk 1 --speculative-num-draft-tokens 8"),
    ("sglang", "eagle4-tree", "/ckpt/eagle3", SGLANG + " --speculative-algorithm EAGLE3 --speculative-draft-model-path "
     "/ckpt/eagle3 --speculative-num-steps 7 --speculative-eagle-topk 7 --speculative-num-draft-tokens 8"),
    ("sglang", "dflash", "/ckpt/dflash", SGLANG + " --speculative-algorithm DFLASH --speculative-draft-model-path "
     "/ckpt/dflash --speculative-dflash-block-size 8 --speculative-num-draft-tokens 8"),
    ("sglang", "dflash2", "/ckpt/dflash2", SGLANG + " --speculative-algorithm DFLASH --speculative-draft-model-path "
     "/ckpt/dflash2 --speculative-dflash-block-size 8 --speculative-num-draft-tokens 8"),
])
def test_b300_tp4_launch_commands(engine, method, drafter, expected):
    server, runs = preset_commands("b300-tp4", engine, method, 8, drafter=drafter)
    assert server == expected
    port = 8000 if engine == "vllm" else 30000
    needs = method not in ("vanilla", "ngram", "sglang-ngram")
    option = (f" --option drafter={drafter}" if drafter else ' --option "drafter=$DRAFTER"') if needs else ""
    assert runs == [
        f"specbench run --engine {engine} --endpoint http://127.0.0.1:{port} --target \"$TARGET\" --method {method} "
        f"--budget 8 --concurrency {c} --dataset prompt-enhancement --dtype bfloat16 --option tp=4{option} "
        f"--out runs/b300-tp4-{engine}-{method}-L8-C{c}" for c in (1, 8)]


def test_the_printed_commands_are_valid_shell_with_the_placeholders_set():
    server, runs = preset_commands("b300-tp4", "vllm", "eagle4-chain", 8)
    argv = shlex.split(server.replace('"$TARGET"', "/m/target").replace("$DRAFTER", "/m/draft"))
    spec = json.loads(argv[argv.index("--speculative-config") + 1])
    assert spec == {"method": "eagle3", "model": "/m/draft", "num_speculative_tokens": 7}


def test_preset_cli_prints_both(tmp_path):
    res = cli.invoke(app, ["engines", "preset", "b300-tp4", "--engine", "sglang", "--method", "eagle3", "--drafter",
                           "/ckpt/e3", "--budget", "4", "--target", "Qwen/Qwen3-8B"])
    assert res.exit_code == 0, res.output
    lines = res.output.strip().splitlines()
    assert lines[2] == ("python -m sglang.launch_server --model-path Qwen/Qwen3-8B --host 0.0.0.0 --port 30000 "
                        "--tensor-parallel-size 4 --dtype bfloat16 --speculative-algorithm EAGLE3 "
                        "--speculative-draft-model-path /ckpt/e3 --speculative-num-steps 3 --speculative-eagle-topk 1 "
                        "--speculative-num-draft-tokens 4")
    assert lines[4].startswith("specbench run --engine sglang --endpoint http://127.0.0.1:30000 --target Qwen/Qwen3-8B")
    assert len(lines) == 6


def test_refusals():
    with pytest.raises(SpecbenchError, match="runs on --engine sglang"):
        preset_commands("b300-tp4", "vllm", "eagle4-tree", 8)
    with pytest.raises(SpecbenchError, match="unknown preset"):
        preset_commands("h100-tp8", "vllm", "ngram", 8)
    with pytest.raises(SpecbenchError, match="budget >= 2"):
        preset_commands("b300-tp4", "sglang", "sglang-ngram", 1)
    with pytest.raises(SpecbenchError, match="runs as --method sglang-ngram"):
        preset_commands("b300-tp4", "sglang", "ngram", 8)
    # SGLang's DSpark needs a cost table profiled on the server's hardware, which a preset cannot name
    with pytest.raises(SpecbenchError, match="--option sps_table=PATH"):
        preset_commands("b300-tp4", "sglang", "dspark", 8, drafter="/ckpt/dspark")



# The eagle4-harness script a B300 TP=4 user runs: what it calibrates, serves, runs and compares is pinned here.
HARNESS_SCRIPT = [
    '#!/usr/bin/env bash',
    '# eagle4-harness on vllm, 4x NVIDIA B300, tensor parallel 4: calibrate, serve, run, then the seed comparison.',
    'set -euo pipefail',
    ': "${TARGET:?the target model (Hub id or folder)}" "${DRAFTER:?its EAGLE-3 drafter}"',
    ': "${DSPARK:?a DSpark checkpoint}" "${DFLASH2:?a DFlash2 checkpoint}"',
    "# 1. the server's cost table: one launch per K (1, 3, 7, 15), minutes each; kept once it exists",
    'specbench calibrate --engine vllm --target "$TARGET" --dtype bfloat16 --drafter "$DRAFTER" --tp 4 --if-missing',
    '# 2. the vllm serve command with the K per batch size compiled from that table, for serving with `bash serve-b300-tp4-vllm-eagle4-harness.sh` (the runs below launch their own)',
    'specbench engines preset b300-tp4 --engine vllm --method eagle4-harness --serve --budget 16 --target "$TARGET" --drafter "$DRAFTER" > serve-b300-tp4-vllm-eagle4-harness.sh',
    '# 3. one harness run, L=16, C=8',
    'specbench run --engine vllm --target "$TARGET" --dtype bfloat16 --method eagle4-harness --budget 16 --concurrency 8 --option tp=4 --option "drafter=$DRAFTER" --out runs/b300-tp4-vllm-eagle4-harness-L16-C8',
    '# 4. the seed comparison on each prompt set: vanilla is added; every variant repeated, interleaved',
    'specbench compare --engine vllm --target "$TARGET" --dtype bfloat16 --methods "eagle4-harness:drafter=$DRAFTER,dspark:drafter=$DSPARK,dflash2:drafter=$DFLASH2,eagle4-chain:drafter=$DRAFTER" --budget 8,16 --concurrency 1,8 --dataset prompt-enhancement --repeats 3 --option tp=4 --out runs/b300-tp4-vllm-seed-prompt-enhancement',
    'specbench compare --engine vllm --target "$TARGET" --dtype bfloat16 --methods "eagle4-harness:drafter=$DRAFTER,dspark:drafter=$DSPARK,dflash2:drafter=$DFLASH2,eagle4-chain:drafter=$DRAFTER" --budget 8,16 --concurrency 1,8 --dataset fireworks --repeats 3 --option tp=4 --out runs/b300-tp4-vllm-seed-fireworks',
]


def test_the_harness_preset_prints_one_script_to_calibrate_serve_run_and_compare(tmp_path):
    res = cli.invoke(app, ["engines", "preset", "b300-tp4", "--engine", "vllm", "--method", "eagle4-harness"])
    assert res.exit_code == 0, res.output
    assert res.output.splitlines() == HARNESS_SCRIPT
    script = tmp_path / "seed.sh"
    script.write_text(res.output)
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    compares = [shlex.split(line) for line in HARNESS_SCRIPT if line.startswith("specbench compare")]
    assert [c[c.index("--dataset") + 1] for c in compares] == ["prompt-enhancement", "fireworks"]
    for argv in compares:
        methods = [m.split(":")[0] for m in argv[argv.index("--methods") + 1].split(",")]
        assert methods == ["eagle4-harness", "dspark", "dflash2", "eagle4-chain"]      # vanilla is always added
        assert argv[argv.index("--budget") + 1] == "8,16" and argv[argv.index("--concurrency") + 1] == "1,8"
        assert "tp=4" in argv


def test_the_sglang_harness_preset_calibrates_and_serves_one_shape_per_concurrency_at_tp4(tmp_path):
    res = cli.invoke(app, ["engines", "preset", "b300-tp4", "--engine", "sglang", "--method", "eagle4-harness"])
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    script = tmp_path / "seed.sh"
    script.write_text(res.output)
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    commands = [shlex.split(line.split(" > ")[0]) for line in lines if line.startswith("specbench")]
    calibrate, *serves = [c for c in commands if c[1] in ("calibrate", "engines")]
    assert calibrate[:4] == ["specbench", "calibrate", "--engine", "sglang"] and "--if-missing" in calibrate
    assert calibrate[calibrate.index("--tp") + 1] == "4"
    # the tree shape depends on the expected concurrency: one serve command (and file) per concurrency
    assert [s[s.index("--concurrency") + 1] for s in serves] == ["1", "8"]
    assert all("--serve" in s and s[s.index("--engine") + 1] == "sglang" for s in serves)
    run = next(c for c in commands if c[1] == "run")
    assert run[run.index("--method") + 1] == "eagle4-harness" and "tp=4" in run
    # SGLang's DSpark needs its profiled SPS table, which the script asks for
    compare = next(c for c in commands if c[1] == "compare")
    assert "dspark:drafter=$DSPARK:sps_table=$SPS_TABLE" in compare[compare.index("--methods") + 1]
    assert "SPS_TABLE:?" in res.output and "tp=4" in compare


def test_the_harness_preset_refuses_what_it_cannot_print():
    from specbench.runners.presets import harness_script

    with pytest.raises(SpecbenchError, match="--engine must be vllm or sglang"):
        harness_script("b300-tp4", "tgi")
    with pytest.raises(SpecbenchError, match="--concurrency is for --engine sglang"):
        cli.invoke(app, ["engines", "preset", "b300-tp4", "--engine", "vllm", "--method", "eagle4-harness", "--serve",
                         "--concurrency", "8"], catch_exceptions=False)
    with pytest.raises(SpecbenchError, match="--serve is for --method eagle4-harness"):
        cli.invoke(app, ["engines", "preset", "b300-tp4", "--engine", "vllm", "--method", "eagle3", "--serve"],
                   catch_exceptions=False)


def calibrate_node(tmp_path, monkeypatch, engine: str, version: str) -> None:
    """A node whose server Python says `version`: its serve command is refused naming the calibrate command until
    the synthetic server table (K = 9 alone, K = 1 at batch 8) is saved under its key (TP 4, bfloat16)."""
    from specbench.runners import server_calibrate
    from specbench.runners.hardware import server_hardware
    from specbench.runners.presets import harness_serve_command
    from specbench.runners.server_calibrate import table_key, table_path
    from test_harness_policy import server_table

    monkeypatch.setenv("SPECBENCH_CACHE", str(tmp_path))
    monkeypatch.setattr(server_calibrate, "engine_version", lambda python, engine="vllm": version)
    with pytest.raises(SpecbenchError, match=f"no cost table .*specbench calibrate --engine {engine}"):
        harness_serve_command("b300-tp4", engine, 16, "org/target", "/ckpt/e3")
    key = table_key(engine, version, server_hardware(None)["device"], 4, "org/target", "/ckpt/e3", "bfloat16")
    server_table().save(table_path(key))


def test_the_harness_serve_command_is_compiled_from_the_nodes_table(tmp_path, monkeypatch):
    from specbench.runners.presets import harness_serve_command

    calibrate_node(tmp_path, monkeypatch, "vllm", "0.33.0")
    argv = shlex.split(harness_serve_command("b300-tp4", "vllm", 16, "org/target", "/ckpt/e3"))
    spec = json.loads(argv[argv.index("--speculative-config") + 1])
    assert spec["num_speculative_tokens_per_batch_size"][0] == [1, 1, 9] and spec["num_speculative_tokens"] == 9
    assert argv[argv.index("--tensor-parallel-size") + 1] == "4" and argv[argv.index("--port") + 1] == "8000"


def test_the_sglang_harness_serve_command_is_the_shape_for_its_concurrency(tmp_path, monkeypatch):
    from specbench.runners.presets import harness_serve_command

    calibrate_node(tmp_path, monkeypatch, "sglang", "0.5.23")
    flags = ("--speculative-num-steps", "--speculative-eagle-topk", "--speculative-num-draft-tokens")
    for c, shape in ((1, ["9", "1", "10"]), (8, ["1", "1", "2"])):
        argv = shlex.split(harness_serve_command("b300-tp4", "sglang", 16, "org/target", "/ckpt/e3", c))
        assert [argv[argv.index(f) + 1] for f in flags] == shape
        assert argv[argv.index("--tensor-parallel-size") + 1] == "4" and argv[argv.index("--port") + 1] == "30000"
