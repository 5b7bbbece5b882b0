"""Compact, append-only, resumable stores for distillation data at scale.

`TokenStore`: the target's responses as token ids in one flat binary (uint16 when the vocabulary fits, else
int32) plus a JSON-lines index (one line per record: key, pool id, sampling temperature, offsets). A record
is appended as its request finishes: tokens first, then its index line, both flushed. Opening the store
drops what an interruption cut short (a torn index line, token bytes no index line points to), so a rerun
loses at most the requests that were in flight.

`FeatureStore`: the teacher-forced features of those records in shards (shard-NNNNN/: feats.npy [N, 3, H]
bf16 bits as uint16, top_p.npy fp16, top_i.npy int32, tokens.npy int32, index.json written last). A shard
is built in a .tmp folder and renamed into place when complete; a leftover .tmp folder is a torn shard and
is removed on open. The prompt positions of a pool row are stored once, beside the first of its responses,
and shared by every response to that prompt (several sampled responses per prompt would otherwise store
the prompt's features again each time). `samples()` reads records back lazily (memory-mapped), as the
dicts the trainer takes.
"""

from __future__ import annotations

import json
import os
import shutil
import zlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import torch


def _read_index(path: Path) -> tuple[list[dict[str, Any]], list[int]]:
    """The complete lines of a JSON-lines index and their byte lengths (a torn last line excluded)."""
    entries: list[dict[str, Any]] = []
    sizes: list[int] = []
    if not path.exists():
        return entries, sizes
    with open(path, "rb") as fh:
        for line in fh:
            if not line.endswith(b"\n"):
                break
            try:
                entries.append(json.loads(line))
            except json.JSONDecodeError:
                break
            sizes.append(len(line))
    return entries, sizes


class TokenStore:
    """Token ids of (prompt, response) records, appendable across runs; see the module docstring."""

    def __init__(self, folder: str | Path, vocab_size: int | None = None):
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        meta_path = self.folder / "meta.json"
        if meta_path.exists():
            self.meta = json.loads(meta_path.read_text())
        else:
            if vocab_size is None:
                raise ValueError(f"{self.folder}: a new token store needs the vocabulary size")
            self.meta = {"format": 1, "dtype": "uint16" if vocab_size <= 65536 else "int32",
                         "vocab_size": vocab_size}
            meta_path.write_text(json.dumps(self.meta) + "\n")
        self.dtype = np.dtype(self.meta["dtype"])
        self.bin_path, self.index_path = self.folder / "tokens.bin", self.folder / "index.jsonl"
        self.entries: list[dict[str, Any]] = []
        self._recover()
        self._keys = {e["key"] for e in self.entries}
        self._bin = self._index = None

    def _recover(self) -> None:
        """Keep the records whose index line and tokens are both complete; cut everything after them."""
        entries, sizes = _read_index(self.index_path)
        have = self.bin_path.stat().st_size // self.dtype.itemsize if self.bin_path.exists() else 0
        end = 0
        for n, e in enumerate(entries):
            if e["offset"] != end or end + e["length"] > have:
                entries, sizes = entries[:n], sizes[:n]
                break
            end += e["length"]
        self.entries, good = entries, sum(sizes)
        if self.index_path.exists() and self.index_path.stat().st_size != good:
            os.truncate(self.index_path, good)
        if have != end:
            self.bin_path.touch()
            os.truncate(self.bin_path, end * self.dtype.itemsize)
        self.end = end

    def __len__(self) -> int:
        return len(self.entries)

    def __contains__(self, key: str) -> bool:
        return key in self._keys

    @property
    def response_tokens(self) -> int:
        return sum(e["n_out"] for e in self.entries)

    def append(self, key: str, prompt_ids: list[int], output_ids: list[int], **meta: Any) -> None:
        """Add one record (tokens, then its index line; both flushed). `meta` is kept in its index line."""
        if key in self._keys:
            raise ValueError(f"{self.folder}: record {key!r} is already stored")
        if self._bin is None:
            self._bin = open(self.bin_path, "ab")
            self._index = open(self.index_path, "a", encoding="utf-8")
        ids = np.asarray(list(prompt_ids) + list(output_ids), dtype=np.int64)
        if ids.size and (ids.min() < 0 or ids.max() >= self.meta["vocab_size"]):
            raise ValueError(f"{self.folder}: record {key!r} has token ids outside the vocabulary")
        self._bin.write(ids.astype(self.dtype).tobytes())
        self._bin.flush()
        e = {"key": key, "offset": self.end, "length": int(ids.size), "prompt_len": len(prompt_ids),
             "n_out": len(output_ids), **meta}
        self._index.write(json.dumps(e) + "\n")
        self._index.flush()
        self.end += int(ids.size)
        self.entries.append(e)
        self._keys.add(key)

    def tokens(self, i: int) -> np.ndarray:
        e = self.entries[i]
        return np.fromfile(self.bin_path, dtype=self.dtype, count=e["length"],
                           offset=e["offset"] * self.dtype.itemsize).astype(np.int64)

    def rows(self, indices: Sequence[int]) -> list[dict[str, Any]]:
        """Records as the teacher pass takes them: {id (the record key), category, prompt_ids, output_ids}."""
        out = []
        for i in indices:
            e, ids = self.entries[i], self.tokens(i).tolist()
            out.append({"id": e["key"], "pool_id": e.get("id", e["key"]), "category": e.get("category", ""),
                        "prompt_ids": ids[: e["prompt_len"]], "output_ids": ids[e["prompt_len"]:]})
        return out

    def close(self) -> None:
        for fh in (self._bin, self._index):
            if fh is not None:
                fh.close()
        self._bin = self._index = None

    def __enter__(self) -> "TokenStore":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def is_sampled(key: str) -> bool:
    """A sampled response's record key ("<pool id>#s<r>"); greedy ones end in "#g", and rows regenerated
    outside a store (plain pool ids) are greedy too."""
    return "#s" in key


