"""What the losslessness tests share: drafters every method accepts on the bigram target, an independent twin of
the target (transformers' Llama), the sampling distribution written from its definition, and a drafting clock
that ticks the same on any machine.

The expected distributions here never call the engine's sampling code (`reference_eagle4.verify`): the logits
come from transformers' own Llama forward over the whole sequence, and temperature, top-k and top-p are
applied as their definitions say, in float64.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import pytest
import torch

from eagle4_helpers import bigram_drafter, tiny_drafter
from reference_eagle4.calibration import CostTable
from reference_eagle4.drafters.dflash_model import DFlashConfig, DFlashDrafter
from reference_eagle4.model import Transformer
from reference_eagle4.proposers import PROPOSERS

# Verification costs the same at any size: the cost-aware methods (eagle4-harness, dspark) then verify long
# drafts, which is what a losslessness test wants to exercise.
FLAT_TABLE = CostTable({"device": "synthetic"}, [1, 8], [64, 512], [1, 16],
                       [[[10.0, 10.5], [10.0, 10.5]], [[10.0, 10.5], [10.0, 10.5]]])


def bigram_dflash(target: Transformer, markov: bool = False, block: int = 8) -> DFlashDrafter:
    """A hand-set DFlash (or, with `markov`, DSpark) drafter for `bigram_target`, whose next token is about
    g(current token) = argmax lm_head . norm(embed(token)).

    One layer with zero queries attends uniformly to the context and the block; the context rows are zero
    (fc = 0) and so are the MASK rows' values (the MASK embedding lies along the one direction the value
    projection drops), so every MASK row receives the root token's normed embedding, scaled up by o and
    bounded again by the final norm: row 1 drafts g(root), which the target mostly accepts, and the further
    rows repeat it. The DSpark Markov head adds 10 lm_head . norm(embed(previous draft)) to each row, so
    the whole chain follows g, and its confidence head predicts every draft likely (verify them all)."""
    H = target.args.dim
    cfg = DFlashConfig.for_target(target.args, num_layers=1, num_key_value_heads=target.args.n_heads,
                                  block_size=block, markov_rank=H if markov else 0)
    d = DFlashDrafter(cfg)
    eye = torch.eye(H)
    mask_dir = torch.zeros(H)
    mask_dir[-1] = 1.0
    with torch.no_grad():
        for p in d.parameters():
            p.zero_()
        for name, p in d.named_parameters():
            if name.endswith("norm.weight"):
                p.fill_(1.0)
        d.mask_embedding.copy_(1e-2 * mask_dir)
        layer = d.layers[0]
        values = cfg.num_key_value_heads * cfg.head_dim
        layer.kv.weight[values:].copy_(eye - torch.outer(mask_dir, mask_dir))
        layer.o.weight.copy_(100.0 * eye)
        if markov:
            d.markov_u.weight.copy_(eye)
            d.markov_m.weight.copy_(10.0 * target.lm_head.weight.float())
            d.confidence.bias.fill_(3.0)
    return d.eval()


def bigram_proposers(target: Transformer, datastore: str | None) -> dict[str, Callable[[], Any]]:
    """Every method on `bigram_target` (fp32 weights; a proposer casts its drafter to the dtype it is bound
    to), with drafters and options that make its drafts accepted, budget 8. The harness appears three times:
    with the bigram drafter (and prompt lookup), with a random drafter and prompt lookup (steps that verify
    lookup drafts alone), and with a random drafter and `datastore` (lookup off)."""
    good = lambda: bigram_drafter(target, noise=0.02)  # noqa: E731
    poor = lambda: tiny_drafter(target)  # noqa: E731
    harness = lambda **kw: PROPOSERS["eagle4-harness"](budget=8, table=FLAT_TABLE, **kw)  # noqa: E731
    return {
        "vanilla": lambda: PROPOSERS["vanilla"](budget=1),
        "ngram": lambda: PROPOSERS["ngram"](budget=8),
        "ngram-trie": lambda: PROPOSERS["ngram"](budget=8, matches=3),
        "eagle4-chain": lambda: PROPOSERS["eagle4-chain"](budget=8, drafter=good()),
        "eagle4-tree": lambda: PROPOSERS["eagle4-tree"](budget=8, drafter=good()),
        "eagle4-harness": lambda: harness(drafter=good()),
        "eagle4-harness-lookup": lambda: harness(drafter=poor(), datastore="off"),
        "eagle4-harness-datastore": lambda: harness(drafter=poor(), lookup="off", datastore=datastore),
        "dflash": lambda: PROPOSERS["dflash"](budget=8, drafter=bigram_dflash(target)),
        "dspark": lambda: PROPOSERS["dspark"](budget=8, drafter=bigram_dflash(target, markov=True), table=FLAT_TABLE),
    }


def hf_twin(target: Transformer):
    """transformers' LlamaForCausalLM holding `target`'s weights (fp32): an implementation of the same model
    that shares no code with the engine."""
    from transformers import LlamaConfig, LlamaForCausalLM

    a = target.args
    cfg = LlamaConfig(vocab_size=a.vocab_size, hidden_size=a.dim, intermediate_size=a.intermediate,
                      num_hidden_layers=a.n_layers, num_attention_heads=a.n_heads, num_key_value_heads=a.n_kv_heads,
                      head_dim=a.head_dim, max_position_embeddings=a.max_position, rms_norm_eps=a.norm_eps,
                      rope_theta=a.rope_theta, tie_word_embeddings=a.tie_embeddings)
    cfg._attn_implementation = "eager"
    model = LlamaForCausalLM(cfg)
    ours = {k: v.float() for k, v in target.state_dict().items()}
    q, kv = a.n_heads * a.head_dim, a.n_kv_heads * a.head_dim
    state = {"model.embed_tokens.weight": ours["embed.weight"], "model.norm.weight": ours["norm.weight"],
             "lm_head.weight": ours["embed.weight" if a.tie_embeddings else "lm_head.weight"]}
    for i in range(a.n_layers):
        p, hf = f"layers.{i}.", f"model.layers.{i}."
        wq, wk, wv = ours[p + "qkv.weight"].split([q, kv, kv])
        gate, up = ours[p + "gate_up.weight"].chunk(2)
        state.update({hf + "input_layernorm.weight": ours[p + "attn_norm.weight"],
                      hf + "post_attention_layernorm.weight": ours[p + "mlp_norm.weight"],
                      hf + "self_attn.q_proj.weight": wq, hf + "self_attn.k_proj.weight": wk,
                      hf + "self_attn.v_proj.weight": wv, hf + "self_attn.o_proj.weight": ours[p + "o.weight"],
                      hf + "mlp.gate_proj.weight": gate, hf + "mlp.up_proj.weight": up,
                      hf + "mlp.down_proj.weight": ours[p + "down.weight"]})
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert not unexpected and all("rotary" in m for m in missing), (missing, unexpected)
    return model.eval()


def expected_probs(logits: np.ndarray, temperature: float, top_k: int = 0, top_p: float = 1.0) -> np.ndarray:
    """The sampling distribution over the vocabulary for one row of logits, from the definitions:
    softmax(logits / temperature) restricted to the tokens whose logit is at least the k-th largest (top-k),
    then to the smallest set of most probable tokens whose probability reaches top_p (top-p), renormalised."""
    z = np.asarray(logits, dtype=np.float64) / temperature
    allowed = np.ones(z.shape, dtype=bool)
    if top_k > 0:
        kth_largest = np.sort(z)[::-1][min(top_k, z.size) - 1]
        allowed = z >= kth_largest
    w = np.where(allowed, np.exp(z - z[allowed].max()), 0.0)
    p = w / w.sum()
    if top_p < 1.0:
        nucleus = np.zeros(z.shape, dtype=bool)
        mass = 0.0
        for token in sorted(range(z.size), key=lambda t: (-p[t], t)):
            if mass >= top_p:
                break
            nucleus[token] = True
            mass += p[token]
        p = np.where(nucleus, p, 0.0)
        p = p / p.sum()
    return p


def rank_pit(p: np.ndarray, token: int, v: float) -> float:
    """Randomised probability integral transform of a draw `token` from `p`, tokens ordered most probable
    first: the mass of the tokens ranked before it plus v times its own (v uniform in [0, 1)). Draws from
    `p` give a uniform value; a sampler that favours likely tokens pushes it towards 0."""
    ids = np.arange(p.size)
    ahead = (p > p[token]) | ((p == p[token]) & (ids < token))
    return float(p[ahead].sum() + v * p[token])


@dataclass
class TickingClock:
    """A stand-in for `time` in the drafting loop: every reading is `tick_ms` later than the last, so each
    timed drafter pass lasts `tick_ms` whatever the machine's load."""

    tick_ms: float
    now: float = 0.0

    def perf_counter(self) -> float:
        self.now += self.tick_ms / 1000.0
        return self.now


@pytest.fixture(scope="module", autouse=True)
def one_thread_module():
    """Module fixtures decode too: on one thread, like the tests (`eagle4_helpers.one_thread`), so that other
    load on a small machine does not stall torch's worker threads."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture
def steady_clock(monkeypatch):
    """Drafting times that do not depend on the machine's load: the cost-aware methods (eagle4-harness, dspark)
    size their trees from them, and the same trees every run keep the outputs and samples reproducible."""
    from reference_eagle4.proposers import dflash, eagle4

    monkeypatch.setattr(eagle4, "time", TickingClock(1.0))
    monkeypatch.setattr(dflash, "time", TickingClock(1.0))
