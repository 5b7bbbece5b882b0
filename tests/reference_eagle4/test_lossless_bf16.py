"""Greedy decoding in bf16, what `--dtype auto` picks on a CPU with AMX or AVX512-BF16, equals vanilla decoding
token for token for every method at C = 1 and C = 8, and so does every per-token entropy.

In bf16 a batched verification forward that rounds differently from a one-token forward flips near-ties, so
speculative output drifts from vanilla's; the engine computes each verified token exactly as vanilla decoding
does (reference_eagle4/README.md, "Exact verification in bf16"), so here nothing may differ, not even the
entropies, which the engine computes from the same logits rows. Each method must also accept drafts: a method
that never drafts proves nothing.

The fast tests use the bigram target (tests/reference_eagle4/eagle4_helpers.py) with hand-set drafters it
accepts; `-m slow` runs the real default target with the shipped drafters.
"""

from __future__ import annotations

import sys
from pathlib import Path
import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
from eagle4_helpers import bigram_drafter, bigram_target, one_thread  # noqa: E402,F401
from lossless_helpers import FLAT_TABLE, bigram_proposers, one_thread_module, steady_clock  # noqa: E402,F401
from test_smollm2 import setup  # noqa: E402,F401  (the real target's folder, tokenizer and prompts: -m slow)

from reference_eagle4.engine import Engine, GenerationConfig, Request, Sequence  # noqa: E402
from reference_eagle4.linears import can_pack, pack_linears  # noqa: E402
from reference_eagle4.proposers import PROPOSERS  # noqa: E402

BF16 = torch.bfloat16
NEW_TOKENS = 48

pytestmark = pytest.mark.skipif(not can_pack(BF16), reason="this CPU has no native bf16 (`--dtype auto` runs fp32)")


