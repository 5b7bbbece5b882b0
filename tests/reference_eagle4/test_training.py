"""EAGLE-4 training on a tiny random target: fused loss, features, a short TTT run whose loss falls,
exact resume after an interruption, draft vocabulary, data formatting, pool disjointness."""

from __future__ import annotations

import json
import re
import sys
from dataclasses import asdict
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
from eagle4_helpers import bigram_target, one_thread  # noqa: E402,F401

from reference_eagle4.device import resolve_dtype  # noqa: E402
from reference_eagle4.engine import Engine, GenerationConfig, Request  # noqa: E402
from reference_eagle4.proposers import PROPOSERS  # noqa: E402
from reference_eagle4.training import regenerate as regen  # noqa: E402
from reference_eagle4.training.features import prefix_groups, teacher_pass  # noqa: E402
from reference_eagle4.training.train import (  # noqa: E402
    TTT, HeadSoftCE, TrainConfig, build_drafter, draft_vocab, evaluate, lr_at, teacher, train)

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def data():
    """Greedy responses of a tiny target to random prompts, then its teacher-forced features."""
    torch.set_num_threads(1)
    t = bigram_target(layer_std=0.05)
    g = torch.Generator().manual_seed(0)
    reqs = [Request(f"s{i:02d}", torch.randint(0, 256, (int(n),), generator=g).tolist())
            for i, n in enumerate(torch.randint(4, 24, (12,), generator=g))]
    rows = []
    eng = Engine(t, PROPOSERS["vanilla"](budget=1), GenerationConfig(max_new_tokens=40, concurrency=4), 96)
    eng.generate(reqs, lambda s: rows.append({"id": s.request.id, "category": "chat",
                                              "prompt_ids": s.request.prompt_ids, "output_ids": s.output}))
    samples = teacher_pass(t, rows, tuple(t.args.eagle_layers), topk=8, batch=4, log=lambda m: None)
    return t, sorted(samples, key=lambda s: s["id"])


def test_features_layout(data):
    t, samples = data
    s = samples[0]
    T, P = len(s["tokens"]), s["prompt_len"]
    assert s["feats"].shape == (T, 3, t.args.dim) and s["feats"].dtype == torch.bfloat16
    assert s["top_p"].shape == (T - P, 8) and s["top_i"].shape == (T - P, 8)
    assert torch.allclose(s["top_p"].float().sum(-1), torch.ones(T - P), atol=1e-2)
    # teacher argmax at the position before each response token is that token (greedy regeneration)
    assert torch.equal(s["top_i"][:, 0].long(), s["tokens"][P:].long())


def test_rows_sharing_a_system_prompt_get_the_features_of_a_whole_pass():
    """The teacher pass runs a shared prompt prefix once; every row must still get what a pass over its
    whole sequence gives (features at every position, the teacher's top-k at every response position)."""
    torch.set_num_threads(1)
    t = bigram_target(layer_std=0.05)
    g = torch.Generator().manual_seed(1)
    system = torch.randint(0, 256, (12,), generator=g).tolist()
    rows = []
    for i in range(7):                     # two system prompts, one row without any shared prefix
        head = system if i < 4 else system[::-1] if i < 6 else []
        prompt = head + torch.randint(0, 256, (int(torch.randint(1, 6, (1,), generator=g)),), generator=g).tolist()
        out = torch.randint(0, 256, (int(torch.randint(3, 9, (1,), generator=g)),), generator=g).tolist()
        rows.append({"id": f"r{i}", "category": "chat", "prompt_ids": prompt, "output_ids": out})
    assert sorted(n for n, _ in prefix_groups(rows)) == [0, 12, 12]
    got = {s["id"]: s for s in teacher_pass(t, rows, tuple(t.args.eagle_layers), topk=4, batch=2, log=lambda m: None)}
    assert sorted(got) == [r["id"] for r in rows]
    for r in rows:
        seq = torch.tensor(r["prompt_ids"] + r["output_ids"])
        need = torch.zeros(1, len(seq), dtype=torch.bool)
        need[0, len(r["prompt_ids"]) - 1: len(seq) - 1] = True
        with torch.inference_mode():
            logits, hidden = t(seq[None], t.new_cache(1, len(seq)), capture=tuple(t.args.eagle_layers),
                               logits_rows=need)
        top_p, top_i = logits.softmax(-1).topk(4, dim=-1)
        s = got[r["id"]]
        assert torch.equal(s["tokens"].long(), seq) and s["prompt_len"] == len(r["prompt_ids"])
        torch.testing.assert_close(s["feats"].float(), torch.stack([h[0] for h in hidden], 1).bfloat16().float())
        assert torch.equal(s["top_i"].long(), top_i)
        torch.testing.assert_close(s["top_p"].float(), (top_p / top_p.sum(-1, keepdim=True)).half().float())


