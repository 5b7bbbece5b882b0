"""DFlash / DSpark on a tiny random target: lossless through the engine, the run-time context cache equals
the training forward, DSpark's verified length follows confidence and the cost table, training lowers
the loss, checkpoints round-trip."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
from eagle4_helpers import bigram_target, one_thread  # noqa: E402,F401
from lossless_helpers import steady_clock  # noqa: E402,F401

from reference_eagle4.calibration import CostTable  # noqa: E402
from reference_eagle4.drafters.dflash_model import DFlashConfig, DFlashDrafter, load_dflash  # noqa: E402
from reference_eagle4.engine import Engine, GenerationConfig, Request, Sequence  # noqa: E402
from reference_eagle4.proposers import PROPOSERS  # noqa: E402
from reference_eagle4.training.block import BlockObjective  # noqa: E402
from reference_eagle4.training.features import teacher_pass  # noqa: E402
from reference_eagle4.training.train import HeadSoftCE, TrainConfig, train  # noqa: E402


def table(steep_at_8: float = 20.0) -> CostTable:
    """Verification 1 ms + 0.1 ms per token at batch 1; at batch 8, `steep_at_8` ms per extra token."""
    toks = [1, 16]
    return CostTable({"device": "test"}, [1, 8], [64, 512], toks,
                     [[[1.0, 2.5], [1.0, 2.5]], [[2.0, 2.0 + 15 * steep_at_8], [2.0, 2.0 + 15 * steep_at_8]]])


def drafter(target, markov_rank: int = 0, block: int = 8, seed: int = 0) -> DFlashDrafter:
    torch.manual_seed(seed)
    d = DFlashDrafter(DFlashConfig.for_target(target.args, markov_rank=markov_rank, block_size=block))
    d.reset_parameters(std=0.1)
    return d.eval()


@pytest.fixture(scope="module")
def target():
    return bigram_target(layer_std=0.05)


@pytest.fixture(scope="module")
def requests():
    g = torch.Generator().manual_seed(0)
    return [Request(f"r{i}", torch.randint(0, 256, (int(n),), generator=g).tolist())
            for i, n in enumerate(torch.randint(3, 30, (7,), generator=g))]


def generate(target, proposer, reqs, C: int, new: int = 40) -> dict[str, Sequence]:
    out: dict[str, Sequence] = {}
    Engine(target, proposer, GenerationConfig(max_new_tokens=new, concurrency=C), 128).generate(
        reqs, lambda s: out.__setitem__(s.request.id, s))
    return out


@pytest.mark.parametrize("method", ["dflash", "dspark"])
@pytest.mark.parametrize("C", [1, 3])
def test_greedy_output_equals_vanilla(target, requests, method, C):
    van = generate(target, PROPOSERS["vanilla"](budget=1), requests, C)
    kw = {"table": table()} if method == "dspark" else {}
    got = generate(target, PROPOSERS[method](budget=8, drafter=drafter(target, 8 if method == "dspark" else 0),
                                             **kw), requests, C)
    assert {k: s.output for k, s in got.items()} == {k: s.output for k, s in van.items()}
    assert max(st["drafted"] for s in got.values() for st in s.steps) > 0


def test_budget_above_block_is_refused(target):
    with pytest.raises(ValueError, match="block size 8"):
        PROPOSERS["dflash"](budget=9, drafter=drafter(target))


def test_incremental_context_cache_equals_training_forward(target, requests):
    """The proposer's cached context (prompt, then accepted rows appended step by step, slots moved)
    gives the same block outputs as the trainer's one-shot forward at that root."""
    d = drafter(target, markov_rank=8)
    seq_ids = requests[0].prompt_ids + requests[1].prompt_ids + requests[2].prompt_ids
    s = teacher_pass(target, [{"id": "x", "category": "chat", "prompt_ids": seq_ids[:5], "output_ids": seq_ids[5:]}],
                     tuple(target.args.eagle_layers), topk=4, log=lambda m: None)[0]
    root = len(seq_ids) - 3
    ref = BlockObjective(d.attach(target.embed.weight, target.lm_head.weight), target.embed.weight,
                         target.lm_head.weight, TrainConfig()).block_hidden(s, torch.tensor([root]))[0]
    prop = PROPOSERS["dspark"](budget=8, drafter=d, table=table())
    prop.bind(target)
    feats = s["feats"].float()
    rows = lambda a, b: [feats[a:b, i] for i in range(3)]  # noqa: E731
    seq = Sequence(Request("x", seq_ids[:5]), slot=2, generator=None, tokens=list(seq_ids[:6]))
    prop.begin(seq, rows(0, 5))
    pos = 5
    for n in (3, 1, 4, 2, root - 15):               # accepted paths (root + drafts) as steps would keep them
        prop._extend_context([seq])                 # what each step's propose does first
        if pos == 9:
            prop.moved(seq, 2, 0)                   # the engine compacted the slots
            seq.slot = 0
        prop.accepted(seq, list(range(n)), rows(pos, pos + n))
        pos += n
        seq.tokens = list(seq_ids[: pos + 1])
    assert pos == root
    got = prop._backbone([seq])[0]
    assert torch.allclose(got.float(), ref.float(), atol=1e-4)