def requests() -> list[Request]:
    """Eight prompts of different lengths (a ragged batch at C = 8), some holding a repeated phrase."""
    g = torch.Generator().manual_seed(0)
    out = []
    for i, n in enumerate([5, 31, 12, 47, 3, 18, 9, 26]):
        ids = torch.randint(0, 256, (n,), generator=g).tolist()
        out.append(Request(f"q{i}", ids + ids[: n // 2] if i % 2 else ids))
    return out


def decode(target, proposer, concurrency: int, reqs: list[Request], new_tokens: int = NEW_TOKENS,
           eos: tuple[int, ...] = (), max_len: int = 160) -> dict[str, Sequence]:
    out: dict[str, Sequence] = {}
    Engine(target, proposer, GenerationConfig(new_tokens, eos_ids=eos, concurrency=concurrency), max_len).generate(
        reqs, lambda s: out.__setitem__(s.request.id, s))
    return out


def bf16_bigram():
    """The bigram target in bf16, not yet packed: a proposer sharing its (untied) lm_head binds first."""
    return bigram_target(layer_std=0.05).to(BF16)


def bound_and_packed(proposer):
    """A fresh bf16 bigram target with `proposer` bound to it, its linears then packed (as a run packs them)."""
    target = bf16_bigram()
    proposer.bind(target)
    return pack_linears(target), proposer


@pytest.fixture(scope="module")
def fp32_bigram():
    return bigram_target(layer_std=0.05)


@pytest.fixture(scope="module")
def datastore(fp32_bigram, tmp_path_factory) -> str:
    """A datastore of the target's greedy answers to other prompts (the bigram target's runs recur across
    prompts, so it drafts what the context has not shown yet)."""
    from reference_eagle4.datastore import Datastore

    g = torch.Generator().manual_seed(1)
    reqs = [Request(f"d{i}", torch.randint(0, 256, (6,), generator=g).tolist()) for i in range(24)]
    answers = [s.output for s in decode(fp32_bigram, PROPOSERS["vanilla"](budget=1), 8, reqs).values()]
    folder = tmp_path_factory.mktemp("datastore") / "ds"
    Datastore.from_responses(answers, vocab_size=256).save(folder, {})
    return str(folder)


@pytest.fixture(scope="module")
def vanilla() -> dict[str, Sequence]:
    target = pack_linears(bf16_bigram())
    assert target.exact_attention == "kernel", "exact attention kernel not built: bf16 equality is not tested"
    return decode(target, PROPOSERS["vanilla"](budget=1), 1, requests())


METHODS = ["vanilla", "ngram", "ngram-trie", "eagle4-chain", "eagle4-tree", "eagle4-harness",
           "eagle4-harness-lookup", "eagle4-harness-datastore", "dflash", "dspark"]


def assert_equal_to_vanilla(got: dict[str, Sequence], vanilla: dict[str, Sequence], label: str) -> None:
    for qid, base in vanilla.items():
        assert got[qid].output == base.output, f"{label}, {qid}: output differs from vanilla's"
        assert got[qid].entropies == base.entropies, f"{label}, {qid}: entropies differ from vanilla's"


@pytest.mark.parametrize("concurrency", [1, 8])
@pytest.mark.parametrize("method", METHODS)
def test_bf16_greedy_output_and_entropies_equal_vanilla(fp32_bigram, datastore, vanilla, steady_clock, method,
                                                        concurrency):
    if method == "vanilla" and concurrency == 1:
        pytest.skip("the baseline itself")
    target, proposer = bound_and_packed(bigram_proposers(fp32_bigram, datastore)[method]())
    got = decode(target, proposer, concurrency, requests())
    assert_equal_to_vanilla(got, vanilla, f"{method} C={concurrency}")
    steps = [st for s in got.values() for st in s.steps]
    if method != "vanilla":
        accepted = sum(st["accepted"] for st in steps) / len(steps)
        assert accepted > 0.3, f"{method}: {accepted:.2f} drafts accepted per step"
    if method == "eagle4-harness-lookup":
        assert any(st["levels"] == 0 and st["accepted"] > 0 for st in steps), "no step verified lookup drafts alone"


def test_bf16_equality_holds_with_eos_and_a_prefix_cache_hit(fp32_bigram, steady_clock):
    """A stop token that ends sequences mid-step, and prompts sharing a prefix (the second prefills after the
    cached part only): the tree-verified sequences still match vanilla's token for token."""
    base = requests()
    reqs = [base[3], Request("shared", base[3].prompt_ids[:30] + [7, 8, 9]), *base[:3]]
    van = decode(pack_linears(bf16_bigram()), PROPOSERS["vanilla"](budget=1), 1, reqs)
    eos = van["q0"].output[20]
    van = decode(pack_linears(bf16_bigram()), PROPOSERS["vanilla"](budget=1), 1, reqs, eos=(eos,))
    for C in (1, 8):
        target, proposer = bound_and_packed(PROPOSERS["eagle4-tree"](budget=8, drafter=bigram_drafter(fp32_bigram)))
        got = decode(target, proposer, C, reqs, eos=(eos,))
        assert_equal_to_vanilla(got, van, f"eagle4-tree C={C}")
        assert got["q0"].output[-1] == eos and len(got["q0"].output) <= 21
        assert got["shared"].cached_tokens == 30


def test_the_comparison_sees_a_verifier_that_is_not_exact(fp32_bigram, vanilla, steady_clock, monkeypatch):
    """The same comparison with verification on the fastest kernels (SDPA, linears that round by row count, as
    a prompt's prefill runs): the batched steps no longer reproduce one-token decoding, and the comparison
    says so."""
    from reference_eagle4.model import Transformer

    target, proposer = bound_and_packed(bigram_proposers(fp32_bigram, "off")["eagle4-tree"]())
    monkeypatch.setattr(target, "verify", lambda tokens, cache, tree=None, capture=(): Transformer.forward(
        target, tokens, cache, tree, capture=capture, exact=False))
    with pytest.raises(AssertionError, match="differs? from vanilla's"):
        assert_equal_to_vanilla(decode(target, proposer, 8, requests()), vanilla, "inexact eagle4-tree C=8")


# -- the real default target (make test-slow) ------------------------------------------------------------

SLOW_PROMPTS, SLOW_TOKENS = 12, 96


@pytest.fixture(scope="module")
def smollm2(setup):
    """SmolLM2-135M-Instruct in bf16, packed as a run packs it, with test_smollm2's chat-templated prompts and
    the tokenizer's EOS."""
    from reference_eagle4.model import load_transformer
    from reference_eagle4.weights import eos_ids

    folder, tok, reqs, _ = setup
    model = pack_linears(load_transformer(folder, BF16))
    assert model.exact_attention == "kernel"
    return model, reqs[:SLOW_PROMPTS], tuple(eos_ids(folder, tok))


@pytest.fixture(scope="module")
def smollm2_vanilla(smollm2):
    model, reqs, eos = smollm2
    return decode(model, PROPOSERS["vanilla"](budget=1), 1, reqs, SLOW_TOKENS, eos, max_len=1024)


SHIPPED = {
    "ngram": lambda: PROPOSERS["ngram"](budget=8),
    "eagle4-chain": lambda: PROPOSERS["eagle4-chain"](budget=8),
    "eagle4-tree": lambda: PROPOSERS["eagle4-tree"](budget=16),
    "eagle4-harness": lambda: PROPOSERS["eagle4-harness"](budget=16, table=FLAT_TABLE),
    "dflash": lambda: PROPOSERS["dflash"](budget=8),
    "dspark": lambda: PROPOSERS["dspark"](budget=8, table=FLAT_TABLE),
}


@pytest.mark.slow
@pytest.mark.parametrize("concurrency", [1, 8])
@pytest.mark.parametrize("method", list(SHIPPED))
def test_real_target_bf16_greedy_equals_vanilla(smollm2, smollm2_vanilla, steady_clock, method, concurrency):
    """The shipped drafters on the real target in bf16: the same tokens and entropies as vanilla's."""
    model, reqs, eos = smollm2
    got = decode(model, SHIPPED[method](), concurrency, reqs, SLOW_TOKENS, eos, max_len=1024)
    assert_equal_to_vanilla(got, smollm2_vanilla, f"{method} C={concurrency}")
    assert sum(st["accepted"] for s in got.values() for st in s.steps) > 0, f"{method}: no draft accepted"
