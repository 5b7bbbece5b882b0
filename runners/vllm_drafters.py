"""A draft checkpoint as vLLM 0.33.0 reads its config.json, checked against the method and budget a run asks for.

vLLM picks the drafter that runs from the checkpoint, not only from `--speculative-config`'s `method`: under
`method="dflash"` a DFlash2 checkpoint runs DFlash2 (v1/worker/gpu/spec_decode/__init__.py, init_speculator); under
`method="dspark"` an architecture vLLM does not know is loaded as DeepSeek-V4's DSpark, and a checkpoint without a
confidence head gates verification with vLLM's acceptance estimator instead (config/speculative.py, __post_init__;
v1/worker/gpu/spec_decode/dspark/speculator.py). Each such case, and a budget wider than the block the drafter was
trained on, is refused here in one line before a server starts. A drafter that is not a local folder with a
config.json (a Hub id) is passed through unchecked: the server resolves it.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

from specbench.errors import SpecbenchError

# v1/worker/gpu/spec_decode/__init__.py: the speculator `method="dflash"` runs, by the draft's architecture
DFLASH2_ARCHITECTURES = frozenset({"DFlash2DraftModel", "DFlash2BeamDraftModel"})
OTHER_DFLASH_FAMILIES = {"LiLiCorrDraftModel": "LiLiCorr", "Qwen3XPressModel": "XPress",
                         "DFlashQwen3XPressModel": "XPress"}
# config/speculative.py, __post_init__: the DSpark architectures vLLM loads as themselves (DSparkDraftModel only with
# model_type qwen3, which vLLM renames Qwen3DSparkModel); any other is rewritten to DeepSeek-V4's DSparkDraftModel
DSPARK_ARCHITECTURES = frozenset({"Qwen3DSparkModel", "Qwen3OmniDSparkModel", "MuseSparkDSparkModel",
                                  "Gemma4DSparkModel", "K3DSparkModel"})
DEEPSEEK_V4_TYPES = ("deepseek_v4", "deepseek_v41")
QWEN3_OMNI_DSPARK = "Qwen3OmniDSparkModel"
# specbench's own checkpoints (reference_eagle4/drafters): the reference engine reads them, vLLM does not
OWN_KINDS = {"DFlashDrafter": "DFlash/DSpark", "Eagle4Drafter": "EAGLE-4"}


def check_drafter(method: str, drafter: str, budget: int) -> None:
    """Refuse a drafter vLLM would run as another method than `method`, or at a budget its block cannot hold."""
    cfg = read_config(drafter)
    if cfg is None:
        return
    own = next((OWN_KINDS[a] for a in cfg.get("architectures") or [] if a in OWN_KINDS), None)
    if method in ("eagle3", "eagle4-chain") and (own == "EAGLE-4" or cfg.get("model_type") == "eagle4"):
        raise SpecbenchError(f"{drafter} is an EAGLE-4 checkpoint; vLLM loads EAGLE-3: run "
                             f"`specbench export-eagle3 {drafter} --out DIR` and pass --option drafter=DIR")
    if own:
        raise SpecbenchError(f"{drafter} is specbench's own {own} checkpoint, which only the reference engine "
                             "loads; vLLM needs a checkpoint in the published layout of its method")
    if method in ("dflash", "dflash2"):
        check_dflash(method, drafter, cfg, budget)
    elif method == "dspark":
        check_dspark(drafter, cfg, budget)


def read_config(drafter: str) -> dict[str, Any] | None:
    """The drafter's config.json, or None when it is not a local folder that has one."""
    path = Path(drafter).expanduser() / "config.json"
    if not path.is_file():
        return None
    try:
        cfg = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise SpecbenchError(f"{path}: not a readable JSON config ({err})") from None
    if not isinstance(cfg, dict):
        raise SpecbenchError(f"{path}: not a JSON object")
    return cfg


def architectures(cfg: dict[str, Any]) -> list[str]:
    """The architectures vLLM resolves: a speculators-format config (one with `speculators_config`) names its own
    (transformers_utils/configs/speculators/algos.py, update_dflash / update_dflash2 / update_dspark)."""
    archs = [str(a) for a in cfg.get("architectures") or []]
    if cfg.get("speculators_config") is None:
        return archs
    kind = cfg.get("speculators_model_type")
    if kind == "dflash":
        return ["DFlashDraftModel"]
    if kind == "dflash2":
        return ["DFlash2DraftModel"]
    if kind == "dspark":
        return [a for a in archs if a in ("Qwen3DSparkModel", QWEN3_OMNI_DSPARK)] or ["Qwen3DSparkModel"]
    return archs


def config_value(cfg: dict[str, Any], name: str) -> Any:
    """`name` as vLLM's DFlash/DSpark models read it: dflash_config, then eagle_config, then the top level
    (config/speculative.py, _get_qwen3_dspark_value)."""
    for section in ("dflash_config", "eagle_config"):
        nested = cfg.get(section)
        if isinstance(nested, dict) and nested.get(name) is not None:
            return nested[name]
    return cfg.get(name)