def test_features_of_rows_added_by_a_later_regeneration_are_merged_into_the_cache(tiny_target, tmp_path):
    """Regeneration appends rows; the feature cache must then compute only the new ones, and the result
    must be what one pass over all rows gives."""
    from reference_eagle4.training.features import build_features

    g = torch.Generator().manual_seed(2)
    rows = [{"id": f"r{i}", "category": "chat", "prompt_ids": torch.randint(3, 300, (9,), generator=g).tolist(),
             "output_ids": torch.randint(3, 300, (6,), generator=g).tolist()} for i in range(5)]

    def write(path: Path, n: int) -> Path:
        path.write_text("".join(json.dumps(r) + "\n" for r in rows[:n]))
        return path

    logs: list[str] = []
    regen, cache = write(tmp_path / "regen.jsonl", 3), tmp_path / "features.pt"
    build_features(regen, tiny_target, cache, topk=4, dtype="float32", log=logs.append)
    blob = torch.load(cache, weights_only=False)
    blob["samples"][0]["feats"] += 1.0              # marks a sample that must be read back, not recomputed
    torch.save(blob, cache)
    got = build_features(write(regen, 5), tiny_target, cache, topk=4, dtype="float32", log=logs.append)
    assert any(m.startswith("features: 3 samples from") and m.endswith("2 to compute") for m in logs)
    whole = build_features(write(tmp_path / "all.jsonl", 5), tiny_target, tmp_path / "all.pt", topk=4,
                           dtype="float32", log=logs.append)
    assert [s["id"] for s in got] == [s["id"] for s in whole] == [f"r{i}" for i in range(5)]
    torch.testing.assert_close(got[0]["feats"], whole[0]["feats"] + 1.0)
    for a, b in zip(got[1:], whole[1:]):
        torch.testing.assert_close(a["feats"], b["feats"])
        assert torch.equal(a["top_i"], b["top_i"])
    assert build_features(regen, tiny_target, cache, topk=4, log=logs.append) and "cached 5 samples" in logs[-1]


def test_fused_head_loss_matches_autograd():
    g = torch.Generator().manual_seed(0)
    hn = torch.randn(5, 16, generator=g, requires_grad=True)
    W = torch.randn(40, 16, generator=g)
    tp = torch.rand(5, 3, generator=g)
    tp = tp / tp.sum(-1, keepdim=True)
    ti = torch.randint(0, 40, (5, 3), generator=g)
    loss, arg = HeadSoftCE.apply(hn, W, tp, ti)
    grad, = torch.autograd.grad(loss.sum(), hn)
    z = hn @ W.T
    ref = z.logsumexp(-1) - (z.gather(1, ti) * tp).sum(-1)
    ref_grad, = torch.autograd.grad(ref.sum(), hn)
    assert torch.allclose(loss, ref, atol=1e-4) and torch.equal(arg, z.argmax(-1))
    assert torch.allclose(grad, ref_grad, atol=1e-4)


def test_the_teacher_is_sharpened_towards_the_argmax_and_kept_inside_the_draft_vocabulary():
    tp = torch.tensor([[0.5, 0.3, 0.2], [0.6, 0.3, 0.1]])
    ti = torch.tensor([[4, 7, 9], [2, 4, 7]])
    t2d = torch.full((10,), -1)
    t2d[torch.tensor([4, 7, 9])] = torch.tensor([0, 1, 2])           # target id 2 is outside the draft vocabulary
    p1, i1, keep = teacher(tp, ti, t2d)
    assert keep.tolist() == [True, False]                              # row 2's argmax cannot be drafted
    assert torch.equal(i1[0], torch.tensor([0, 1, 2])) and torch.allclose(p1[0], tp[0])
    assert torch.allclose(p1[1], torch.tensor([0.0, 0.75, 0.25]))     # the mass on id 2 dropped, renormalised
    half, _, _ = teacher(tp, ti, None, 0.5)
    assert torch.allclose(half[0], torch.tensor([25.0, 9.0, 4.0]) / 38.0)
    assert half[0, 0] > tp[0, 0] and torch.equal(half.argmax(-1), tp.argmax(-1))
    hard, i0, keep = teacher(tp, ti, None, 0.0)
    assert torch.equal(hard, torch.tensor([[1.0, 0.0, 0.0], [1.0, 0.0, 0.0]])) and torch.equal(i0, ti)
    assert keep.all()


