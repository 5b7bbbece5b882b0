"""EAGLE-4 drafter and proposers on tiny random-weight models: shapes, sliding window, low-rank head,
EAGLE-3 checkpoints, train/inference consistency, and losslessness through the engine."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
from eagle4_helpers import bigram_drafter, bigram_target, one_thread, tiny_drafter, tiny_target  # noqa: E402,F401

from reference_eagle4.drafters.eagle4_model import Eagle4Config, Eagle4Drafter, load_drafter  # noqa: E402
from reference_eagle4.engine import Engine, GenerationConfig, Request  # noqa: E402
from reference_eagle4.proposers import PROPOSERS  # noqa: E402
from reference_eagle4.proposers.eagle4 import Eagle4Proposer  # noqa: E402
from reference_eagle4.training.train import TTT, TrainConfig  # noqa: E402


@pytest.fixture(scope="module")
def target():
    return tiny_target()


def fake_seq(tokens: list[int], slot: int = 0) -> SimpleNamespace:
    return SimpleNamespace(tokens=list(tokens), slot=slot, state=None)


def prefill_hidden(target, tokens: list[int], capture) -> list[torch.Tensor]:
    cache = target.new_cache(1, len(tokens) + 4)
    with torch.inference_mode():
        _, hidden = target(torch.tensor([tokens]), cache, capture=capture)
    return [h[0] for h in hidden]


# -- the drafter itself ------------------------------------------------------------------------------------
def test_shapes_and_topk(target):
    d = tiny_drafter(target).attach(target.embed.weight, target.lm_head.weight)
    c = d.cfg
    assert d.fc.weight.shape == (c.hidden_size, 3 * c.target_hidden_size)
    assert d.qkv.weight.shape == ((c.num_attention_heads + 2 * c.num_key_value_heads) * c.head_dim,
                                  2 * c.hidden_size)
    feats = torch.randn(2, 5, 3 * c.target_hidden_size)
    tok = torch.randint(0, c.vocab_size, (2, 5))
    h, x = d.inputs(feats, tok, fuse=True)
    assert h.shape == (2, 5, c.hidden_size) and x.shape == (2, 5, 2 * c.hidden_size)
    q, k, v = d.project(x, torch.arange(5).expand(2, 5))
    assert q.shape == (2, c.num_attention_heads, 5, c.head_dim)
    assert k.shape == v.shape == (2, c.num_key_value_heads, 5, c.head_dim)
    attn = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    out = d.finish(h, attn.transpose(1, 2).flatten(2))
    assert out.shape == (2, 5, c.hidden_size)
    logp, ids = d.topk(out.reshape(10, -1), 4)
    assert logp.shape == ids.shape == (10, 4)
    assert (logp <= 0).all() and (logp[:, :-1] >= logp[:, 1:]).all()
    assert "embed" not in " ".join(d.export_state())          # the target's tensors are never saved


def test_lowrank_head_is_exact_at_full_rank(target):
    """r = H: (h A) B equals h W^T, so the low-rank top-K is the full head's top-K with the same logits."""
    d = tiny_drafter(target, rank=target.args.dim, topk_candidates=16).attach(
        target.embed.weight, target.lm_head.weight)
    h = torch.randn(32, target.args.dim) * 3
    hn = d.norm(h)
    full = hn @ target.lm_head.weight.T
    assert torch.allclose(d.lowrank_scores(hn), full, atol=1e-4)
    lp_low, id_low = d.topk(h, 8)
    d.set_options(head="full")
    lp_full, id_full = d.topk(h, 8)
    assert torch.equal(id_low, id_full)
    # low-rank probabilities are renormalised over the K candidates: same ranking, larger values
    ref = full.log_softmax(-1).gather(1, id_full)
    assert torch.allclose(lp_full, ref, atol=1e-5)
    assert (lp_low >= lp_full - 1e-5).all()


def test_lowrank_svd_rank_r_is_best_approximation(target):
    d = tiny_drafter(target, rank=8).attach(target.embed.weight, target.lm_head.weight)
    W = target.lm_head.weight
    approx = d.lr_b.weight @ d.lr_a.weight                 # [V, H] = (A B)^T
    s = torch.linalg.svdvals(W)
    assert torch.linalg.matrix_norm(W - approx).item() == pytest.approx(s[8:].norm().item(), rel=1e-3)