def held_out(group: str, eval_frac: float) -> bool:
    """The deterministic train/eval split by pool row (every response to a prompt falls on the same side)."""
    return zlib.crc32(group.encode()) % 1000 < eval_frac * 1000


class LazySample(Mapping):
    """One record of a FeatureStore as the trainer's sample dict; arrays are read when first asked for."""

    def __init__(self, store: "FeatureStore", key: str):
        self.store, self.key = store, key
        self.entry = store.entries[key]
        self._cache: dict[str, Any] = {}

    def _load(self, name: str) -> Any:
        e, st = self.entry, self.store
        if name == "id":
            return self.key
        if name == "group":
            return e["prompt"]
        if name in ("category", "prompt_len"):
            return e[name]
        if name == "tokens":
            return torch.from_numpy(st.array(e["shard"], "tokens", e["tok"]))
        if name in ("top_p", "top_i"):
            return torch.from_numpy(st.array(e["shard"], name, e["top"]))
        if name == "feats":
            p = st.entries[st.prompts[e["prompt"]]]
            parts = [st.array(p["shard"], "feats", p["pfeat"]), st.array(e["shard"], "feats", e["feat"])]
            return torch.from_numpy(np.concatenate(parts)).view(torch.bfloat16)
        raise KeyError(name)

    def __getitem__(self, name: str) -> Any:
        if name not in self._cache:
            self._cache[name] = self._load(name)
        return self._cache[name]

    def __iter__(self) -> Iterator[str]:
        return iter(("id", "group", "category", "prompt_len", "tokens", "feats", "top_p", "top_i"))

    def __len__(self) -> int:
        return 8


class Samples(Sequence):
    """A list-like view of FeatureStore records (the trainer indexes it; nothing is read until asked)."""

    def __init__(self, store: "FeatureStore", keys: list[str]):
        self.store, self.keys = store, keys

    def __len__(self) -> int:
        return len(self.keys)

    def __getitem__(self, i):  # type: ignore[override]
        if isinstance(i, slice):
            return Samples(self.store, self.keys[i])
        return LazySample(self.store, self.keys[i])

    def split(self, eval_frac: float) -> tuple["Samples", "Samples"]:
        groups = [self.store.entries[k]["prompt"] for k in self.keys]
        ev = [k for k, g in zip(self.keys, groups) if held_out(g, eval_frac)]
        tr = [k for k, g in zip(self.keys, groups) if not held_out(g, eval_frac)]
        return Samples(self.store, tr), Samples(self.store, ev)

    def response_tokens(self) -> int:
        return sum(self.store.entries[k]["n_out"] for k in self.keys)