def test_hard_labels_train_the_drafter_on_the_argmax_alone(data, tmp_path):
    """teacher_temp = 0: the step-0 loss is the cross-entropy of the target's argmax, so a drafter that puts
    all its mass there scores zero (soft CE keeps the teacher's entropy as its floor)."""
    t, samples = data
    emb, head = t.embed.weight.detach(), t.lm_head.weight.detach()
    hard, soft = tiny_cfg(steps=1, teacher_temp=0.0), tiny_cfg(steps=1)
    d = build_drafter(t.args, soft, emb, head)
    got = {name: evaluate(TTT(d, emb, head.to(torch.bfloat16), c), samples) for name, c in
           (("hard", hard), ("soft", soft))}
    assert got["hard"]["acc0"] == got["soft"]["acc0"]                  # the same drafter, the same argmax
    assert got["hard"]["loss0"] != pytest.approx(got["soft"]["loss0"], abs=1e-3)
    _, state = train(samples, t, tmp_path, tiny_cfg(steps=20, teacher_temp=0.0), resume=False,
                     log=lambda m: None, progress=False)
    assert state["eval"]["acc0"] >= got["hard"]["acc0"] and state["eval"]["loss0"] < got["hard"]["loss0"] - 0.3


def tiny_cfg(**kw) -> TrainConfig:
    base = dict(ttt_steps=3, lr=3e-3, lr_lowrank=3e-3, accum=2, eval_frac=0.0, ckpt_every_s=1e9, window=16,
                rank=16, topk_candidates=32, init_std=0.05, seed=0)
    base.update(kw)
    return TrainConfig(**base)


def test_feature_noise_perturbs_training_only_and_in_proportion_to_each_layers_scale(data):
    """feature_noise is a regulariser of training: evaluation sees the target's features as they are, so
    two configs differing only in the noise score a drafter alike, while their training losses differ."""
    t, samples = data
    emb, head = t.embed.weight.detach(), t.lm_head.weight.detach().to(torch.bfloat16)
    clean, noisy = tiny_cfg(), tiny_cfg(feature_noise=0.1)
    d = build_drafter(t.args, clean, emb, head)
    assert evaluate(TTT(d, emb, head, clean), samples) == evaluate(TTT(d, emb, head, noisy), samples)
    with torch.random.fork_rng():
        losses = [TTT(d, emb, head, c).run(samples[0]).item() for c in (clean, noisy)]
    assert losses[0] != pytest.approx(losses[1], rel=1e-4)
    feats = samples[0]["feats"][:8].float().reshape(8, -1)
    layers = feats.shape[1] // t.args.dim
    scaled = feats.view(8, layers, -1) * torch.tensor([1.0, 100.0] + [1.0] * (layers - 2))[None, :, None]
    moved = (TTT(d, emb, head, noisy).perturb(scaled.reshape(8, -1)).view(8, layers, -1) - scaled)
    rel = moved.pow(2).mean(-1).sqrt() / scaled.pow(2).mean(-1).sqrt()
    assert rel.mean().item() == pytest.approx(0.1, rel=0.3)                 # the same share in every layer


def test_training_reduces_loss(data, tmp_path):
    t, samples = data
    cfg = tiny_cfg(steps=20)
    emb = t.embed.weight.detach()
    head = t.lm_head.weight.detach()
    before = evaluate(TTT(build_drafter(t.args, cfg, emb, head), emb, head.to(torch.bfloat16), cfg), samples)
    d, state = train(samples, t, tmp_path, cfg, resume=False, log=lambda m: None, progress=False)
    after = state["eval"]
    assert state["step"] == 20 and (tmp_path / "ckpt.pt").exists()
    assert after["loss0"] < before["loss0"] - 0.3
    assert after["loss2"] < before["loss2"]
    assert after["acc0"] >= before["acc0"]
    assert 0.0 <= after["lr_recall"] <= 1.0