def test_sliding_window_hides_old_tokens(target):
    """With W = 4 the last pair's output ignores pairs more than 3 positions back, at inference (ring
    buffer, after a wrap) and in the training forward (TTT step 0)."""
    W, P, H = 4, 14, target.args.dim
    g = torch.Generator().manual_seed(3)
    feats = torch.randn(P, 3 * H, generator=g)
    tokens = torch.randint(0, 256, (P + 1,), generator=g).tolist()     # pair i = (feats[i], tokens[i + 1])

    def last_hidden(f, toks, window):
        dd = tiny_drafter(target, window=window)
        p = Eagle4Proposer(budget=2, drafter=dd, target=target, int8=False)    # training's weights
        seq = fake_seq(toks)
        p.begin(seq, list(f.split(H, dim=-1)))
        with torch.inference_mode():
            inference = p.catch_up([seq])[0]
        train_d = tiny_drafter(target, window=window).attach(target.embed.weight, target.lm_head.weight)
        ttt = TTT(train_d, target.embed.weight, target.lm_head.weight, TrainConfig(ttt_steps=1, window=window))
        with torch.no_grad():
            _, _, out = next(ttt.unroll(f, torch.tensor(toks), P - 1, P))
        assert torch.allclose(out[0], inference, atol=1e-4)          # train and inference agree
        return inference

    ref = last_hidden(feats, tokens, W)
    far_f, far_t = feats.clone(), list(tokens)
    far_f[2] += 1.0
    far_t[3] = (far_t[3] + 1) % 256                  # pair 2: 11 positions before the last pair
    assert torch.allclose(last_hidden(far_f, far_t, W), ref, atol=1e-5)
    near_f = feats.clone()
    near_f[P - 3] += 1.0                             # pair P-3: inside the window
    assert not torch.allclose(last_hidden(near_f, tokens, W), ref, atol=1e-3)
    # full attention (W = None) does see the far pair
    assert not torch.allclose(last_hidden(far_f, far_t, None), last_hidden(feats, tokens, None), atol=1e-3)


def test_pairs_left_by_steps_without_drafting_are_caught_up_together(target):
    """A step that verifies retrieval drafts alone (the harness's) leaves its accepted pairs pending; the next
    drafting step's one catch-up must leave the drafter where a catch-up after every step would."""
    H, capture = target.args.dim, target.args.eagle_layers
    g = torch.Generator().manual_seed(4)
    prompt = torch.randint(0, 256, (10,), generator=g).tolist()
    steps = [(torch.randint(0, 256, (n,), generator=g).tolist(), torch.randn(n, 3 * H, generator=g)) for n in (3, 2)]

    def drafter_after(catch_up_every_step: bool):
        p = Eagle4Proposer(budget=4, drafter=tiny_drafter(target, window=6), target=target, int8=False)
        seq = fake_seq(prompt + [7])
        p.begin(seq, prefill_hidden(target, prompt, capture))
        last = None
        with torch.inference_mode():
            for i, (emitted, feats) in enumerate(steps):
                seq.tokens += emitted
                p.accepted(seq, list(range(len(emitted))), list(feats.split(H, dim=-1)))
                if catch_up_every_step or i == len(steps) - 1:
                    last = p.catch_up([seq])
        c = p.cache
        return last, c.k[0], c.v[0], c.pos[0], int(c.next[0])

    each, together = drafter_after(True), drafter_after(False)
    assert each[3].tolist() == together[3].tolist() and each[4] == together[4] == len(prompt) + 5
    for a, b in zip(each[:3], together[:3]):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("window", [5, None])
