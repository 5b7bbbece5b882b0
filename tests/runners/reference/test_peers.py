"""`specbench peers`: the reference engine and transformers decode the same tokens, timed side by side."""

from specbench.runners.reference.peers import bench_transformers
from specbench.settings import Job


def test_reference_and_transformers_agree_in_fp32(tiny_target):
    # chat and stem: short prompts that fit the tiny target's 1024-token context (HumanEval code stubs do not)
    ours, theirs, same = bench_transformers(Job("fireworks", ["chat", "stem"], 3, str(tiny_target), "float32"), 12)
    assert same == 1.0
    assert ours.tokens == theirs.tokens > 0
    assert ours.tok_s > 0 and theirs.tok_s > 0
