"""clattn.attention: the C library's attention call on host arrays (NumPy or CPU torch).

Semantics are the library's (docs/semantics.md): queries are aligned to the END of the keys
(p = i + Nk - Nq: bottom-right causal, as FlashAttention-2 >= 2.1), a row with no allowed key
gives O = 0 and LSE = -inf, only -inf in a bias masks (a finite bias, however large, is added).
"""

from __future__ import annotations

import ctypes
import math
import numbers
from dataclasses import dataclass
from typing import Any, Optional, Sequence, Tuple, Union

import numpy as np

from . import _capi, _checks
from ._capi import float_pointer
from ._common import keyword_groups, new_struct
from ._tensors import (
    DTYPE_NAMES,
    HostTensor,
    as_numpy,
    convert,
    empty,
    host_tensor,
    host_values,
    is_torch_tensor,
    parse_storage,
    torch_module,
)
from .context import Context, resolve_context
from .errors import check, invalid

_LAYOUTS = {"bhsd": _capi.LAYOUT_BHSD, "bshd": _capi.LAYOUT_BSHD}
_PATHS = {
    "auto": _capi.PATH_AUTO,
    "fused": _capi.PATH_FUSED,
    "gemm": _capi.PATH_GEMM,
    "reference": _capi.PATH_REFERENCE,
}


@dataclass(frozen=True)
class _Dims:
    """One of Q, K, V, O as (batch, heads, seq, dim) and its strides in elements."""

    batch: int
    heads: int
    seq: int
    dim: int
    stride_batch: int
    stride_head: int
    stride_seq: int

    @staticmethod
    def of(tensor: HostTensor, layout: str) -> "_Dims":
        b, x, y, d = tensor.shape
        sb, sx, sy, _ = tensor.strides
        if layout == "bhsd":  # [B, H, N, D]
            return _Dims(b, x, y, d, sb, sx, sy)
        return _Dims(b, y, x, d, sb, sy, sx)  # bshd: [B, N, H, D]

    def as_c(self) -> _capi.Tensor:
        return _capi.Tensor(0, self.stride_batch, self.stride_head, self.stride_seq)


@dataclass(frozen=True)
class _Options:
    """The keyword arguments every attention call of the package takes (clattn.attention,
    KVCache.attention and MultiheadAttention.forward, through keyword_groups): the masks, the
    bias, the scale, the path and the variant, as clattn.attention's docstring describes them.
    _Call.set_options checks them into the desc."""

    causal: bool = False
    window: Optional[Tuple[Optional[int], Optional[int]]] = None
    dilation: int = 1
    global_tokens: Optional[Sequence[int]] = None
    block_layout: Any = None
    block_size: Union[int, Tuple[int, int], None] = None
    bias: Any = None
    scale: Optional[float] = None
    path: str = "auto"
    variant: Optional[str] = None


@dataclass(frozen=True)
class _Modifiers:
    """The score modifiers and sinks (docs/semantics.md section 8) that clattn.attention and
    KVCache.attention take as keyword arguments (a layer refuses them). _Call.set_modifiers
    checks them into the desc."""

    softcap: Optional[float] = None
    alibi_slopes: Any = None
    sinks: Any = None


def _input(x: Any, name: str, storage: Optional[int]) -> HostTensor:
    """Q, K or V as the library will read it: 4-D, strides it can describe."""
    tensor = host_tensor(x, name, bits_are_bf16=storage == _capi.DTYPE_BF16)
    if tensor.ndim != 4:
        raise invalid(
            f"{name} must be 4-D ([B, H, N, D] for layout 'bhsd', [B, N, H, D] for 'bshd'), got shape {tensor.shape}"
        )
    if not tensor.describable():
        raise invalid(
            f"{name}: strides {tensor.strides} (in elements) cannot be read in place: the last "
            "dimension needs stride 1 and the others >= 0; pass a contiguous copy "
            "(np.ascontiguousarray(x) or x.contiguous())"
        )
    return tensor