def test_inference_matches_training_unroll(target, window):
    """The proposer's catch-up + chain drafting computes what TTT step j computes for the same tokens:
    the chain's j-th draft is the argmax of the training unroll at step j (train/inference consistency)."""
    d = tiny_drafter(target, window=window, head="full")
    capture = target.args.eagle_layers
    prompt = torch.randint(0, 256, (12,), generator=torch.Generator().manual_seed(5)).tolist()
    first = 11
    p = PROPOSERS["eagle4-chain"](budget=6, drafter=d, target=target, int8=False)     # training's weights
    seq = fake_seq(prompt + [first])
    hidden = prefill_hidden(target, prompt, capture)
    p.begin(seq, hidden)
    with torch.inference_mode():
        tree = p.propose([seq])[0]
    drafts = tree.tokens[1:]
    assert len(drafts) == 5 and tree.is_chain()

    tokens = torch.tensor(prompt + [first] + drafts)
    feats = torch.cat(hidden, -1)                    # pairs 0..P-1; later rows are never seen by row P-1
    t = len(prompt) - 1
    train_d = tiny_drafter(target, window=window, head="full")          # same seed: same weights as d
    ttt = TTT(train_d.attach(target.embed.weight, target.lm_head.weight), target.embed.weight,
              target.lm_head.weight, TrainConfig(ttt_steps=5, window=window))
    with torch.no_grad():
        got = [int(train_d.full_logits(train_d.norm(g[0])).argmax()) for _, _, g in
               ttt.unroll(feats, tokens, t, t + 1)]
    assert got == drafts


# -- EAGLE-3 checkpoints -------------------------------------------------------------------------------------
def write_eagle3_checkpoint(folder: Path, args, draft_vocab: torch.Tensor, layout: str) -> None:
    """A random EAGLE-3 checkpoint in the SafeAILab (`midlayer.`) or SpecForge (`layers.0.`) layout."""
    from safetensors.torch import save_file

    g = torch.Generator().manual_seed(0)
    H, I, hd = args.dim, args.intermediate, args.head_dim
    nq, nkv = args.n_heads * hd, args.n_kv_heads * hd
    Vd = draft_vocab.numel()
    p = "midlayer." if layout == "safeailab" else "layers.0."
    rnd = lambda *s: torch.randn(*s, generator=g) * 0.1  # noqa: E731
    state = {
        "fc.weight": rnd(H, 3 * H),
        p + "input_layernorm.weight": torch.ones(H), p + "hidden_norm.weight": torch.ones(H),
        p + "self_attn.q_proj.weight": rnd(nq, 2 * H), p + "self_attn.k_proj.weight": rnd(nkv, 2 * H),
        p + "self_attn.v_proj.weight": rnd(nkv, 2 * H), p + "self_attn.o_proj.weight": rnd(H, nq),
        p + "post_attention_layernorm.weight": torch.ones(H),
        p + "mlp.gate_proj.weight": rnd(I, H), p + "mlp.up_proj.weight": rnd(I, H),
        p + "mlp.down_proj.weight": rnd(H, I),
        "norm.weight": torch.ones(H), "lm_head.weight": rnd(Vd, H),
        "d2t": draft_vocab - torch.arange(Vd),                 # offsets: target = i + d2t[i]
        "t2d": torch.zeros(args.vocab_size, dtype=torch.bool).index_fill(0, draft_vocab, True),
    }
    folder.mkdir(parents=True)
    save_file({k: v.contiguous() for k, v in state.items()}, str(folder / "model.safetensors"))
    cfg = {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "hidden_size": H,
           "intermediate_size": I, "num_attention_heads": args.n_heads, "num_key_value_heads": args.n_kv_heads,
           "head_dim": hd, "rms_norm_eps": 1e-6, "rope_theta": args.rope_theta, "vocab_size": args.vocab_size,
           "draft_vocab_size": Vd, "max_position_embeddings": args.max_position,
           "eagle_config": {"eagle_aux_hidden_state_layer_ids": [c - 1 for c in args.eagle_layers]}}
    (folder / "config.json").write_text(json.dumps(cfg))


