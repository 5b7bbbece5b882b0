"""Compile the Triton kernels for Hopper (sm_90) without a GPU: `python -m reference_eagle4.kernels.sm90`.

Triton's interpreter runs the kernels' logic on CPU, but only a real compile catches what the GPU compiler
rejects, and only the machine code shows register spills and whether the K/V loads are pipelined
(cp.async). Triton's wheel carries ptxas and cuobjdump, so this runs on any Linux machine. The shapes are
the bench's (Llama-3-8B attention, the 128k-vocabulary head), with the specialisations a real launch
gets: unit strides as constants, pointers and other strides divisible by 16. Prints one JSON object per
kernel configuration; exits 1 if any of them spills registers.
"""

import json
import os
import re
import subprocess
import sys
import tempfile

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from reference_eagle4.kernels import lowrank_head_triton as head
from reference_eagle4.kernels import tree_attention_triton as attn

TARGET = GPUTarget("cuda", 90, 32)
CUOBJDUMP = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")

ATTN_PTRS = dict(Q="*bf16", K="*bf16", V="*bf16", O="*bf16", LENS="*i64", BITS="*i64", PART_O="*fp32",
                 PART_LSE="*fp32")
ATTN_ONES = ("sqd", "skd", "svd", "sod")
ATTN_DIV16 = ("sqb", "sqh", "sqt", "skb", "skh", "skn", "svb", "svh", "svn", "sob", "soh", "sot", "HEAD_DIM")
CONFIGS = [  # label, kernel, pointers, constexprs, unit strides, divisible by 16, num_warps
    ("attention G4 T32 split", attn._tree_attn_kernel, ATTN_PTRS,
     dict(G=4, G_PAD=4, BLOCK_T=32, BLOCK_N=attn.BLOCK_N, BLOCK_D=128, SPLIT=True, PREC=None),
     ATTN_ONES, ATTN_DIV16, 8),
    ("attention G1 T16", attn._tree_attn_kernel, ATTN_PTRS,
     dict(G=1, G_PAD=1, BLOCK_T=16, BLOCK_N=attn.BLOCK_N, BLOCK_D=128, SPLIT=False, PREC=None),
     ATTN_ONES, ATTN_DIV16, 4),
    ("attention merge", attn._merge_splits_kernel, dict(PART_O="*fp32", PART_LSE="*fp32", O="*bf16"),
     dict(S_PAD=16, BLOCK_D=128), ("sod",), ("sob", "soh", "sot", "HEAD_DIM"), 4),
    ("head score", head._score_kernel, dict(U="*bf16", Bm="*bf16", S="*fp32", GMAX="*fp32"),
     dict(BLOCK_N=head.BLOCK_N, BLOCK_V=head.BLOCK_V, BLOCK_R=head.BLOCK_R, GROUP=head.GROUP, PREC=None),
     ("sur", "sbv"), ("sun", "sbr", "ssn", "sgn", "R", "V"), 4),
    ("head exact logits", head._exact_logits_kernel, dict(HN="*bf16", W="*bf16", IDX="*i64", OUT="*fp32"),
     dict(BLOCK_H=head.BLOCK_H), ("shh", "swh"), ("shn", "swv", "H"), 4),
]


def compile_sm90(kernel, ptrs: dict, constexprs: dict, ones: tuple, div16: tuple, num_warps: int) -> dict:
    """Registers, spill stack, shared memory and async-copy count of one configuration."""
    stages = attn.NUM_STAGES if kernel is attn._tree_attn_kernel else 3      # Triton's default elsewhere
    constexprs = {**constexprs, **{name: 1 for name in ones}}
    signature = {name: "i32" for name in kernel.arg_names}
    signature.update(ptrs)
    signature.update({name: "fp32" for name in kernel.arg_names if name == "qk_scale"})
    signature.update({name: "constexpr" for name in constexprs})
    names = list(kernel.arg_names)
    attrs = {(names.index(name),): [["tt.divisibility", 16]] for name in (*ptrs, *div16)}
    compiled = triton.compile(ASTSource(fn=kernel, signature=signature, constexprs=constexprs, attrs=attrs),
                              target=TARGET, options=dict(num_warps=num_warps, num_stages=stages))
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(compiled.asm["cubin"])
        f.flush()
        usage = subprocess.run([CUOBJDUMP, "-res-usage", f.name], capture_output=True, text=True,
                               check=True).stdout
    return dict(registers=int(re.search(r"REG:(\d+)", usage).group(1)),
                spill_stack=int(re.search(r"STACK:(\d+)", usage).group(1)),
                shared_bytes=compiled.metadata.shared, async_copies=compiled.asm["ptx"].count("cp.async.cg"))


def main() -> int:
    spills = 0
    for label, kernel, ptrs, constexprs, ones, div16, num_warps in CONFIGS:
        report = dict(kernel=label, **compile_sm90(kernel, ptrs, constexprs, ones, div16, num_warps))
        spills += report["spill_stack"] > 0
        print(json.dumps(report), flush=True)
    return 1 if spills else 0


if __name__ == "__main__":
    sys.exit(main())