def test_one_pass_reads_every_training_record_once_and_logs_its_learning_curve(data, tmp_path):
    t, samples = data
    cfg = tiny_cfg(epochs=1.0, accum=1, eval_frac=0.3, curve_tokens=(60, 200))
    _, state = train(samples, t, tmp_path, cfg, resume=False, log=lambda m: None, progress=False)
    from reference_eagle4.training.train import split
    train_set, held = split(samples, 0.3)
    assert state["step"] == len(train_set) and state["epoch"] == 0 and held
    assert state["tokens"] == sum(len(s["tokens"]) - s["prompt_len"] for s in train_set)
    assert [p["at"] for p in state["curve"]] == [60, 200]
    for p in state["curve"]:
        assert p["tokens"] >= p["at"] and 0 < p["seen_rows"] <= p["step"]
        assert set(p["held_out"]) >= {"acc0", "loss0"} and set(p["seen"]) >= {"acc0", "loss0"}


def test_a_drafter_that_memorises_its_few_records_shows_the_gap_to_held_out(data, tmp_path):
    """eval_seen (greedy training responses the run read) beside held out shows a drafter short of data."""
    t, samples = data
    from reference_eagle4.training.train import split
    from reference_eagle4.training.pipeline import _summary
    cfg = tiny_cfg(steps=40, eval_frac=0.3)
    d, state = train(samples, t, tmp_path, cfg, resume=False, log=lambda m: None, progress=False)
    assert state["eval_seen"]["rows"] == len(split(samples, 0.3)[0])     # 9 records, all read, all greedy
    assert state["eval_seen"]["acc0"] > state["eval"]["acc0"] + 0.3
    assert state["eval_seen"]["loss0"] < state["eval"]["loss0"] / 2
    info = {"train_config": asdict(cfg), "tokens_read": state["tokens"], "epochs": state["epoch"], "steps": 40,
            "eval": state["eval"], "eval_seen": state["eval_seen"], "target": "tiny"}
    row = f"| the same on 9 greedy training responses this run read | step 0: {state['eval_seen']['acc0']:.3f}, "
    assert row in "\n".join(_summary(d, info)[2])


def test_a_time_budgeted_run_whose_first_steps_are_fast_still_ends_its_schedule_at_the_budget(data, tmp_path,
                                                                                            monkeypatch):
    """Steps that slow down after the first few (longer records, a busy machine) must not leave the run cut
    by its budget with the learning rate still high: the planned step count follows the pace."""
    import time as clock

    t, samples = data
    calls = {"n": 0}
    run = TTT.run

    def slowing(self, s, stats=None):
        calls["n"] += 1
        clock.sleep(0.002 if calls["n"] <= 20 else 0.03)
        return run(self, s, stats)

    monkeypatch.setattr(TTT, "run", slowing)
    cfg = tiny_cfg(minutes=0.1, accum=1)
    _, state = train(samples, t, tmp_path, cfg, resume=False, log=lambda m: None, progress=False)
    assert 100 < state["step"] <= state["total"] <= state["step"] + 5       # not cut mid-schedule
    assert lr_at(state["step"] - 1, state["total"], cfg) < 1.5 * cfg.min_lr_ratio


def test_resume_after_interruption_is_exact(data, tmp_path):
    t, samples = data
    straight, _ = train(samples, t, tmp_path / "a", tiny_cfg(steps=8), resume=False, log=lambda m: None,
                        progress=False)
    # "interrupted" after 3 steps (checkpoint on every step), then resumed to the end
    cfg = tiny_cfg(steps=8, ckpt_every_s=0.0)
    train(samples, t, tmp_path / "b", cfg, resume=False, log=lambda m: None, progress=False, stop_after=3)
    ck = torch.load(tmp_path / "b" / "ckpt.pt", weights_only=False)
    assert ck["state"]["step"] == 3
    logs: list[str] = []
    resumed, state = train(samples, t, tmp_path / "b", cfg, resume=True, log=logs.append, progress=False)
    assert state["step"] == 8 and any("resumed at step 3" in m for m in logs)
    for (n, a), (_, b) in zip(straight.state_dict().items(), resumed.state_dict().items()):
        assert torch.allclose(a, b, atol=1e-6), n


@pytest.mark.parametrize("kind", ["eagle4", "dspark"])
def test_training_on_the_cpu_named_explicitly_is_the_default_bit_for_bit(data, tmp_path, kind):
    t, samples = data
    quiet = dict(log=lambda m: None, progress=False, resume=False, kind=kind)
    default, a = train(samples, t, tmp_path / "a", tiny_cfg(steps=4, vocab=64, anchors=8, eval_frac=0.3), **quiet)
    named, b = train(samples, t, tmp_path / "b", tiny_cfg(steps=4, vocab=64, anchors=8, eval_frac=0.3,
                                                          device="cpu"), **quiet)
    assert TrainConfig().device == "cpu" and a["eval"] == b["eval"]
    assert default.state_dict().keys() == named.state_dict().keys()
    for n, w in default.state_dict().items():
        assert w.device.type == "cpu" and torch.equal(w, named.state_dict()[n]), n