def _check_shapes(q: _Dims, k: _Dims, v: _Dims, shapes: str) -> None:
    if not (q.batch == k.batch == v.batch):
        raise invalid(f"batch sizes differ: {shapes}")
    if q.dim != k.dim:
        raise invalid(f"q and k head dims differ ({q.dim} vs {k.dim}): {shapes}")
    if k.heads != v.heads or k.seq != v.seq:
        raise invalid(f"k and v need the same heads and length: {shapes}")
    if min(q.batch, q.heads, q.seq, q.dim, k.heads, k.seq, v.dim) < 1:
        raise invalid(f"every size must be >= 1: {shapes}")


def _window(window: Optional[Tuple[Optional[int], Optional[int]]]) -> Tuple[int, int]:
    """window= as (left, right) of the desc: None, or a pair of None / -1 (unbounded) or a
    count of keys (the library checks the values)."""
    if window is None:
        return -1, -1
    if isinstance(window, numbers.Real):
        raise invalid(f"window={window!r}: give (left, right), None or -1 meaning unbounded on that side")
    sides = _checks.pair(window, "window")
    left, right = (
        -1 if side is None else _checks.integer(side, f"window[{i}]") for i, side in enumerate(sides)
    )
    return left, right


class _Call:
    """The desc of one call and the host arrays its pointers point into (kept alive here)."""

    def __init__(self, q: _Dims, k: _Dims, v: _Dims, layout: str, dtype: int) -> None:
        self.keep: list = []
        sizes = (q.batch, q.heads, k.heads, q.seq, k.seq, q.dim, v.dim)
        self.desc = new_struct(
            _capi.AttentionDesc,
            "clattn_attention_desc_init_sized",
            _LAYOUTS[layout],
            *sizes,
            message="attention sizes B={} Hq={} Hkv={} Nq={} Nk={} Dqk={} Dv={}".format(*sizes),
        )
        self.desc.dtype = dtype
        self.desc.out_dtype = dtype
        self.desc.q, self.desc.k, self.desc.v = q.as_c(), k.as_c(), v.as_c()

    def set_mask(self, causal: bool, window: Tuple[int, int], dilation: int, global_tokens: Any) -> None:
        d = self.desc
        d.causal = int(_checks.flag(causal, "causal"))
        d.window_left, d.window_right = window
        d.dilation = _checks.integer(dilation, "dilation")
        tokens = None if global_tokens is None else _checks.integers(global_tokens, "global_tokens")
        if tokens is not None and tokens.size > 0:
            tokens = tokens.reshape(-1)
            self.keep.append(tokens)
            d.global_tokens = tokens.ctypes.data_as(ctypes.POINTER(ctypes.c_int64))
            d.num_global_tokens = tokens.size

    def set_block_layout(self, block_layout: Any, block_size: Any) -> None:
        d = self.desc
        if block_size is None:
            raise invalid("block_layout needs block_size: BQ or (BQ, BK), in rows and keys")
        bq, bk = _checks.block_size(block_size)
        layout = as_numpy(
            host_values(block_layout, "block_layout") if is_torch_tensor(block_layout) else block_layout,
            "block_layout",
        )
        grid = (math.ceil(d.len_q / bq), math.ceil(d.len_k / bk))
        if layout.dtype.kind not in "biuf":
            raise invalid(f"block_layout: 0/1 values are needed, not dtype {layout.dtype}")
        if layout.ndim == 2:
            layout = layout[None]
        if layout.ndim != 3 or layout.shape[1:] != grid or layout.shape[0] not in (1, d.heads_q):
            raise invalid(
                f"block_layout has shape {tuple(np.shape(block_layout))}; with Nq={d.len_q}, Nk={d.len_k} and "
                f"block_size ({bq}, {bk}) it must be {grid} (shared by all heads) or "
                f"({d.heads_q}, {grid[0]}, {grid[1]}) (one per query head)"
            )
        cells = np.ascontiguousarray(layout != 0, dtype=np.uint8)
        self.keep.append(cells)
        d.block_layout = cells.ctypes.data_as(ctypes.POINTER(ctypes.c_uint8))
        d.block_q, d.block_k = bq, bk
        d.block_layout_per_head = int(cells.shape[0] > 1)

    def set_bias(self, bias: Any) -> None:
        d = self.desc
        full = (d.batch, d.heads_q, d.len_q, d.len_k)
        values = _bias_as_float32(bias)
        try:
            values = np.broadcast_to(values, full)
        except ValueError:
            raise invalid(
                f"bias of shape {tuple(values.shape)} does not broadcast to [B, Hq, Nq, Nk] = {list(full)}"
            ) from None
        if (d.len_k > 1 and values.strides[-1] != 4) or any(s < 0 or s % 4 for s in values.strides):
            values = np.ascontiguousarray(values)  # keys with stride 1, and whole floats apart
        strides = [0 if n == 1 else s // 4 for n, s in zip(values.shape, values.strides)]
        self.keep.append(values)
        d.bias_host = ctypes.cast(values.__array_interface__["data"][0], ctypes.POINTER(ctypes.c_float))
        d.bias_strides = _capi.Tensor(0, strides[0], strides[1], strides[2])

    def set_modifiers(self, modifiers: _Modifiers) -> None:
        """Soft-capping, ALiBi slopes [Hq] or [B, Hq] and sinks [Hq] (docs/semantics.md
        section 8), as clattn.attention's keyword arguments give them."""
        d = self.desc
        if modifiers.softcap is not None:
            cap = _checks.real(modifiers.softcap, "softcap")
            if not (0 < cap < 3.4e38) or float(np.float32(cap)) == 0.0:  # 0 would mean off
                raise invalid(f"softcap={modifiers.softcap!r}: a positive finite float32 (None: off)")
            d.softcap = cap
        if modifiers.alibi_slopes is not None:
            slopes = self._per_head(modifiers.alibi_slopes, "alibi_slopes", allow_batch=True)
            d.alibi_slopes = float_pointer(slopes)
            d.alibi_per_batch = int(slopes.ndim == 2)
        if modifiers.sinks is not None:
            d.sinks = float_pointer(self._per_head(modifiers.sinks, "sinks", allow_batch=False))

    def _per_head(self, values: Any, name: str, allow_batch: bool) -> np.ndarray:
        """float32 [Hq] (or [B, Hq]), contiguous, kept alive with the call."""
        d = self.desc
        if is_torch_tensor(values):
            values = host_values(values, name).float().numpy()
        array = np.ascontiguousarray(as_numpy(values, name), dtype=np.float32)
        shapes = [(d.heads_q,)] + ([(d.batch, d.heads_q)] if allow_batch else [])
        if array.shape not in shapes:
            wanted = " or ".join(str(list(s)) for s in shapes)
            raise invalid(f"{name} has shape {array.shape}; it must be {wanted} ([Hq] or [B, Hq])")
        self.keep.append(array)
        return array

    def set_options(self, options: _Options) -> None:
        """The masks, scale, path and variant as the keyword arguments of clattn.attention,
        KVCache.attention and MultiheadAttention.forward give them."""
        self.set_mask(options.causal, _window(options.window), options.dilation, options.global_tokens)
        if options.block_layout is not None:
            self.set_block_layout(options.block_layout, options.block_size)
        if options.bias is not None:
            self.set_bias(options.bias)
        self.set_execution(options.scale, options.path, options.variant)

    def set_execution(self, scale: Optional[float], path: str, variant: Optional[str]) -> None:
        d = self.desc
        chosen = _checks.scale(scale)
        if chosen is not None:
            d.scale = chosen
        d.path = _checks.choice(path, "path", _PATHS)
        if variant is not None:
            number = ctypes.c_int(0)
            known = isinstance(variant, str) and "\0" not in variant
            if (
                not known
                or _capi.lib.clattn_variant_from_name(variant.encode(), ctypes.byref(number)) != _capi.SUCCESS
            ):
                raise invalid(
                    f"variant={variant!r} is no row of the variant table (Context.variants() lists them)"
                )
            d.variant = number.value

    def new_output(self, q: _Dims, dim_v: int, layout: str, like: HostTensor) -> HostTensor:
        """O [B, Hq, Nq, Dv] ("bshd": [B, Nq, Hq, Dv]) of q's dtype and kind, dense, and the
        desc's strides for it."""
        shape = (q.batch, q.heads, q.seq, dim_v) if layout == "bhsd" else (q.batch, q.seq, q.heads, dim_v)
        o = empty(shape, like.dtype, like=like)
        self.desc.o = _Dims.of(o, layout).as_c()
        return o

    def validate(self) -> None:
        """The library's own check of the whole desc, with its message."""
        message = ctypes.create_string_buffer(512)
        status = _capi.lib.clattn_attention_desc_check(ctypes.byref(self.desc), None, message, len(message))
        check(status, _capi.text(message.value))

    def run(
        self,
        context: Context,
        q: HostTensor,
        k: HostTensor,
        v: HostTensor,
        o: HostTensor,
        lse: Optional[np.ndarray],
    ) -> None:
        with context.locked() as handle:
            status = _capi.lib.clattn_attention_host(
                handle, ctypes.byref(self.desc), q.pointer, k.pointer, v.pointer, o.pointer, float_pointer(lse)
            )
            check(status, context_handle=handle)


def _new_lse(q: _Dims, wanted: bool) -> Optional[np.ndarray]:
    """float32 [B, Hq, Nq] for the call's LSE when it is wanted (return_lse=), else None."""
    return np.empty((q.batch, q.heads, q.seq), dtype=np.float32) if wanted else None


def _outputs(o: HostTensor, lse: Optional[np.ndarray], like: HostTensor) -> Any:
    """What an attention call returns: O, or (O, LSE) with LSE of the query's kind."""
    if lse is None:
        return o.owner
    if like.kind == "torch":
        return o.owner, torch_module().from_numpy(lse)
    return o.owner, lse


def _inputs(q: Any, k: Any, v: Any, storage: Optional[int]) -> Tuple[HostTensor, HostTensor, HostTensor, int]:
    """Q, K, V as the library reads them, in the storage type of the call."""
    tensors = [_input(x, name, storage) for x, name in ((q, "q"), (k, "k"), (v, "v"))]
    dtypes = {t.dtype for t in tensors}
    if len(dtypes) != 1 and storage is None:  # with storage=, each is converted to it
        names = ", ".join(f"{n}: {DTYPE_NAMES[t.dtype]}" for n, t in zip("qkv", tensors))
        raise invalid(f"q, k and v must share one dtype ({names}); convert them, or set storage=")
    dtype = storage if storage is not None else dtypes.pop()
    tensors = [t if t.dtype == dtype else convert(t, dtype, n) for t, n in zip(tensors, "qkv")]
    return tensors[0], tensors[1], tensors[2], dtype


@keyword_groups(options=_Options, modifiers=_Modifiers)
def attention(
    q: Any,
    k: Any,
    v: Any,
    *,
    layout: str = "bhsd",
    options: _Options,
    storage: Any = None,
    return_lse: bool = False,
    modifiers: _Modifiers,
    context: Optional[Context] = None,
) -> Any:
    """softmax(scale * Q Kᵀ + bias, over the allowed keys) V, on an OpenCL device.

    Shapes (layout "bhsd", PyTorch's order; "bshd" swaps H and N, FlashAttention's order):
        q: [B, Hq, Nq, Dqk]    k: [B, Hkv, Nk, Dqk]    v: [B, Hkv, Nk, Dv]
        returns o: [B, Hq, Nq, Dv] in the same layout, and with return_lse also
        lse: float32 [B, Hq, Nq] (natural log of the softmax denominator; -inf for empty rows).
    Hq must be a multiple of Hkv (GQA/MQA: query head h reads KV head h // (Hq // Hkv)).

    q, k, v: NumPy arrays or CPU torch tensors of float32, float16 or bfloat16 (torch, or NumPy
        uint16 bit patterns with storage="bf16"), one dtype for all three. They are read in
        place when their last dimension has stride 1 and the other strides are >= 0; other
        strides raise clattn.Error. Outputs are of the inputs' kind (tensors for tensors).
    Masks (a query row i sits at key position p = i + Nk - Nq, aligned to the end):
        causal: keys j <= p.    window (left, right): p - left <= j <= p + right, None or -1 for
        unbounded.    dilation: with a window, also (p - j) % dilation == 0.
        global_tokens: key positions every query sees; a query at such a position sees all.
        block_layout: 0/1 [ceil(Nq/BQ), ceil(Nk/BK)] or one per query head [Hq, ...], with
        block_size BQ or (BQ, BK) (clattn.patterns makes the standard ones).
        bias: float, broadcast to [B, Hq, Nq, Nk] and added to the scores; only -inf masks.
    scale: default 1/sqrt(Dqk).    storage: "f32", "f16" or "bf16": round the inputs to it
        (default: their own type); O is stored in it.    path: "auto", "fused", "gemm" or
        "reference"; variant: a row of the variant table ("lanes", "rowwise", "flash",
        "nv_mma", "split", "gemm", "reference"; the names of 0.2, "cpu" and "gpu", still work).
    Score modifiers and sinks (docs/semantics.md section 8):
        softcap: t = scale * q.k becomes softcap * tanh(t / softcap) (float32), before the
        bias and masks (Gemma 2).    alibi_slopes: float32 [Hq] or [B, Hq]: each score gets
        -slope * |p - j| (clattn.alibi_slopes(Hq) gives the standard ones).    sinks: float32
        [Hq], one logit a head that joins the softmax's denominator only (gpt-oss); the LSE
        includes it, and an empty row has O = 0 and LSE = sink.
    context: the Context to run on (default: clattn.default_context()).
    Raises clattn.Error for every bad argument, whether the package or the library finds it
    (its message names the problem).
    """
    _checks.choice(layout, "layout", _LAYOUTS)
    return_lse = _checks.flag(return_lse, "return_lse")
    storage_dtype = parse_storage(storage)
    qt, kt, vt, dtype = _inputs(q, k, v, storage_dtype)
    qd, kd, vd = (_Dims.of(t, layout) for t in (qt, kt, vt))
    _check_shapes(qd, kd, vd, f"q {qt.shape}, k {kt.shape}, v {vt.shape} ({layout})")

    call = _Call(qd, kd, vd, layout, dtype)
    call.set_options(options)
    call.set_modifiers(modifiers)
    o = call.new_output(qd, vd.dim, layout, like=qt)
    call.validate()

    lse = _new_lse(qd, return_lse)
    call.run(resolve_context(context), qt, kt, vt, o, lse)
    return _outputs(o, lse, like=qt)


def _bias_as_float32(bias: Any) -> np.ndarray:
    """The bias as float32 values NumPy can broadcast (a float32 array is not copied)."""
    if is_torch_tensor(bias):
        if bias.dtype.is_floating_point:
            bias = host_values(bias, "bias").float().numpy()
        else:
            raise invalid(
                f"bias: dtype {bias.dtype} is not a float type; a boolean mask is np.where(mask, 0, -inf)"
            )
    values = as_numpy(bias, "bias")
    if values.dtype.kind != "f":
        raise invalid(
            f"bias: dtype {values.dtype} is not a float type (it is added to the scores as float32; "
            "a boolean mask is np.where(mask, 0, -inf), or use scaled_dot_product_attention's attn_mask)"
        )
    return values if values.dtype == np.float32 else values.astype(np.float32)
