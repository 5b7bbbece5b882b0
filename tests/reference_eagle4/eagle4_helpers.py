"""Tiny random-weight target + drafter shared by the EAGLE-4 tests."""

from __future__ import annotations

import pytest
import torch

from reference_eagle4.drafters.eagle4_model import Eagle4Config, Eagle4Drafter
from reference_eagle4.model import ModelArgs, Transformer, rope_tables

TINY = ModelArgs(dim=64, n_layers=8, n_heads=4, n_kv_heads=2, head_dim=16, intermediate=128, vocab_size=256,
                 norm_eps=1e-5, rope_theta=10000.0, max_position=512, tie_embeddings=True)


def tiny_target(seed: int = 0, args: ModelArgs = TINY) -> Transformer:
    torch.manual_seed(seed)
    model = Transformer(args)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() >= 2:
                p.normal_(0.0, 0.35 if p is model.embed.weight else 0.08)
    cos, sin = rope_tables(args)
    model.rope_cos, model.rope_sin = cos, sin
    return model.eval().requires_grad_(False)


def tiny_drafter(target: Transformer, seed: int = 1, **overrides) -> Eagle4Drafter:
    cfg = Eagle4Config.for_target(target.args, **{"window": 16, "rank": 16, "topk_candidates": 32, **overrides})
    torch.manual_seed(seed)
    d = Eagle4Drafter(cfg)
    d.reset_parameters(std=0.1)
    return d.eval()


BIGRAM = ModelArgs(dim=64, n_layers=8, n_heads=4, n_kv_heads=2, head_dim=16, intermediate=128, vocab_size=256,
                   norm_eps=1e-6, rope_theta=10000.0, max_position=512, tie_embeddings=False)


def bigram_target(seed: int = 0, layer_std: float = 0.02) -> Transformer:
    """A nearly-bigram target: tiny layer weights, so next token ~ g(current token) through a random lm_head."""
    torch.manual_seed(seed)
    model = Transformer(BIGRAM)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() >= 2:
                p.normal_(0.0, 1.0 if name in ("embed.weight", "lm_head.weight") else layer_std)
    cos, sin = rope_tables(BIGRAM)
    model.rope_cos, model.rope_sin = cos, sin
    return model.eval().requires_grad_(False)


def bigram_drafter(target: Transformer, sharp: float = 4.0, noise: float = 0.0, seed: int = 2,
                   **overrides) -> Eagle4Drafter:
    """A hand-set drafter that predicts g(x_{t+1}) at every depth: q = k = sharp * norm(embed) (each query
    attends to itself), v = norm(embed) - norm(h) so that the residual h + o(v) becomes norm(embed(token)),
    o = identity, fc and MLP zero. Right only if the feature/token pairing and the tree attention are right;
    `noise` perturbs it so that some drafts miss."""
    H = target.args.dim
    cfg = Eagle4Config.for_target(target.args, **{"num_key_value_heads": 4, "window": 32, "rank": 32,
                                                  "topk_candidates": 64, **overrides})
    d = Eagle4Drafter(cfg)
    eye = torch.eye(H)
    zeros = torch.zeros(H, H)
    with torch.no_grad():
        d.fc.weight.zero_()
        block = torch.cat([eye, zeros], 1)                        # pick the embedding half of [emb, h]
        d.qkv.weight.copy_(torch.cat([sharp * block, sharp * block, torch.cat([eye, -eye], 1)], 0))
        d.o.weight.copy_(eye)
        d.gate_up.weight.zero_()
        d.down.weight.zero_()
        if noise:
            g = torch.Generator().manual_seed(seed)
            for lin in (d.qkv, d.o, d.gate_up, d.down):
                lin.weight.add_(noise * torch.randn(lin.weight.shape, generator=g))
    return d.eval()


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny ops run fastest (and least disturbed by other load) on one thread."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)