def test_dspark_verified_length_follows_confidence_and_batch(target, requests, steady_clock):
    d = drafter(target, markov_rank=8)
    with torch.no_grad():
        d.confidence.weight.zero_()
        d.confidence.bias.fill_(3.0)                # every draft predicted ~95% likely
    sure = generate(target, PROPOSERS["dspark"](budget=8, drafter=d, table=table()), requests[:1], 1)
    one = [st["planned"] for st in sure["r0"].steps]
    assert min(one) == 7 and sure["r0"].steps[0]["pred_accept"] > 4.0
    # the same drafter at batch 8 with verification steep in tokens (far above the drafting time, which enters
    # every option alike): short chains. Eight requests, first steps: all taken at batch 8.
    eight_reqs = [Request(f"{r.id}-{i}", r.prompt_ids) for i in range(2) for r in requests[:4]]
    many = generate(target, PROPOSERS["dspark"](budget=8, drafter=d, table=table(steep_at_8=2000.0)),
                    eight_reqs, 8)
    eight = [st["planned"] for s in many.values() for st in s.steps[:3]]
    assert max(eight) < 7
    with torch.no_grad():
        d.confidence.bias.fill_(-4.0)               # ~2%: not worth verifying anything at batch 1 either
    unsure = generate(target, PROPOSERS["dspark"](budget=8, drafter=d, table=table()), requests[:1], 1)
    assert max(st["planned"] for st in unsure["r0"].steps) <= 1


def test_markov_factor_gets_its_gradient_through_the_fused_loss():
    g = torch.Generator().manual_seed(0)
    hn = torch.randn(6, 10, generator=g, requires_grad=True)
    M = torch.randn(30, 4, generator=g, requires_grad=True)
    W0 = torch.randn(30, 6, generator=g)
    tp = torch.rand(6, 3, generator=g)
    tp = tp / tp.sum(-1, keepdim=True)
    ti = torch.randint(0, 30, (6, 3), generator=g)
    W = torch.cat([W0, M], 1)
    loss, _ = HeadSoftCE.apply(hn, W, tp, ti)
    g_hn, g_m = torch.autograd.grad(loss.sum(), (hn, M))
    z = hn @ W.T
    ref = z.logsumexp(-1) - (z.gather(1, ti) * tp).sum(-1)
    r_hn, r_m = torch.autograd.grad(ref.sum(), (hn, M))
    assert torch.allclose(g_hn, r_hn, atol=1e-4) and torch.allclose(g_m, r_m, atol=1e-4)


@pytest.fixture(scope="module")
def samples(target):
    g = torch.Generator().manual_seed(1)
    reqs = [Request(f"s{i:02d}", torch.randint(0, 256, (int(n),), generator=g).tolist())
            for i, n in enumerate(torch.randint(4, 24, (10,), generator=g))]
    seqs = generate(target, PROPOSERS["vanilla"](budget=1), reqs, 4, new=40)
    rows = [{"id": k, "category": "chat", "prompt_ids": s.request.prompt_ids, "output_ids": s.output}
            for k, s in seqs.items()]
    return sorted(teacher_pass(target, rows, tuple(target.args.eagle_layers), topk=8, log=lambda m: None),
                  key=lambda s: s["id"])


@pytest.mark.parametrize("kind", ["dflash", "dspark"])
def test_training_improves_drafts_and_exports(target, samples, kind, tmp_path):
    cfg = TrainConfig(steps=40, lr=3e-3, accum=2, eval_frac=0.0, ckpt_every_s=1e9, block_size=8, layers=1,
                      anchors=8, markov_rank=8, init_std=0.05, vocab=128)
    short = TrainConfig(**{**cfg.__dict__, "steps": 1})
    _, before = train(samples, target, tmp_path / "a", short, resume=False, log=lambda m: None, progress=False,
                      kind=kind)
    d, state = train(samples, target, tmp_path / "b", cfg, resume=False, log=lambda m: None, progress=False,
                     kind=kind)
    assert state["eval"]["loss"] < before["eval"]["loss"] - 0.3
    assert state["eval"]["acc1"] > before["eval"]["acc1"]
    assert (kind == "dspark") == ("conf_bce" in state["eval"])
    d.save(tmp_path / "export", torch.float32)
    e = load_dflash(tmp_path / "export")
    assert e.cfg == d.cfg and torch.equal(e.d2t, d.d2t)
    for (n, a), (_, b) in zip(d.state_dict().items(), e.state_dict().items()):
        assert torch.equal(a, b), n
    # the trained drafter drafts through the engine, losslessly
    reqs = [Request(s["id"], s["tokens"][: s["prompt_len"]].tolist()) for s in samples[:3]]
    kw = {"table": table()} if kind == "dspark" else {}
    got = generate(target, PROPOSERS[kind](budget=8, drafter=e, **kw), reqs, 2, new=30)
    van = generate(target, PROPOSERS["vanilla"](budget=1), reqs, 2, new=30)
    assert {k: s.output for k, s in got.items()} == {k: s.output for k, s in van.items()}
    assert sum(st["accepted"] for s in got.values() for st in s.steps) > 0


