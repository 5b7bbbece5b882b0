"""The linear layers the target and the drafters run, and how a ragged step's rows reach them.

Decoding is bound by streaming weights from memory, so the kinds differ in how they hold and stream
their weights:

- `PackedLinear`: the weight reordered once into oneDNN's blocked layout; `rowwise` computes every row
  exactly as it would be computed alone, which verification needs (see its docstring).
- `Int8Linear`: int8 weights for the drafters' few-row calls, the original dtype's prepacked weights for
  larger ones.
- plain `nn.Linear` where oneDNN cannot prepack the dtype (or off the CPU).

`pack_linears` swaps a model's linears for prepacked ones; `linear(layer, x, exact)` is the call every
layer makes; `Packing` drops a padded step's padding rows before the matmuls.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from reference_eagle4.device import upload
from reference_eagle4.kernels import amx_linear


class Packing:
    """The real tokens of a ragged step ([B, T] with padding), so matmuls run on N rows instead of B * T.

    A verification step pads every tree to the largest; the linears and the LM head, nearly all of a
    step's time, would then pay for the padding too. Packing drops it: only attention sees the [B, T] layout.
    """

    def __init__(self, valid: Tensor, device: torch.device | str | None = None):
        """valid [B, T] bool; `device`: where the rows are used, when valid is on the host (the engine keeps
        it there: finding the real rows of a GPU tensor would wait for the GPU)."""
        self.shape = valid.shape                                       # (B, T)
        rows = valid.reshape(-1).nonzero().squeeze(1)                  # [N] flat indices of the real tokens
        self.rows = rows if device is None else upload(rows, device)
        self._padded: dict[tuple[int, torch.dtype], Tensor] = {}    # reused by `unpack(..., reuse=True)`

    def pack(self, x: Tensor) -> Tensor:
        """[B, T, d] -> [N, d]."""
        return x.reshape(-1, x.shape[-1]).index_select(0, self.rows)

    def unpack(self, x: Tensor, reuse: bool = False) -> Tensor:
        """[N, d] -> [B, T, d] with zeros in the padding. reuse: into one buffer per width for the whole
        step (every layer writes the same rows, so the padding stays zero), for a result consumed before
        the next call, such as a layer's qkv; this spares zeroing a fresh buffer in every layer."""
        B, T = self.shape
        key = (x.shape[-1], x.dtype)
        out = self._padded.get(key) if reuse else None
        if out is None:
            out = x.new_zeros(B * T, x.shape[-1])
            if reuse:
                self._padded[key] = out
        out.index_copy_(0, self.rows, x)
        return out.view(B, T, -1)


class PackedLinear(nn.Module):
    """A frozen linear layer whose weight oneDNN has reordered once for the CPU's matmul kernels.

    Decoding is bound by streaming weights from memory, and the blocked layout streams them faster in
    the small-row matmuls that dominate a step. Inference only: no autograd.
    """

    ROW_BLOCK = 32
    MIN_ROWS = 4

    def __init__(self, linear: nn.Linear, rows_hint: int = 16, keep_weight: bool = False):
        super().__init__()
        self.out_features = linear.out_features
        if keep_weight:                                  # still readable as `.weight` (the LM head: drafters share it)
            self.weight = linear.weight
        self.packed = torch.ops.mkldnn._reorder_linear_weight(linear.weight.detach(), rows_hint)
        self.tiles = amx_linear.pack(linear.weight)      # None where the AMX kernel does not run (rowwise)

    def forward(self, x: Tensor) -> Tensor:
        return torch.ops.mkldnn._linear_pointwise(x, self.packed, None, "none", [], "")

    def rowwise(self, x: Tensor) -> Tensor:
        """The product with every row computed as if alone, so that verifying a tree computes each node
        exactly as vanilla decoding does. oneDNN picks kernels by row count, and two of its switches round
        rows differently (checked row by row in tests/reference_eagle4/test_model.py): a single row takes
        a vector kernel (fp32 on every CPU seen; bf16 on AVX512-BF16 without AMX, in the MLP down
        projection), and bf16 calls of more than 32 rows take AMX kernels where the CPU has them. Between
        2 and 32 rows every CPU seen computes each row alike, so calls go in blocks of at most 32 and a
        block of fewer than MIN_ROWS rows is padded up to MIN_ROWS: one row must not run alone, and oneDNN's
        kernels for 2 or 3 rows are slower than its 4-row one (`python -m reference_eagle4.linear_bench`
        compares row counts), so a decoding step pays for 4. On a CPU with AMX one call of `amx_linear`
        takes any number of rows instead, each row alike, streaming the weights once (blocks of 32 would
        stream them once per block)."""
        if self.tiles is not None:
            out = amx_linear.matmul(x, self.tiles, self.out_features)
            if out is not None:
                return out
        rows = x.reshape(-1, x.shape[-1])
        if rows.shape[0] <= self.ROW_BLOCK:       # a decoding or verification step: one call, no split
            out = self._block(rows)
        else:
            out = torch.cat([self._block(b) for b in rows.split(self.ROW_BLOCK)])
        return out.view(*x.shape[:-1], self.out_features)

    def _block(self, rows: Tensor) -> Tensor:
        n = rows.shape[0]
        if n >= self.MIN_ROWS:
            return self(rows)
        return self(torch.cat((rows, rows.new_zeros(self.MIN_ROWS - n, rows.shape[1]))))[:n]