def block_size(cfg: dict[str, Any]) -> int | None:
    """The trained block: `block_size`, else DSpark's `dspark_block_size` (None when the config names neither)."""
    value = config_value(cfg, "block_size")
    value = config_value(cfg, "dspark_block_size") if value is None else value
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def check_dflash(method: str, drafter: str, cfg: dict[str, Any], budget: int) -> None:
    """DFlash and DFlash2 both run under `method="dflash"`; the architecture decides which. Each step's query block
    is the bonus token plus L-1 masks (v1/worker/gpu/spec_decode/dflash/speculator.py, num_query_per_req), so it
    must fit the trained block: L <= block_size."""
    archs = architectures(cfg)
    family = ("DFlash2" if DFLASH2_ARCHITECTURES & set(archs)
              else next((OTHER_DFLASH_FAMILIES[a] for a in archs if a in OTHER_DFLASH_FAMILIES), "DFlash"))
    wanted = "DFlash2" if method == "dflash2" else "DFlash"
    if family != wanted:
        hint = "; use --method dflash2" if family == "DFlash2" else ""
        raise SpecbenchError(f"{drafter} (architectures {archs}) runs as {family} under vLLM's method=dflash, "
                             f"not {wanted}{hint}")
    if config_value(cfg, "sample_from_anchor"):
        raise SpecbenchError(f"{drafter} samples from the anchor (dflash_config.sample_from_anchor), a DSpark "
                             "layout vLLM's DFlash refuses; use --method dspark")
    width = block_size(cfg)
    if width is not None and budget > width:
        raise SpecbenchError(f"--budget {budget}: {drafter} was trained on blocks of {width} (config.json "
                             f"block_size), which hold the bonus token and at most {width - 1} drafts: "
                             f"--budget {width} at most")


def check_dspark(drafter: str, cfg: dict[str, Any], budget: int) -> None:
    """A DSpark checkpoint that vLLM loads as itself, with the confidence head that gates verification, and a
    budget its block holds: with `sample_from_anchor` (the default of dense checkpoints) the anchor predicts the
    first draft, so L-1 <= block_size; the speculators layout fills in after the anchor, so L <= block_size;
    Qwen3-Omni DSpark needs L-1 == block_size (config/speculative.py, _validate_qwen3_omni_dspark)."""
    archs, model_type = architectures(cfg), cfg.get("model_type")
    deepseek = model_type in DEEPSEEK_V4_TYPES
    known = bool(DSPARK_ARCHITECTURES & set(archs)) or ("DSparkDraftModel" in archs and model_type == "qwen3")
    if not (known or deepseek):
        raise SpecbenchError(f"{drafter}: architectures {archs} (model_type {model_type!r}) is no DSpark "
                             "architecture vLLM knows, and vLLM would load it as DeepSeek-V4's DSpark; expected "
                             f"one of {', '.join(sorted(DSPARK_ARCHITECTURES))}, DSparkDraftModel with model_type "
                             "qwen3, or a DeepSeek-V4 checkpoint")
    # the DeepSeek-V4 drafters build the head unless told not to; the others only when told to
    if not cfg.get("enable_confidence_head", not known):
        raise SpecbenchError(f"{drafter} has no confidence head (config.json enable_confidence_head is not true): "
                             "vLLM would gate verification with its acceptance estimator, not DSpark's confidence")
    names = weight_names(Path(drafter).expanduser())
    if names is not None and not any("confidence_head" in n for n in names):
        raise SpecbenchError(f"{drafter}'s weights hold no confidence_head tensors: vLLM would drop the head "
                             "(qwen3_dspark.py, load_weights) and gate verification with its acceptance estimator")
    width = block_size(cfg)
    if width is None:
        return
    anchor = cfg.get("sample_from_anchor", cfg.get("speculators_config") is None)
    most = width if anchor else width - 1
    n = budget - 1
    if QWEN3_OMNI_DSPARK in archs and n != width:
        raise SpecbenchError(f"--budget {budget}: Qwen3-Omni DSpark {drafter} drafts exactly its block_size "
                             f"{width}: --budget {width + 1}")
    if n > most:
        raise SpecbenchError(f"--budget {budget}: {drafter} was trained on blocks of {width} (config.json "
                             f"block_size{', anchor included' if anchor else ''}), which hold at most {most} "
                             f"drafts: --budget {most + 1} at most")


def weight_names(folder: Path) -> list[str] | None:
    """Tensor names of a local safetensors checkpoint (its index, else each file's header); None without one."""
    index = folder / "model.safetensors.index.json"
    try:
        if index.is_file():
            return list(json.loads(index.read_text()).get("weight_map") or {})
        files = sorted(folder.glob("*.safetensors"))
        if not files:
            return None
        names: list[str] = []
        for path in files:
            with path.open("rb") as f:
                (size,) = struct.unpack("<Q", f.read(8))
                names += [k for k in json.loads(f.read(size)) if k != "__metadata__"]
        return names
    except (OSError, ValueError, struct.error, AttributeError) as err:
        raise SpecbenchError(f"{folder}: cannot read the safetensors index or headers ({err})") from None