def test_a_checkpoint_written_on_a_gpu_resumes_on_the_cpu(data, tmp_path, monkeypatch):
    """A GPU run's checkpoint also keeps the GPU's random state; the CPU resumes it exactly and leaves that out."""
    t, samples = data
    gpu_states: list[torch.Tensor] = []
    monkeypatch.setattr(torch.cuda, "set_rng_state", lambda state, device="cuda": gpu_states.append(state))
    straight, _ = train(samples, t, tmp_path / "a", tiny_cfg(steps=6), resume=False, log=lambda m: None,
                        progress=False)
    cfg = tiny_cfg(steps=6, ckpt_every_s=0.0)
    train(samples, t, tmp_path / "b", cfg, resume=False, log=lambda m: None, progress=False, stop_after=2)
    ck = torch.load(tmp_path / "b" / "ckpt.pt", weights_only=False)
    assert set(ck) >= {"rng", "drafter", "optimizer"} and "cuda_rng" not in ck      # written on the CPU
    ck["cuda_rng"] = torch.zeros(16, dtype=torch.uint8)
    torch.save(ck, tmp_path / "b" / "ckpt.pt")
    resumed, state = train(samples, t, tmp_path / "b", tiny_cfg(steps=6, device="cpu"), resume=True,
                           log=lambda m: None, progress=False)
    assert state["step"] == 6 and not gpu_states
    for (n, a), (_, b) in zip(straight.state_dict().items(), resumed.state_dict().items()):
        assert torch.equal(a, b), n


def test_draft_vocabulary_training(data, tmp_path):
    t, samples = data
    vocab = draft_vocab(samples, 64, t.args.vocab_size)
    assert vocab.numel() == 64 and torch.equal(vocab, vocab.sort().values)
    seen = torch.cat([s["top_i"][:, 0] for s in samples]).long().unique()
    assert set(seen.tolist()) <= set(vocab.tolist()) or seen.numel() > 64
    d, state = train(samples, t, tmp_path, tiny_cfg(steps=4, vocab=64), resume=False, log=lambda m: None,
                     progress=False)
    assert d.cfg.draft_vocab_size == 64 and torch.equal(d.d2t, vocab)
    d.save(tmp_path / "export")
    from reference_eagle4.drafters.eagle4_model import load_drafter
    e = load_drafter(tmp_path / "export")
    assert torch.equal(e.d2t, vocab) and e.lowrank_ready


def test_continued_training_starts_where_the_saved_drafter_ended(data, tmp_path):
    t, samples = data
    quiet = dict(log=lambda m: None, progress=False, resume=False)
    first, st1 = train(samples, t, tmp_path / "a", tiny_cfg(steps=12, vocab=64), **quiet)
    first.save(tmp_path / "first", dtype=None)
    cfg = tiny_cfg(steps=12, vocab=64, init_from=str(tmp_path / "first"))
    emb, head = t.embed.weight.detach(), t.lm_head.weight.detach()
    start = build_drafter(t.args, cfg, emb, head, first.d2t)
    head = head.to(resolve_dtype(cfg.dtype))        # the head dtype train() evaluates with on this machine
    saved = first.state_dict()
    assert all(torch.equal(v, saved[k]) for k, v in start.state_dict().items())
    # Metrics match to rounding only: some CPUs (AMD EPYC, torch 2.13) pick a kernel by the weights'
    # requires_grad, which train() leaves off on the drafter it returns and on while it trains.
    before = evaluate(TTT(first, emb, head, cfg), samples)
    assert evaluate(TTT(start, emb, head, cfg), samples) == pytest.approx(before, abs=1e-3)
    second, st2 = train(samples, t, tmp_path / "b", cfg, **quiet)
    assert st2["eval_start"] == pytest.approx(before, abs=1e-3)     # the starting point, on the same split
    assert torch.equal(second.d2t, first.d2t)
    assert st2["eval"]["loss0"] < st1["eval"]["loss0"]
    with pytest.raises(ValueError, match="rank differ"):
        build_drafter(t.args, tiny_cfg(vocab=64, rank=8, init_from=str(tmp_path / "first")), emb, head, first.d2t)