@pytest.mark.parametrize("layout", ["safeailab", "specforge"])
def test_load_eagle3_checkpoint(tmp_path, target, layout):
    draft_vocab = torch.randperm(256, generator=torch.Generator().manual_seed(1))[:40].sort().values
    write_eagle3_checkpoint(tmp_path / "e3", target.args, draft_vocab, layout)
    d = load_drafter(tmp_path / "e3")
    assert d.cfg.kind == "eagle3" and d.cfg.draft_vocab_size == 40 and d.cfg.own_lm_head
    assert d.cfg.capture_layers == tuple(target.args.eagle_layers)
    assert torch.equal(d.d2t, draft_vocab)
    d.attach(target.embed.weight, target.lm_head.weight)
    h = torch.randn(6, target.args.dim)
    _, ids = d.topk(h, 5)
    assert set(ids.flatten().tolist()) <= set(draft_vocab.tolist())       # target-vocabulary ids via d2t
    # the best token is the argmax of its own lm_head over the draft vocabulary, mapped through d2t
    best = draft_vocab[(d.norm(h) @ d.lm_head.weight.T).argmax(-1)]
    assert torch.equal(ids[:, 0], best)
    # it drives the engine losslessly, with the low-rank head too (SVD of its own lm_head)
    reqs = [Request("a", [1, 2, 3, 4, 5]), Request("b", list(range(20, 31)))]
    base = run_engine(target, PROPOSERS["vanilla"](budget=1), reqs, C=2)
    for head in ("full", "lowrank"):
        p = PROPOSERS["eagle4-tree"](budget=5, drafter=str(tmp_path / "e3"), head=head, rank=16)
        assert run_engine(target, p, reqs, C=2)[0] == base[0]
        assert len(p.config()["drafter_sha256"]) == 64          # recorded in the run manifest


def test_save_and_load_roundtrip(tmp_path, target):
    d = tiny_drafter(target).attach(target.embed.weight, target.lm_head.weight)
    d.save(tmp_path / "d", dtype=None)
    e = load_drafter(tmp_path / "d")
    assert e.cfg == d.cfg and e.lowrank_ready
    for (n1, a), (n2, b) in zip(d.state_dict().items(), e.state_dict().items()):
        assert n1 == n2 and torch.equal(a, b), n1
    from safetensors.torch import load_file
    keys = set(load_file(str(tmp_path / "d" / "model.safetensors")))
    assert "fc.weight" in keys and "midlayer.self_attn.q_proj.weight" in keys and "lowrank.A" in keys
    assert not any("embed" in k or "lm_head" in k for k in keys)


# -- through the engine -------------------------------------------------------------------------------------
def run_engine(target, proposer, reqs, C, max_new=24, sampling=None):
    kw = {} if sampling is None else {"sampling": sampling}
    cfg = GenerationConfig(max_new_tokens=max_new, concurrency=C, **kw)
    eng = Engine(target, proposer, cfg, max_len=160)
    res = {}
    eng.generate(reqs, lambda s: res.__setitem__(s.request.id, s))
    steps = [st for s in res.values() for st in s.steps]
    al = sum(st["emitted"] for st in steps) / max(1, len(steps))
    return {k: s.output for k, s in res.items()}, al, steps


@pytest.fixture(scope="module")
def bigram():
    t = bigram_target()
    g = torch.Generator().manual_seed(0)
    reqs = [Request(f"r{i}", torch.randint(0, 256, (n,), generator=g).tolist())
            for i, n in enumerate([5, 30, 12, 40, 3])]
    return t, reqs, run_engine(t, PROPOSERS["vanilla"](budget=1), reqs, C=1, max_new=40)[0]


@pytest.mark.parametrize("method", ["eagle4-chain", "eagle4-tree"])
@pytest.mark.parametrize("C", [1, 3])
@pytest.mark.parametrize("noise", [0.0, 0.02])
def test_lossless_greedy_through_engine(bigram, method, C, noise):
    """Greedy outputs equal vanilla; the hand-set drafter is accepted often (noise = 0) or sometimes,
    so multi-token catch-ups, partial paths and slot moves are all exercised."""
    t, reqs, base = bigram
    p = PROPOSERS[method](budget=6, drafter=bigram_drafter(t, noise=noise))
    out, al, steps = run_engine(t, p, reqs, C=C, max_new=40)
    assert out == base
    assert al > (3.0 if noise == 0 else 1.2)
    assert all(st["budget"] <= 6 for st in steps)
    if method == "eagle4-tree":
        assert any(st["depth"] < st["drafted"] for st in steps)        # real trees, not chains


@pytest.mark.parametrize("options", [{"window": None}, {"head": "full"}, {"topk_candidates": 4, "rank": 8},
                                     {"top_k": 2, "depth": 3}, {"int8": False}])
