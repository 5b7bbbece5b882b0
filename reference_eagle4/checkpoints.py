"""Checkpoint folders as they are published: which layout a folder holds, its tensors wherever they are stored, and
one clear line for whatever is missing or is something the engine does not run.

Targets: Hugging Face folders of the Llama family (model_type llama) and Qwen3 (qwen3: per-head q/k RMSNorm), with
weights in model.safetensors or in shards that model.safetensors.index.json lists, and the tokenizer with its chat
template beside them. Drafters (`drafter_layout`): our EAGLE-4 and DFlash/DSpark folders, EAGLE-3 checkpoints in the
SafeAILab / SpecForge layout that vLLM 0.33.0 loads (model_executor/models/llama_eagle3.py, qwen3_eagle3.py), and
DFlash checkpoints in the DFlash authors' layout (qwen3_dflash.py; the one export_dflash.py writes).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

import torch
from torch import Tensor

INDEX = "model.safetensors.index.json"
TARGET_TYPES = ("llama", "qwen3")                # model_type of the targets the engine runs
# vLLM 0.33.0 registry.py: the EAGLE-3 architectures whose draft layer is a Llama layer (llama_eagle3.py) or a
# Qwen3 layer with per-head q/k norms (qwen3_eagle3.py)
EAGLE3_LLAMA = ("LlamaForCausalLMEagle3", "Eagle3LlamaForCausalLM")
EAGLE3_QWEN3 = ("Eagle3Qwen3ForCausalLM",)
DFLASH_AUTHORS = ("DFlashDraftModel",)          # registry.py: DFlashQwen3ForCausalLM (qwen3_dflash.py)
LAYOUTS = {      # layout: (what it is, the methods that load it)
    "eagle4": ("an EAGLE-4 drafter", "eagle4-chain, eagle4-tree or eagle4-harness"),
    "eagle3": ("an EAGLE-3 checkpoint", "eagle4-chain, eagle4-tree or eagle4-harness"),
    "dflash": ("a DFlash/DSpark drafter", "dflash or dspark"),
    "dflash-authors": ("a DFlash checkpoint (the DFlash authors' layout)", "dflash"),
}
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json")


class CheckpointError(ValueError):
    """A checkpoint folder lacks a file or tensor, or holds a layout or feature the engine does not run."""


def read_json(path: Path) -> dict[str, Any]:
    """A config file as a dict; missing or unreadable is one line naming it."""
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise CheckpointError(f"{path}: missing") from None
    except (OSError, ValueError) as err:
        raise CheckpointError(f"{path}: cannot read it ({err})") from None
    if not isinstance(data, dict):
        raise CheckpointError(f"{path}: not a JSON object")
    return data


class Tensors:
    """The tensors of a checkpoint folder, read one at a time: the shards model.safetensors.index.json lists, else
    every *.safetensors, else (`bins`, as EAGLE-3 drafters ship) pytorch_model*.bin."""

    def __init__(self, folder: Path, bins: bool = False):
        from safetensors import safe_open

        self.folder = folder
        self._where: dict[str, Path] = {}
        self._loaded: dict[str, Tensor] = {}
        self._open: dict[Path, Any] = {}
        index = folder / INDEX
        if index.is_file():
            weight_map = read_json(index).get("weight_map")
            if not isinstance(weight_map, dict) or not weight_map:
                raise CheckpointError(f"{index}: no weight_map")
            missing = sorted({f for f in weight_map.values() if not (folder / f).is_file()})
            if missing:
                more = f" and {len(missing) - 1} more" if len(missing) > 1 else ""
                raise CheckpointError(f"{folder / missing[0]}: missing{more} ({INDEX} lists it)")
            self._where = {k: folder / f for k, f in weight_map.items()}
            return
        files = sorted(folder.glob("*.safetensors"))
        for f in files:
            try:
                with safe_open(str(f), framework="pt") as fh:
                    for key in fh.keys():
                        self._where.setdefault(key, f)
            except Exception as err:      # safetensors raises its own SafetensorsError for a bad header
                raise CheckpointError(f"{f}: cannot read it ({err})") from None
        if files:
            return
        pts = sorted(folder.glob("pytorch_model*.bin")) if bins else []
        for f in pts:
            try:
                self._loaded.update(torch.load(f, map_location="cpu", weights_only=True))
            except Exception as err:      # a pickle that torch refuses, a truncated file
                raise CheckpointError(f"{f}: cannot read it ({type(err).__name__}: {err})") from None
        if not pts:
            also = " or pytorch_model*.bin" if bins else ""
            raise CheckpointError(f"{folder}: no model.safetensors, {INDEX}{also} (the weights are missing)")

    def names(self) -> set[str]:
        return set(self._where) | set(self._loaded)

    def __contains__(self, name: str) -> bool:
        return name in self._where or name in self._loaded

    def get(self, name: str) -> Tensor:
        """One tensor; a missing one is a CheckpointError naming it and the folder."""
        if name in self._loaded:
            return self._loaded[name]
        path = self._where.get(name)
        if path is None:
            raise CheckpointError(f"{self.folder}: no tensor {name!r} in its weights")
        if path not in self._open:
            from safetensors import safe_open

            try:
                self._open[path] = safe_open(str(path), framework="pt")
            except Exception as err:
                raise CheckpointError(f"{path}: cannot read it ({err})") from None
        try:
            return self._open[path].get_tensor(name)
        except Exception as err:          # the index places a tensor in a shard that lacks it, a cut file
            raise CheckpointError(f"{self.folder}: no tensor {name!r} in {path.name}, where {INDEX} places it "
                                  f"({err})") from None


class Named(dict):
    """Checkpoint tensors by name; a missing one is a CheckpointError naming the folder and the tensor."""

    def __init__(self, tensors: dict[str, Tensor], folder: Path):
        super().__init__(tensors)
        self.folder = folder

    def __missing__(self, key: str) -> Tensor:
        raise CheckpointError(f"{self.folder}: no tensor {key!r} in its weights")


def read_tensors(folder: Path, bins: bool = False, rename: Callable[[str], str] = str) -> Named:
    """Every tensor of a (drafter-sized) checkpoint, under `rename`d names."""
    tensors = Tensors(folder, bins)
    return Named({rename(k): tensors.get(k) for k in sorted(tensors.names())}, folder)


def check_target_config(cfg: dict[str, Any], path: Path) -> None:
    """Refuse, in one line naming config.json, a target the engine would run wrongly: another architecture,
    biases, an activation other than SiLU, sliding-window layers, a RoPE it cannot compute."""
    from reference_eagle4.model import rope_parameters

    kind = cfg.get("model_type")
    if kind not in TARGET_TYPES:
        raise CheckpointError(f"{path}: model_type {kind!r} is not a target the reference engine runs "
                              f"({', '.join(TARGET_TYPES)}: the Llama family and Qwen3)")
    missing = [k for k in ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
                           "vocab_size") if k not in cfg]
    if missing:
        raise CheckpointError(f"{path}: no {', '.join(missing)}")
    unsupported = [name for name, on in (
        ("attention_bias", cfg.get("attention_bias")), ("mlp_bias", cfg.get("mlp_bias")),
        (f"hidden_act {cfg.get('hidden_act')!r}", cfg.get("hidden_act", "silu") != "silu"),
        ("use_sliding_window", cfg.get("use_sliding_window")),
        ("sliding_attention layers", "sliding_attention" in (cfg.get("layer_types") or ()))) if on]
    if unsupported:
        raise CheckpointError(f"{path}: {unsupported[0]} is not supported by the reference engine")
    try:
        rope_parameters(cfg)
    except ValueError as err:
        raise CheckpointError(f"{path}: {err}") from None


def target_problem(folder: Path) -> str | None:
    """What a target folder lacks (config, weights, tokenizer, chat template), or None."""
    if not (folder / "config.json").is_file():
        return "config.json is missing"
    try:
        Tensors(folder)
    except CheckpointError as err:
        return str(err).removeprefix(f"{folder}: ").removeprefix(f"{folder}/")
    if not any((folder / f).is_file() for f in TOKENIZER_FILES):
        return f"the tokenizer is missing (none of {', '.join(TOKENIZER_FILES)})"
    if (folder / "chat_template.jinja").is_file() or (folder / "chat_template.json").is_file():
        return None
    tcfg = folder / "tokenizer_config.json"
    if not tcfg.is_file() or not read_json(tcfg).get("chat_template"):
        return "the chat template is missing (no chat_template in tokenizer_config.json, no chat_template.jinja)"
    return None


def drafter_layout(folder: Path) -> str:
    """Which drafter layout a folder holds: "eagle4", "dflash" (ours, DFlash or DSpark), "eagle3" or
    "dflash-authors"; anything else is one line naming config.json."""
    path = folder / "config.json"
    cfg = read_json(path)
    kind, archs = cfg.get("model_type"), list(cfg.get("architectures") or [])
    if kind == "eagle4":
        return "eagle4"
    if kind in ("dflash", "dspark"):
        return "dflash"
    if any(a in EAGLE3_LLAMA + EAGLE3_QWEN3 for a in archs):
        return "eagle3"
    if any(a in DFLASH_AUTHORS for a in archs):
        return "dflash-authors"
    raise CheckpointError(
        f"{path}: architectures {archs} is no drafter layout the reference engine loads (EAGLE-4 and DFlash "
        f"folders of specbench; EAGLE-3: {', '.join(EAGLE3_LLAMA + EAGLE3_QWEN3)}; DFlash: "
        f"{', '.join(DFLASH_AUTHORS)})")


def expect_layout(folder: Path, wanted: tuple[str, ...], method: str) -> str:
    """The folder's layout when it is one of `wanted`; otherwise one line saying which methods load it."""
    layout = drafter_layout(folder)
    if layout not in wanted:
        what, methods = LAYOUTS[layout]
        raise CheckpointError(f"{folder} holds {what}, which {methods} loads, not {method}")
    return layout