class FeatureStore:
    """Sharded teacher-forced features of TokenStore records; see the module docstring."""

    FILES = ("feats", "top_p", "top_i", "tokens")

    def __init__(self, folder: str | Path, meta: dict[str, Any] | None = None):
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        meta_path = self.folder / "meta.json"
        if meta_path.exists():
            self.meta = json.loads(meta_path.read_text())
            if meta is not None and any(self.meta.get(k) != v for k, v in meta.items()):
                raise ValueError(f"{self.folder}: holds features of {self.meta}, not {meta}")
        else:
            if meta is None:
                raise ValueError(f"{self.folder}: no feature store here")
            self.meta = dict(meta)
            meta_path.write_text(json.dumps(self.meta) + "\n")
        for torn in self.folder.glob("shard-*.tmp"):
            shutil.rmtree(torn)
        self.entries: dict[str, dict[str, Any]] = {}
        self.prompts: dict[str, str] = {}                  # pool id -> key of the record holding its prompt
        self.shards = sorted(p.name for p in self.folder.glob("shard-?????") if (p / "index.json").exists())
        for name in self.shards:
            for e in json.loads((self.folder / name / "index.json").read_text()):
                self._add(name, e)
        self._maps: dict[tuple[str, str], np.ndarray] = {}

    def _add(self, shard: str, e: dict[str, Any]) -> None:
        e = {**e, "shard": shard}
        self.entries[e["key"]] = e
        if "pfeat" in e:
            self.prompts[e["prompt"]] = e["key"]

    def __len__(self) -> int:
        return len(self.entries)

    def __contains__(self, key: str) -> bool:
        return key in self.entries

    def array(self, shard: str, name: str, span: list[int]) -> np.ndarray:
        arr = self._maps.get((shard, name))
        if arr is None:
            arr = self._maps[(shard, name)] = np.load(self.folder / shard / f"{name}.npy", mmap_mode="r")
        return np.array(arr[span[0]: span[1]])

    def write_shard(self, samples: list[dict[str, Any]], pool_ids: dict[str, str]) -> str:
        """Store teacher_pass samples (one shard, atomically); `pool_ids` maps record key -> pool row id."""
        name = f"shard-{len(self.shards):05d}"
        tmp = self.folder / f"{name}.tmp"
        tmp.mkdir()
        parts: dict[str, list[np.ndarray]] = {k: [] for k in self.FILES}
        size = dict.fromkeys(self.FILES, 0)
        index = []

        def put(kind: str, arr: np.ndarray) -> list[int]:
            parts[kind].append(arr)
            span = [size[kind], size[kind] + len(arr)]
            size[kind] = span[1]
            return span

        new_prompts: set[str] = set()
        for s in samples:
            pid, P = pool_ids[s["id"]], s["prompt_len"]
            feats = s["feats"].view(torch.int16).numpy().view(np.uint16)
            e = {"key": s["id"], "prompt": pid, "category": s["category"], "prompt_len": P,
                 "n_out": len(s["tokens"]) - P}
            if pid not in self.prompts and pid not in new_prompts:
                e["pfeat"] = put("feats", feats[:P])
                new_prompts.add(pid)
            e["feat"] = put("feats", feats[P:])
            e["top"] = put("top_p", s["top_p"].numpy())
            put("top_i", s["top_i"].numpy())
            e["tok"] = put("tokens", s["tokens"].numpy().astype(np.int32))
            index.append(e)
        for kind in self.FILES:
            np.save(tmp / f"{kind}.npy", np.concatenate(parts[kind]))
        (tmp / "index.json").write_text(json.dumps(index))
        tmp.rename(self.folder / name)
        self.shards.append(name)
        for e in index:
            self._add(name, e)
        return name

    def samples(self) -> Samples:
        """Every record whose prompt features are stored, in key order."""
        return Samples(self, sorted(k for k, e in self.entries.items() if e["prompt"] in self.prompts))