def test_loading_an_eagle_checkpoint_as_dflash_names_the_problem(tmp_path):
    (tmp_path / "config.json").write_text('{"model_type": "eagle4"}')
    with pytest.raises(ValueError, match="holds an EAGLE-4 drafter, which eagle4-chain, .* loads, not dflash"):
        load_dflash(tmp_path)


def test_dspark_starts_from_a_trained_dflash_backbone(target, samples, tmp_path):
    from reference_eagle4.training.block import build_block_drafter
    from reference_eagle4.training.train import draft_vocab

    cfg = TrainConfig(steps=3, eval_frac=0.0, ckpt_every_s=1e9, block_size=8, layers=1, anchors=4, vocab=128,
                      markov_rank=8)
    flash, _ = train(samples, target, tmp_path / "f", cfg, resume=False, log=lambda m: None, progress=False,
                     kind="dflash")
    flash.save(tmp_path / "flash", torch.float32)
    emb, head = target.embed.weight, target.lm_head.weight
    vocab = draft_vocab(samples, 128, target.args.vocab_size)
    spark = build_block_drafter(target.args, TrainConfig(**{**cfg.__dict__, "init_from": str(tmp_path / "flash")}),
                                "dspark", emb, head, vocab)
    assert spark.is_dspark
    got = spark.state_dict()
    for name, t in flash.state_dict().items():
        assert torch.equal(got[name], t), name
    assert not spark.markov_m.weight.any()                     # the new heads start fresh
    with pytest.raises(ValueError, match="draft vocabulary differs"):
        build_block_drafter(target.args, TrainConfig(**{**cfg.__dict__, "init_from": str(tmp_path / "flash")}),
                            "dspark", emb, head, vocab.flip(0))


def test_held_out_evaluation_scores_the_same_anchors_every_time(target, samples):
    """Two evaluations of one drafter agree exactly (so before/after figures are paired), and evaluating does not
    move the training run's random stream."""
    from reference_eagle4.training.block import build_block_drafter
    from reference_eagle4.training.train import evaluate

    cfg = TrainConfig(block_size=8, layers=1, anchors=2, vocab=None)
    emb, head = target.embed.weight.detach(), target.lm_head.weight.detach()
    obj = BlockObjective(build_block_drafter(target.args, cfg, "dflash", emb, head), emb, head, cfg)
    state = torch.get_rng_state()
    first = evaluate(obj, samples)
    assert torch.equal(torch.get_rng_state(), state)
    torch.manual_seed(123)
    assert evaluate(obj, samples) == first


def test_continued_block_training_keeps_the_drafters_vocabulary(target, samples, tmp_path):
    """Continuing a shipped drafter on other data keeps its draft vocabulary (the new data's would differ)."""
    from reference_eagle4.training.train import draft_vocab

    cfg = TrainConfig(steps=2, eval_frac=0.0, ckpt_every_s=1e9, block_size=8, layers=1, anchors=4, vocab=128)
    flash, _ = train(samples, target, tmp_path / "f", cfg, resume=False, log=lambda m: None, progress=False,
                     kind="dflash")
    flash.save(tmp_path / "flash", torch.float32)
    other = samples[:1]
    assert not torch.equal(draft_vocab(other, 128, target.args.vocab_size), flash.d2t)
    cont = TrainConfig(**{**cfg.__dict__, "init_from": str(tmp_path / "flash")})
    again, _ = train(other, target, tmp_path / "g", cont, resume=False, log=lambda m: None, progress=False,
                     kind="dflash")
    assert torch.equal(again.d2t, flash.d2t)


@pytest.mark.parametrize("method", ["dflash", "dspark"])
def test_runs_in_bfloat16(target, requests, method):
    """The shipped configuration: a bf16 target; the drafter is cast to it when the engine binds it."""
    t16 = bigram_target(layer_std=0.05).to(torch.bfloat16)
    kw = {"table": table()} if method == "dspark" else {}
    got = generate(t16, PROPOSERS[method](budget=8, drafter=drafter(target, 8 if method == "dspark" else 0), **kw),
                   requests[:3], 2, new=12)
    assert all(len(s.output) == 12 and s.steps for s in got.values())
