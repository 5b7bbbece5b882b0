"""`specbench engines preset`: the exact server launch commands and run commands of the seed's setup."""

from __future__ import annotations

import json
import shlex

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
