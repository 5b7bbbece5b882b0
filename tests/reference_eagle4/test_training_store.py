"""The distillation data stores: records survive reopening, an interruption loses only what was in flight,
and features read back from shards are the teacher pass's own."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
from eagle4_helpers import bigram_target  # noqa: E402

from reference_eagle4.training.features import teacher_pass  # noqa: E402
from reference_eagle4.training.store import FeatureStore, TokenStore  # noqa: E402


def fill(folder: Path, n: int, vocab: int = 300) -> TokenStore:
    store = TokenStore(folder, vocab_size=vocab)
    for i in range(n):
        store.append(f"r{i}", list(range(i, i + 5)), [vocab - 1 - i] * (i + 1), id=f"p{i % 2}", temperature=0.7)
    store.close()
    return store


def test_records_survive_reopening_and_append_after_the_last(tmp_path):
    fill(tmp_path, 3)
    store = TokenStore(tmp_path)
    assert len(store) == 3 and "r2" in store and store.response_tokens == 1 + 2 + 3
    assert store.tokens(1).tolist() == [1, 2, 3, 4, 5, 298, 298]
    store.append("r3", [7], [8, 9])
    store.close()
    again = TokenStore(tmp_path)
    assert [r["id"] for r in again.rows(range(4))] == ["r0", "r1", "r2", "r3"]
    assert again.rows([3])[0] == {"id": "r3", "pool_id": "r3", "category": "", "prompt_ids": [7],
                                  "output_ids": [8, 9]}
    assert (tmp_path / "tokens.bin").stat().st_size == again.end * 2          # uint16 for a small vocabulary


def test_a_record_cut_by_an_interruption_is_dropped_and_the_rest_kept(tmp_path):
    fill(tmp_path, 3)
    with open(tmp_path / "tokens.bin", "ab") as fh:          # tokens written, index line never landed
        fh.write(np.arange(6, dtype=np.uint16).tobytes())
    store = TokenStore(tmp_path)
    assert len(store) == 3
    store.append("r3", [1, 2], [3])
    store.close()
    assert TokenStore(tmp_path).tokens(3).tolist() == [1, 2, 3]


def test_a_torn_index_line_drops_its_record(tmp_path):
    fill(tmp_path, 3)
    raw = (tmp_path / "index.jsonl").read_bytes()
    (tmp_path / "index.jsonl").write_bytes(raw[:-7])              # the last line cut mid-write
    store = TokenStore(tmp_path)
    assert [e["key"] for e in store.entries] == ["r0", "r1"] and "r2" not in store
    store.append("r2", [5], [6])                                  # redone by the next run
    store.close()
    assert TokenStore(tmp_path).tokens(2).tolist() == [5, 6]


def test_a_record_is_stored_once_and_ids_must_fit_the_vocabulary(tmp_path):
    store = fill(tmp_path, 1)
    with pytest.raises(ValueError, match="already stored"):
        TokenStore(tmp_path).append("r0", [1], [2])
    with pytest.raises(ValueError, match="outside the vocabulary"):
        TokenStore(tmp_path).append("big", [1], [store.meta["vocab_size"]])


@pytest.fixture(scope="module")
def teacher():
    torch.set_num_threads(1)
    t = bigram_target(layer_std=0.05)
    g = torch.Generator().manual_seed(3)
    prompts = {f"p{i}": torch.randint(0, 256, (9 + i,), generator=g).tolist() for i in range(3)}
    rows = []
    for i in range(7):                    # several responses per prompt, as the sampled rounds give
        pid = f"p{i % 3}"
        rows.append({"id": f"{pid}#s{i}", "pool_id": pid, "category": "chat", "prompt_ids": prompts[pid],
                     "output_ids": torch.randint(0, 256, (4 + i,), generator=g).tolist()})
    samples = teacher_pass(t, rows, tuple(t.args.eagle_layers), topk=4, batch=3, log=lambda m: None)
    return t, rows, {s["id"]: s for s in samples}


def test_features_read_back_from_shards_are_the_teacher_pass_own(teacher, tmp_path):
    t, rows, want = teacher
    meta = {"capture": list(t.args.eagle_layers), "topk": 4, "dim": t.args.dim}
    store = FeatureStore(tmp_path, meta)
    pool_ids = {r["id"]: r["pool_id"] for r in rows}
    store.write_shard([want[r["id"]] for r in rows[:4]], pool_ids)
    store.write_shard([want[r["id"]] for r in rows[4:]], pool_ids)
    again = FeatureStore(tmp_path, meta).samples()
    assert sorted(s["id"] for s in again) == sorted(want)
    for s in again:
        w = want[s["id"]]
        assert s["prompt_len"] == w["prompt_len"] and s["group"] == pool_ids[s["id"]]
        for name in ("tokens", "feats", "top_p", "top_i"):
            assert torch.equal(s[name], w[name]), name
    # a prompt's positions are stored once however many responses it has
    stored = sum(np.load(p / "feats.npy", mmap_mode="r").shape[0] for p in tmp_path.glob("shard-?????"))
    prompt_positions = sum(len(p) for p in {r["pool_id"]: r["prompt_ids"] for r in rows}.values())
    assert stored == prompt_positions + sum(len(r["output_ids"]) for r in rows)


def test_a_torn_shard_is_removed_and_held_out_prompts_keep_all_their_responses(teacher, tmp_path):
    t, rows, want = teacher
    meta = {"capture": list(t.args.eagle_layers), "topk": 4, "dim": t.args.dim}
    store = FeatureStore(tmp_path, meta)
    store.write_shard([want[r["id"]] for r in rows], {r["id"]: r["pool_id"] for r in rows})
    (tmp_path / "shard-00001.tmp").mkdir()                       # an interrupted shard: no index.json
    (tmp_path / "shard-00001.tmp" / "feats.npy").write_bytes(b"\x93NUMPY")
    again = FeatureStore(tmp_path, meta)
    assert not (tmp_path / "shard-00001.tmp").exists() and len(again) == len(rows)
    train, held = again.samples().split(0.5)
    assert len(train) + len(held) == len(rows) and len(train) and len(held)
    assert not {s["group"] for s in train} & {s["group"] for s in held}
    with pytest.raises(ValueError, match="holds features of"):
        FeatureStore(tmp_path, {**meta, "topk": 8})