def linear(layer: nn.Module, x: Tensor, exact: bool) -> Tensor:
    """`layer(x)`, row by row as if alone when `exact` (PackedLinear.rowwise; other layers already are)."""
    return layer.rowwise(x) if exact and isinstance(layer, PackedLinear) else layer(x)


def packed(linear: nn.Linear, keep_weight: bool = False) -> nn.Module:
    """`linear` prepacked for oneDNN, or unchanged where this CPU's oneDNN cannot reorder its dtype (bf16
    needs AVX512-BF16 / AVX-NE-CONVERT): plain F.linear is then the fastest path there is. keep_weight: the
    packed layer still holds the original weight as `.weight`."""
    if not can_pack(linear.weight.dtype):
        return linear
    return PackedLinear(linear, keep_weight=keep_weight)


class Int8Linear(nn.Module):
    """A frozen linear layer with int8 weights (one scale per output row) for calls of up to INT8_ROWS rows,
    computed by `aten._weight_int8pack_mm` against activations of the original dtype; larger calls take the
    prepacked weights of the original dtype (`packed`).

    For drafters only: a drafter's linears run right after a target forward has pushed their weights out of
    the caches, so a call of a few rows is bound by streaming weights, and int8 halves the bytes. But
    `_weight_int8pack_mm`'s time grows with the rows while the prepacked weights cost about the same for
    any few rows, so above INT8_ROWS rows (a batch's draft level, a catch-up over a new prompt) the
    prepacked weights are faster. Outputs only propose tokens, which verification accepts or rejects, so
    rounding the weights can change acceptance but never the output."""

    INT8_ROWS = 4

    def __init__(self, linear: nn.Linear):
        super().__init__()
        w = linear.weight.detach().float()
        scale = w.abs().amax(1).clamp(min=torch.finfo(torch.float32).tiny) / 127.0
        self.out_features = linear.out_features
        self.register_buffer("weight_q", torch.round(w / scale[:, None]).clamp(-127, 127).to(torch.int8))
        self.register_buffer("scale", scale.to(linear.weight.dtype))
        self.wide = packed(linear)

    def forward(self, x: Tensor) -> Tensor:
        rows = x.reshape(-1, x.shape[-1])
        if rows.shape[0] > self.INT8_ROWS:
            # in blocks of at most 32 rows: oneDNN builds a kernel the first time it sees a row count, and a
            # catch-up's row count is new at nearly every step
            return self.wide.rowwise(x) if isinstance(self.wide, PackedLinear) else self.wide(x)
        out = torch.ops.aten._weight_int8pack_mm(rows.contiguous(), self.weight_q, self.scale)
        return out.view(*x.shape[:-1], self.out_features)


_INT8: dict[tuple[torch.dtype, str], bool] = {}


def int8_linear(linear: nn.Linear) -> nn.Module:
    """`linear` as an Int8Linear for bf16 weights where this build of torch runs int8 weights on this device;
    else prepacked (`packed`). Against fp32 activations `_weight_int8pack_mm` is slower than the prepacked
    fp32 weights even at one row (`python -m reference_eagle4.linear_bench --int8`), so fp32 layers keep them."""
    key = (linear.weight.dtype, linear.weight.device.type)
    if linear.weight.dtype != torch.bfloat16:
        return packed(linear)
    if key not in _INT8:
        try:
            probe = torch.zeros(2, 32, dtype=linear.weight.dtype, device=linear.weight.device)
            torch.ops.aten._weight_int8pack_mm(probe, torch.zeros(32, 32, dtype=torch.int8, device=probe.device),
                                               torch.ones(32, dtype=probe.dtype, device=probe.device))
            _INT8[key] = True
        except (RuntimeError, NotImplementedError):
            _INT8[key] = False
    return Int8Linear(linear) if _INT8[key] else packed(linear)


_PACKABLE: dict[torch.dtype, bool] = {}


def can_pack(dtype: torch.dtype) -> bool:
    """Whether this CPU's oneDNN can reorder weights of `dtype` (probed once per dtype)."""
    if dtype not in _PACKABLE:
        try:
            torch.ops.mkldnn._reorder_linear_weight(torch.zeros(8, 8, dtype=dtype), 16)
            _PACKABLE[dtype] = True
        except RuntimeError:
            _PACKABLE[dtype] = False
    return _PACKABLE[dtype]


def pack_linears(model: nn.Module, keep_weights: tuple[str, ...] = ("lm_head",)) -> nn.Module:
    """Swap every nn.Linear for a PackedLinear where oneDNN can run it (CPU); a no-op elsewhere. The layers
    named in `keep_weights` keep their original weight readable too: drafters share the target's LM head."""
    if not torch.backends.mkldnn.is_available() or next(model.parameters()).device.type != "cpu":
        return model
    for name, child in model.named_children():
        if isinstance(child, nn.Linear) and child.bias is None:
            setattr(model, name, packed(child, keep_weight=name in keep_weights))
        else:
            pack_linears(child, keep_weights)
    return model
