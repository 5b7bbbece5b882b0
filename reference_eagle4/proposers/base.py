"""The proposer interface the engine drives, and the registry methods join with one file each."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, ClassVar

import torch
from torch import Tensor

from reference_eagle4.tree import DraftTree

if TYPE_CHECKING:
    from reference_eagle4.engine import Sequence

PROPOSERS: dict[str, type["Proposer"]] = {}


def target_embedding_and_head(target: Any) -> tuple[Tensor, Tensor]:
    """The target's embedding and lm_head weights that drafters share (tied models: the embedding twice)."""
    emb = target.embed.weight
    head = getattr(target.lm_head, "weight", None)
    if head is None:
        if not target.args.tie_embeddings:
            raise ValueError("the target's lm_head was packed without its weight: pack_linears keeps it by default")
        head = emb
    return emb, head


def flag_option(value: Any) -> bool:
    """An on/off method option, given from Python or as `--option key=off` on the command line."""
    if isinstance(value, str):
        return value.lower() not in ("0", "false", "no", "off")
    return bool(value)


def load_drafter_folder(kind: str, path: str | Path | None, default: Path,
                        loader: Callable[[Path], Any]) -> tuple[Any, Path, str | None]:
    """(drafter, folder, sha256 of its weights) from a drafter folder, the shipped one when `path` is None;
    the sha256 goes into the run manifest so a result names the exact weights behind it."""
    from reference_eagle4.weights import sha256_file

    folder = Path(path) if path is not None else default
    if not (folder / "config.json").exists():
        raise FileNotFoundError(
            f"{kind} drafter not found at {folder} (train one with `specbench train --drafter {kind}`)")
    weights = folder / "model.safetensors"          # EAGLE-3 checkpoints may come as pytorch_model*.bin
    return loader(folder), folder, sha256_file(weights) if weights.exists() else None


def dtype_option(value: str | torch.dtype | None) -> torch.dtype | None:
    """A drafter's `dtype` option ("auto", "float32", "bfloat16" or a torch dtype; None: the target's)."""
    from reference_eagle4.device import resolve_dtype

    return resolve_dtype(value) if isinstance(value, str) else value


def option_names(cls: type["Proposer"]) -> set[str]:
    """Every option a proposer class takes: the named parameters of the constructors along its bases
    (the `**options` they pass on carry a command line's options meant for other methods)."""
    import inspect

    names: set[str] = set()
    for klass in cls.__mro__:
        if "__init__" in vars(klass) and klass is not object:
            names |= {n for n, p in inspect.signature(klass.__init__).parameters.items()
                      if p.kind is p.POSITIONAL_OR_KEYWORD or p.kind is p.KEYWORD_ONLY}
    return names - {"self", "budget"}


def register(name: str, summary: str) -> Callable[[type["Proposer"]], type["Proposer"]]:
    """Add a proposer class under `name`; `summary` is its line in `specbench methods`."""
    def deco(cls: type["Proposer"]) -> type["Proposer"]:
        cls.name = name
        cls.summary = summary
        PROPOSERS[name] = cls
        return cls
    return deco


class Proposer:
    """Drafts a tree per sequence each step; learns what was accepted afterwards.

    `capture` names target layers whose input hidden states the proposer needs; the engine returns
    them for the prefill (`begin`) and for the accepted nodes of every step (`accepted`).
    """

    name: ClassVar[str] = ""
    summary: ClassVar[str] = ""
    capture: tuple[int, ...] = ()

    def __init__(self, budget: int, **options: Any) -> None:
        if budget < 1:
            raise ValueError("budget L must be at least 1 (the root)")
        self.budget = budget

    def config(self) -> dict[str, Any]:
        """What the run manifest records about this proposer."""
        return {"name": self.name, "budget": self.budget}

    def bind(self, target: Any) -> None:
        """The engine hands over its target model (drafters share its embedding and lm_head)."""

    def begin(self, seq: "Sequence", hidden: list[Tensor]) -> None:
        """A sequence was prefilled; hidden[i] is [prompt_len, H] for capture[i]."""

    def propose(self, seqs: list["Sequence"]) -> list[DraftTree]:
        raise NotImplementedError

    def accepted(self, seq: "Sequence", path: list[int], hidden: list[Tensor]) -> None:
        """The tree nodes `path` (root first) were kept; hidden[i] holds their rows for capture[i]."""

    def moved(self, seq: "Sequence", old_slot: int, new_slot: int) -> None:
        """The engine moved a sequence to another KV slot (slot-indexed proposer state follows it)."""

    def end(self, seq: "Sequence") -> None:
        """The sequence finished; drop any state kept for it."""
