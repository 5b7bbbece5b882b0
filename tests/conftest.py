"""Shared test helpers: synthetic records and run directories, so analysis and reports are tested without a model."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest


def step(accepted: int, depth: int, *, emitted: int | None = None, drafted: int | None = None,
         budget: int | None = None) -> dict[str, int]:
    """One verification step; by default a chain of `depth` drafts whose accepted drafts + bonus are all emitted."""
    drafted = depth if drafted is None else drafted
    return {
        "emitted": accepted + 1 if emitted is None else emitted,
        "accepted": accepted,
        "drafted": drafted,
        "budget": drafted + 1 if budget is None else budget,
        "depth": depth,
    }


def record(qid: str, steps: list[dict[str, int]], *, category: str = "chat", method: str = "ngram",
           status: str = "ok", entropy: float | None = 1.0, t_start: float = 0.0, latency: float = 1.0,
           ttft: float = 0.1, n_out: int | None = None) -> dict[str, Any]:
    """A record whose output is the prefill token plus every emitted token, unless `n_out` says otherwise."""
    n_out = 1 + sum(s["emitted"] for s in steps) if n_out is None else n_out
    return {
        "question_id": qid, "category": category, "method": method, "concurrency": 1,
        "status": status, "error": "" if status == "ok" else "boom",
        "prompt_token_ids": [1, 2, 3], "output_token_ids": list(range(n_out)), "output_text": "x" * n_out,
        "steps": steps, "mean_entropy": entropy,
        "t_start": t_start, "t_end": t_start + latency, "ttft_s": ttft, "latency_s": latency,
    }


def write_run(root: Path, run_id: str, records: list[dict[str, Any]], **manifest: Any) -> Path:
    """A run directory with a manifest (defaults overridable by keyword) and records.jsonl."""
    run_dir = root / run_id
    run_dir.mkdir(parents=True)
    full = {
        "run_id": run_id, "method": "vanilla", "engine": "reference", "dataset": "prompt-enhancement",
        "budget": 1, "concurrency": 1, "target": "smollm2-135m", "dtype": "float32", "device": "cpu",
        "compare_id": None, "command": f"specbench run --out runs/{run_id}",
        "created": "2026-11-29T10:00:00+00:00", "seed": 0, "method_config": {},
        **manifest,
    }
    (run_dir / "manifest.json").write_text(json.dumps(full))
    (run_dir / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return run_dir


@pytest.fixture
def env_without(tmp_path: Path):
    """env_without("torch", ...) -> environment variables for a subprocess in which importing each named
    package fails, as on a machine that lacks it."""
    import os

    def env(*names: str) -> dict[str, str]:
        folder = tmp_path / "blocked-packages"
        for name in names:
            (folder / name).mkdir(parents=True, exist_ok=True)
            (folder / name / "__init__.py").write_text(f"raise ImportError('{name} is blocked here')\n")
        return {**os.environ, "PYTHONPATH": os.pathsep.join([str(folder), os.environ.get("PYTHONPATH", "")])}

    return env


@pytest.fixture
def synth(tmp_path: Path) -> SimpleNamespace:
    """`synth.step`, `synth.record` and `synth.run(run_id, records, **manifest)` writing under tmp_path/runs."""
    return SimpleNamespace(
        step=step, record=record,
        run=lambda run_id, records, **manifest: write_run(tmp_path / "runs", run_id, records, **manifest),
    )


# -- a tiny random-weight Llama target with a real tokenizer, in the HF folder layout -------------------

TINY_CONFIG = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=4, num_attention_heads=4,
                   num_key_value_heads=2, head_dim=16, max_position_embeddings=1024, rms_norm_eps=1e-5,
                   tie_word_embeddings=True)

CHAT_TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
                 "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def build_tiny_target(folder: Path, seed: int = 0, tied: bool = True) -> Path:
    """Byte-level BPE tokenizer trained on a few sentences + a random Llama, saved as a HF folder.

    Random weights make greedy decoding loop, which gives prompt lookup something to accept, and the
    folder exercises the same loading path (config.json + safetensors + tokenizer) as a real target.
    """
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers, decoders, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    trainer = trainers.BpeTrainer(vocab_size=320, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    corpus = ["a red fox jumps over the lazy dog at golden hour, cinematic, slow pan",
              "write a python function that reverses a list", "user_prompt: image_caption: system assistant"]
    tok.train_from_iterator(corpus * 20, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|im_start|>", eos_token="<|im_end|>",
                                   unk_token="<|endoftext|>", pad_token="<|im_end|>")
    fast.chat_template = CHAT_TEMPLATE
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=len(fast), bos_token_id=fast.bos_token_id, eos_token_id=fast.eos_token_id,
                         **{**TINY_CONFIG, "tie_word_embeddings": tied})
    model = LlamaForCausalLM(config)
    with torch.no_grad():   # larger weights than the default init: sharper, more repetitive predictions
        for p in model.parameters():
            if p.dim() == 2:
                p.mul_(2.0)
    model.save_pretrained(folder)
    fast.save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def tiny_target(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_target(tmp_path_factory.mktemp("tiny-target"))


@pytest.fixture(scope="session")
def untied_tiny_target(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny target with a separate LM head, as most Llama checkpoints have."""
    return build_tiny_target(tmp_path_factory.mktemp("untied-tiny-target"), tied=False)