def test_a_wider_mlp_grown_from_a_trained_drafter_starts_with_its_predictions(data, tmp_path):
    t, samples = data
    first, _ = train(samples, t, tmp_path / "a", tiny_cfg(steps=6, vocab=64), log=lambda m: None, progress=False,
                     resume=False)
    first.save(tmp_path / "first", dtype=None)
    emb, head = t.embed.weight.detach(), t.lm_head.weight.detach()
    wide_cfg = tiny_cfg(vocab=64, mlp_width=3 * t.args.intermediate, init_from=str(tmp_path / "first"))
    wide = build_drafter(t.args, wide_cfg, emb, head, first.d2t)
    assert wide.down.weight.shape[1] == 3 * t.args.intermediate
    before = evaluate(TTT(first, emb, head, wide_cfg), samples)
    grown = evaluate(TTT(wide, emb, head, wide_cfg), samples)
    assert grown == pytest.approx(before, abs=2e-4)          # metrics are rounded to 1e-4: one step either way
    with pytest.raises(ValueError, match="intermediate_size differ"):        # narrower than the saved one
        build_drafter(t.args, tiny_cfg(vocab=64, mlp_width=t.args.intermediate // 2,
                                       init_from=str(tmp_path / "first")), emb, head, first.d2t)

# -- data ---------------------------------------------------------------------------------------------------
def test_training_and_its_data_use_bf16_only_where_the_cpu_has_it():
    """Emulated bf16 matmuls are several times slower than fp32 on an AVX2-only CPU: "auto" picks fp32 there."""
    from reference_eagle4.device import auto_dtype

    assert auto_dtype("flags\t: fpu sse avx2 fma avx512f") == "float32"
    assert auto_dtype("flags\t: fpu avx512f avx512_bf16") == "bfloat16"
    assert auto_dtype("flags\t: fpu amx_bf16 amx_tile") == "bfloat16"
    assert TrainConfig().dtype == "auto"


def test_seeded_order_keeps_the_creative_share():
    rows = [{"id": f"c{i}", "category": "text-to-image"} for i in range(30)] + \
           [{"id": f"g{i}", "category": "code"} for i in range(10)]
    order = regen.ordered(rows, seed=1)
    assert sorted(r["id"] for r in order) == sorted(r["id"] for r in rows)
    head = order[:20]
    assert 12 <= sum(r["category"] == "text-to-image" for r in head) <= 17
    assert regen.ordered(rows, seed=1) == order


def test_done_ids_skips_a_cut_line(tmp_path):
    p = tmp_path / "r.jsonl"
    p.write_text('{"id": "a", "output_ids": [1]}\n{"id": "b", "outp')
    assert regen.done_ids(p) == {"a"}


def _norm(text: str) -> str:
    return re.sub(r"\s+", " ", text.lower()).strip()


@pytest.mark.skipif(not (ROOT / "data" / "train-pool.jsonl").exists(), reason="no training pool yet")
def test_training_pool_is_disjoint_from_benchmarks():
    pool = [_norm(r["prompt"]) for r in regen.load_pool(ROOT / "data" / "train-pool.jsonl")]
    bench = []
    for name in ("prompt-enhancement.jsonl", "fireworks.jsonl"):
        for line in (ROOT / "data" / name).read_text(encoding="utf-8").splitlines():
            if line.strip():
                bench.append(_norm(json.loads(line)["prompt"]))
    bench_set = set(bench)
    assert not bench_set & set(pool)
    long_bench = [b for b in bench if len(b) >= 40]
    for p in pool:
        if len(p) >= 40:
            assert not any(p in b or b in p for b in long_bench), p


def test_distilling_the_low_rank_head_raises_its_recall_of_the_full_heads_argmax(data, tmp_path):
    from reference_eagle4.training.lowrank import distil, load_ttt, recall, states

    t, samples = data
    d, _ = train(samples, t, tmp_path, tiny_cfg(steps=2, rank=2, topk_candidates=4), resume=False,
                 log=lambda m: None, progress=False)
    d.save(tmp_path / "drafter")
    ttt = load_ttt(tmp_path / "drafter", t)
    hn, step, tgt = states(ttt, samples)
    assert len(hn) == len(step) == len(tgt) and int(step.max()) == ttt.cfg.ttt_steps - 1
    before = recall(ttt, hn, tgt, [4, 256])
    assert before["full@256"] == 1.0 and before["target@256"] == 1.0      # K = the whole vocabulary
    distil(ttt, hn, steps=150, batch=128, lr=2e-2, log=lambda m: None)
    after = recall(ttt, hn, tgt, [4])
    assert after["full@4"] > before["full@4"] + 0.1