def test_ablations_stay_lossless(bigram, options):
    t, reqs, base = bigram
    p = PROPOSERS["eagle4-tree"](budget=8, drafter=bigram_drafter(t, noise=0.01), **options)
    out, al, _ = run_engine(t, p, reqs, C=2, max_new=40)
    assert out == base and al > 1.0
    cfg = p.config()
    assert all(cfg[k] == v for k, v in options.items())


def test_drafter_layer_runs_int8_weights_unless_asked_not_to(bigram):
    """On the CPU a bf16 drafter's layer streams int8 weights by default (`int8=off`: the model dtype's); an
    fp32 one keeps its own, which are faster there."""
    from reference_eagle4.linears import Int8Linear, int8_linear
    t, _, _ = bigram
    if not isinstance(int8_linear(torch.nn.Linear(32, 32, bias=False).bfloat16()), Int8Linear):
        pytest.skip("this torch runs no int8 weights here")
    on = PROPOSERS["eagle4-tree"](budget=4, drafter=bigram_drafter(t, noise=0.0), target=t, dtype="bfloat16")
    off = PROPOSERS["eagle4-tree"](budget=4, drafter=bigram_drafter(t, noise=0.0), target=t, dtype="bfloat16",
                                   int8="off")
    fp32 = PROPOSERS["eagle4-tree"](budget=4, drafter=bigram_drafter(t, noise=0.0), target=t)
    layers = ("fc", "qkv", "o", "gate_up", "down")
    assert all(isinstance(getattr(on.drafter, n), Int8Linear) for n in layers) and on.config()["int8"] is True
    assert not any(isinstance(getattr(off.drafter, n), Int8Linear) for n in layers)
    assert not any(isinstance(getattr(fp32.drafter, n), Int8Linear) for n in layers)
    assert off.config()["int8"] is False and fp32.config()["int8"] is False


def test_tree_is_ancestor_closed_and_budgeted(bigram):
    t, reqs, _ = bigram
    p = PROPOSERS["eagle4-tree"](budget=12, drafter=bigram_drafter(t, noise=0.02), target=t)
    seq = fake_seq(reqs[1].prompt_ids + [9])
    p.begin(seq, prefill_hidden(t, reqs[1].prompt_ids, p.capture))
    with torch.inference_mode():
        tree = p.propose([seq])[0]
    assert len(tree) == 12 and tree.parents[0] == -1
    assert all(0 <= par < i for i, par in enumerate(tree.parents) if i)        # parents first
    assert p.top_k == 8 and p.depth == 8
    assert PROPOSERS["eagle4-tree"](budget=5, drafter=bigram_drafter(t)).depth == 4
    chain = PROPOSERS["eagle4-chain"](budget=12, drafter=bigram_drafter(t), target=t)
    assert chain.top_k == 1 and chain.depth == 11


def test_sampling_runs_lossless_machinery(bigram):
    """With sampling the proposer only changes speed; outputs are reproducible per seed."""
    from reference_eagle4.verify import Sampling
    t, reqs, _ = bigram
    s = Sampling(temperature=0.8)
    a = run_engine(t, PROPOSERS["eagle4-tree"](budget=6, drafter=bigram_drafter(t)), reqs[:3], C=2, sampling=s)
    b = run_engine(t, PROPOSERS["eagle4-tree"](budget=6, drafter=bigram_drafter(t)), reqs[:3], C=2, sampling=s)
    assert a[0] == b[0]


def test_config_json_roundtrip(target):
    c = Eagle4Config.for_target(target.args, window=None, head="full", rank=7)
    assert Eagle4Config.from_json(json.loads(json.dumps(c.to_json()))) == c
    with pytest.raises(ValueError):
        Eagle4Drafter(Eagle4Config.for_target(target.args, head="bogus"))


def test_drafter_level_fn_for_calibration(target):
    from reference_eagle4.proposers.eagle4 import drafter_level_fn
    p = PROPOSERS["eagle4-tree"](budget=8, drafter=tiny_drafter(target), target=target)
    with torch.inference_mode():
        logp, ids = drafter_level_fn(p, batch=2, width=4, context=40)()
    assert logp.shape == ids.shape == (8, 4)