def check_eagle3_config(cfg: dict[str, Any], path: Path) -> None:
    """Refuse the EAGLE-3 variants vLLM's llama_eagle3.py / qwen3_eagle3.py know and our drafter does not run:
    several draft layers, norms before or inside fc, the post-norm output fed back, biases, sliding windows."""
    eagle = cfg.get("eagle_config") or {}
    unsupported = [name for name, on in (
        (f"num_hidden_layers {cfg.get('num_hidden_layers')}", cfg.get("num_hidden_layers", 1) != 1),
        ("norm_before_fc", eagle.get("norm_before_fc", cfg.get("norm_before_fc"))),
        ("fc_norm", cfg.get("fc_norm")), ("norm_output", cfg.get("norm_output")),
        ("use_aux_hidden_state false", eagle.get("use_aux_hidden_state", True) is False),
        ("attention_bias", cfg.get("attention_bias")),
        ("sliding_attention layers", "sliding_attention" in (cfg.get("layer_types") or ()))) if on]
    if unsupported:
        raise CheckpointError(f"{path}: EAGLE-3 with {unsupported[0]} is not supported by the reference engine")


def check_dflash_config(cfg: dict[str, Any], path: Path) -> None:
    """Refuse the DFlash variants vLLM's qwen3_dflash.py knows and our drafter does not run (its block is one
    non-causal full-attention pass over the context and the block)."""
    dcfg = cfg.get("dflash_config") or {}
    unsupported = [name for name, on in (
        ("causal attention", dcfg.get("causal", cfg.get("is_causal"))),
        ("sliding-window layers", dcfg.get("use_swa") or "sliding_attention" in (cfg.get("layer_types") or ())),
        ("attention_bias", cfg.get("attention_bias")), ("an attention sink", dcfg.get("attention_sink_bias")),
        ("attention_value_scale", dcfg.get("attention_value_scale") is not None),
        ("interleaved RoPE", cfg.get("is_neox_style", True) is False),
        ("use_aux_hidden_state false", dcfg.get("use_aux_hidden_state", True) is False)) if on]
    if unsupported:
        raise CheckpointError(f"{path}: DFlash with {unsupported[0]} is not supported by the reference engine")
    for key in ("mask_token_id", "target_layer_ids"):
        if dcfg.get(key, cfg.get(key)) is None:             # qwen3_dflash.py reads dflash_config, then the top level
            raise CheckpointError(f"{path}: no dflash_config.{key}")
