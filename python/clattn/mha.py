"""clattn.MultiheadAttention: a whole multi-head attention layer on an OpenCL device, over the
C API's clattn_mha_* functions (docs/layer.md).

For X [B, N, d_model] and, for cross-attention, X_kv [B, Nk, d_kv] (else X_kv = X):

    Q = X W_qᵀ + b_q        [B, N, Hq, Dqk]     W_q [Hq*Dqk, d_model]
    K = X_kv W_kᵀ + b_k     [B, Nk, Hkv, Dqk]   W_k [Hkv*Dqk, d_kv]
    V = X_kv W_vᵀ + b_v     [B, Nk, Hkv, Dv]    W_v [Hkv*Dv, d_kv]
    O = attention(Q, K, V)  [B, N, Hq, Dv]      clattn.attention's semantics, every mask
    Y = O W_oᵀ + b_o        [B, N, d_model]     W_o [d_model, Hq*Dv]

Weights are [out, in] as torch.nn.Linear stores them; query head h reads kv head h // (Hq/Hkv)
(GQA/MQA). Q, K, V and O are float32 on the device, the projections float32 GEMMs (CLBlast).

    layer = clattn.MultiheadAttention(w_q, w_k, w_v, w_o, heads=32, kv_heads=8)
    y = layer(x, causal=True)                          # x [B, N, d_model] -> y [B, N, d_model]
    cache = layer.new_cache(batch=1, capacity=4096)
    y = layer(x_prompt, causal=True, kv_cache=cache)   # prefill: K/V appended, then attended
    y = layer(x_token, causal=True, kv_cache=cache)    # one decoding step
"""

from __future__ import annotations

import ctypes
import sys
from dataclasses import dataclass
from typing import Any, Dict, Optional, Tuple

import numpy as np

from . import _capi, _checks, _opencl
from ._capi import int32_pointer
from ._common import attribute, fetch, keyword_groups, named_attribute, new_struct, record
from ._tensors import (
    DTYPE_NAMES,
    STORAGE_TYPES,
    HostTensor,
    as_numpy,
    dense,
    empty,
    host_tensor,
    host_values,
    is_torch_tensor,
    parse_dtype,
    parse_storage,
    torch_module,
)
from .attention import _Call, _Dims, _Options
from .context import Context, _OwnedHandle, resolve_context
from .errors import check, invalid
from .kv_cache import KVCache

_ELEMENT_BYTES = {_capi.DTYPE_F32: 4, _capi.DTYPE_F16: 2, _capi.DTYPE_BF16: 2}
_PARAMS = ("w_q", "w_k", "w_v", "w_o", "b_q", "b_k", "b_v", "b_o")


def _weight_dtype(dtype: Any) -> Optional[int]:
    """weight_dtype= as a clattn dtype: None, a name ("float16", "bf16", ...), a NumPy or torch
    dtype."""
    if dtype is None:
        return None
    hint = (
        "the layer stores its weights as 'float32', 'float16' or 'bfloat16' (or None: the weights' own type)"
    )
    return parse_dtype(dtype, "weight_dtype", STORAGE_TYPES, hint)


@dataclass(frozen=True)
class LayerInfo:
    """A layer as it stands (clattn_mha_info)."""

    d_model: int  # width of X and Y
    d_kv: int  # width of X_kv (d_model for a self-attention layer)
    heads: int  # Hq, the query heads (pruned ones included)
    kv_heads: int  # Hkv
    dim_qk: int
    dim_v: int
    weight_dtype: str  # "float32", "float16" or "bfloat16": the weights as given
    heads_kept: int  # query heads the head mask keeps (= the attention's query heads)
    attention_heads_kv: int  # kv heads the attention reads, and that a KV cache must have
    kv_duplicated: bool  # the kept heads broke GQA: each kept query head has its own K/V rows
    has_bias: bool  # any bias was given
    weight_bytes: int  # device memory of the packed float32 weights and biases


@dataclass(frozen=True)
class LayerStats:
    """What the last call of a layer did (clattn_mha_stats)."""

    projection_ms: float  # X widened, Q/K/V GEMMs (and the append to a KV cache), when timing
    attention_ms: float  # the attention, when timing (Context.set_timing), else 0
    output_ms: float  # the output GEMM and Y narrowed, when timing
    variant: str  # the attention's variant ("lanes", "rowwise", "split", ...)
    kernel: str  # the attention's kernel and its specialisation
    attention_heads_q: int
    attention_heads_kv: int
    projection_flops: int  # 2*M*N*K of the input GEMMs
    output_flops: int  # 2*M*N*K of the output GEMM
    projection_gemm: str  # the GEMM row that ran the projections ("panels", "clblast")
    output_gemm: str  # the GEMM row that ran the output GEMM
    gemm_kernel: str  # the output GEMM's kernel and its parameters


def _read_param(x: Any, name: str, target: Optional[int]) -> HostTensor:
    """A weight or bias as the library reads it, before its dtype is settled. torch parameters
    are detached (the values are copied once; no gradients flow). float64 (and other float
    types) only with weight_dtype=, through float32."""
    if is_torch_tensor(x):
        torch = torch_module()
        x = x.detach()
        if x.device.type != "cpu":
            x = x.cpu()
        if x.dtype not in (torch.float32, torch.float16, torch.bfloat16) and x.dtype.is_floating_point:
            if target is None:
                raise invalid(
                    f"{name}: dtype {x.dtype} is not a weight type (float32, float16, bfloat16): "
                    "convert it, or give weight_dtype="
                )
            x = x.float()
    else:
        array = as_numpy(x, name)
        if array.dtype.kind == "f" and array.dtype not in (np.float32, np.float16):
            if target is None:
                raise invalid(
                    f"{name}: dtype {array.dtype} is not a weight type (float32, float16, "
                    "bfloat16): convert it, or give weight_dtype="
                )
            array = array.astype(np.float32)
        x = array
    return host_tensor(x, name, bits_are_bf16=target == _capi.DTYPE_BF16)


def _head_mask(mask: Any, heads: int) -> Optional[np.ndarray]:
    """A head mask as uint8 [heads] (nonzero: kept), or None for every head."""
    if mask is None:
        return None
    if is_torch_tensor(mask):
        mask = host_values(mask, "head_mask").numpy()
    values = as_numpy(mask, "head_mask")
    if values.dtype.kind not in "biuf":
        raise invalid(f"head_mask: bools or integers needed, got dtype {values.dtype}")
    if values.shape != (heads,):
        raise invalid(
            f"head_mask has shape {values.shape}; it must be [heads] = [{heads}] (nonzero keeps a head)"
        )
    return np.ascontiguousarray(values != 0, dtype=np.uint8)


def _dense(b: int, heads: int, seq: int, dim: int) -> _Dims:
    """A dense BSHD tensor: the call's tensors are not read by the layer, only their sizes."""
    return _Dims(b, heads, seq, dim, seq * heads * dim, dim, heads * dim)


class MultiheadAttention(_OwnedHandle):
    """A multi-head attention layer on an OpenCL device (the C API's clattn_mha).

    Weights (NumPy arrays or CPU torch tensors, [out, in] as nn.Linear stores them):
        w_q: [Hq*Dqk, d_model]    w_k: [Hkv*Dqk, d_kv]    w_v: [Hkv*Dv, d_kv]
        w_o: [d_model, Hq*Dv]     biases b_q, b_k, b_v, b_o (optional, each on its own): [out]
    heads: Hq.    kv_heads: Hkv (default heads; Hq a multiple of it: GQA/MQA).
        d_model, d_kv, Dqk and Dv are read from the weights' shapes; d_kv != d_model makes a
        cross-attention layer (X_kv required).
    weight_dtype: how the library stores the weights as given: "float32", "float16" or
        "bfloat16" (also NumPy/torch dtypes). None: the weights' own type, which must be one of
        those and the same for all (NumPy has no bfloat16: ml_dtypes.bfloat16 arrays, or uint16
        bit patterns with weight_dtype="bfloat16"). Weights of another type are rounded to it
        (to nearest even; float64 through float32). On the device they are widened to float32
        exactly, once.
    head_mask: bool [Hq] (nonzero keeps the head), None for all: pruned heads cost nothing,
        and the result is the unpruned layer's with the pruned heads' O zeroed before W_o.
        set_head_mask() changes it.
    context: the Context to run on (default: clattn.default_context()). The layer keeps it
        alive; closing the context closes the layer first.

    The weights are copied at creation: changing the arrays afterwards does not change the
    layer. Close it with close() or a `with` block; it is also released when garbage-collected.
    Errors: clattn.Error for what the library refuses (its message says what: heads that are
    not a multiple of kv heads, a head mask keeping no head, a KV cache of other heads, ...);
    and for every argument it cannot take (shapes that do not fit, types, ...).
    """

    _c_type = "clattn_mha"
    _what = "layer"

    def __init__(
        self,
        w_q: Any,
        w_k: Any,
        w_v: Any,
        w_o: Any,
        *,
        heads: int,
        kv_heads: Optional[int] = None,
        b_q: Any = None,
        b_k: Any = None,
        b_v: Any = None,
        b_o: Any = None,
        weight_dtype: Any = None,
        head_mask: Any = None,
        context: Optional[Context] = None,
    ) -> None:
        self._heads = _checks.size(heads, "heads")
        self._kv_heads = self._heads if kv_heads is None else _checks.size(kv_heads, "kv_heads")
        target = _weight_dtype(weight_dtype)
        given = dict(zip(_PARAMS, (w_q, w_k, w_v, w_o, b_q, b_k, b_v, b_o)))
        for name in _PARAMS[:4]:
            if given[name] is None:
                raise invalid(f"{name} is required (the weights are; the biases are optional)")
        params: Dict[str, HostTensor] = {
            name: _read_param(value, name, target) for name, value in given.items() if value is not None
        }
        self._check_shapes(params)
        dtypes = {t.dtype for t in params.values()}
        if target is None:
            if len(dtypes) != 1:
                names = ", ".join(f"{n}: {DTYPE_NAMES[t.dtype]}" for n, t in params.items())
                raise invalid(
                    f"the weights have different dtypes ({names}); give weight_dtype= to store them in one"
                )
            target = dtypes.pop()
        params = {name: dense(tensor, target, name) for name, tensor in params.items()}
        self._weight_dtype = target
        mask = _head_mask(head_mask, self._heads)
        self._context = resolve_context(context)

        sizes = (self._d_model, self._heads, self._kv_heads, self._dim_qk, self._dim_v)
        desc = new_struct(
            _capi.MhaDesc, "clattn_mha_desc_init_sized", *sizes, message=f"layer sizes {self._sizes_text()}"
        )
        desc.d_kv = self._d_kv
        desc.weight_dtype = target
        for name, tensor in params.items():
            getattr(desc, name).host = tensor.pointer
        if mask is not None:
            desc.head_mask = mask.ctypes.data_as(ctypes.POINTER(ctypes.c_uint8))
        handle = _capi.Mha_p()
        with self._context.locked() as ctx:
            status = _capi.lib.clattn_mha_create(ctx, ctypes.byref(desc), ctypes.byref(handle))
            check(status, context_handle=ctx)
            self._own(handle.value)
        self._mask = np.ones(self._heads, dtype=bool) if mask is None else mask.astype(bool)
        self._has_bias = any(name.startswith("b_") for name in params)

    def _check_shapes(self, params: Dict[str, HostTensor]) -> None:
        """Reads d_model, d_kv, Dqk and Dv from the weights and checks every shape."""
        hq, hkv = self._heads, self._kv_heads
        for name, tensor in params.items():
            want = 2 if name.startswith("w_") else 1
            if tensor.ndim != want:
                raise invalid(
                    f"{name} must be {want}-D ({'[out, in]' if want == 2 else '[out]'}); "
                    f"got shape {tensor.shape}"
                )
        rows_q, self._d_model = params["w_q"].shape
        rows_v, self._d_kv = params["w_v"].shape
        if rows_q % hq or rows_q == 0:
            raise invalid(
                f"w_q has shape {params['w_q'].shape}: its rows must be heads * Dqk with heads = {hq}"
            )
        if rows_v % hkv or rows_v == 0:
            raise invalid(
                f"w_v has shape {params['w_v'].shape}: its rows must be kv_heads * Dv with kv_heads = {hkv}"
            )
        self._dim_qk, self._dim_v = rows_q // hq, rows_v // hkv
        dqk, dv = self._dim_qk, self._dim_v
        if min(self._d_model, self._d_kv) < 1:
            raise invalid(f"w_q {params['w_q'].shape}, w_v {params['w_v'].shape}: the widths must be >= 1")
        shapes = {
            "w_q": (hq * dqk, self._d_model),
            "w_k": (hkv * dqk, self._d_kv),
            "w_v": (hkv * dv, self._d_kv),
            "w_o": (self._d_model, hq * dv),
            "b_q": (hq * dqk,),
            "b_k": (hkv * dqk,),
            "b_v": (hkv * dv,),
            "b_o": (self._d_model,),
        }
        for name, tensor in params.items():
            if tensor.shape != shapes[name]:
                raise invalid(
                    f"{name} has shape {tensor.shape}; with heads={hq}, kv_heads={hkv}, Dqk={dqk}, Dv={dv}, "
                    f"d_model={self._d_model}, d_kv={self._d_kv} it must be {list(shapes[name])}"
                )

    @classmethod
    def from_torch(
        cls,
        module: Any,
        *,
        weight_dtype: Any = None,
        head_mask: Any = None,
        context: Optional[Context] = None,
    ) -> "MultiheadAttention":
        """The layer of a torch.nn.MultiheadAttention, with its weights (copied).

        Its in_proj_weight [3E, E] (or q/k/v_proj_weight when kdim or vdim differ from E) gives
        W_q, W_k and W_v, in_proj_bias the input biases, out_proj the output; Hq = Hkv =
        num_heads. The layer computes the module in eval mode (no dropout), and takes
        [B, N, E] inputs whatever module.batch_first says; key and value are one X_kv, so kdim
        must equal vdim. add_bias_kv and add_zero_attn are not supported (clattn.Error).
        The module's attn_mask / key_padding_mask become forward()'s bias (0 or -inf).
        """
        torch = sys.modules.get("torch")
        if torch is None or not isinstance(module, torch.nn.MultiheadAttention):
            raise invalid(f"from_torch takes a torch.nn.MultiheadAttention, not {type(module).__name__}")
        if module.bias_k is not None or module.bias_v is not None:
            raise invalid("from_torch: add_bias_kv=True is not supported (its extra key/value row)")
        if module.add_zero_attn:
            raise invalid("from_torch: add_zero_attn=True is not supported")
        if module.kdim != module.vdim:
            raise invalid(
                f"from_torch: kdim={module.kdim} and vdim={module.vdim} differ; the layer projects K "
                "and V from one X_kv"
            )
        e = module.embed_dim
        if module._qkv_same_embed_dim:
            packed = module.in_proj_weight
            w_q, w_k, w_v = packed[:e], packed[e : 2 * e], packed[2 * e :]
        else:
            w_q, w_k, w_v = module.q_proj_weight, module.k_proj_weight, module.v_proj_weight
        b_q = b_k = b_v = None
        if module.in_proj_bias is not None:
            b_q, b_k, b_v = (
                module.in_proj_bias[:e],
                module.in_proj_bias[e : 2 * e],
                module.in_proj_bias[2 * e :],
            )
        return cls(
            w_q,
            w_k,
            w_v,
            module.out_proj.weight,
            heads=module.num_heads,
            b_q=b_q,
            b_k=b_k,
            b_v=b_v,
            b_o=module.out_proj.bias,
            weight_dtype=weight_dtype,
            head_mask=head_mask,
            context=context,
        )

    # ------------------------------------------------------------ life

    def close(self) -> None:
        """Releases the layer's device weights and scratch (idempotent)."""
        super().close()

    def __repr__(self) -> str:
        kept = int(self._mask.sum())
        pruned = f", {kept} of {self._heads} heads kept" if kept != self._heads else ""
        cross = f", d_kv={self._d_kv}" if self._d_kv != self._d_model else ""
        return self._repr(
            f"d_model={self._d_model}{cross}, heads={self._heads}, kv_heads={self._kv_heads}, "
            f"dim_qk={self._dim_qk}, dim_v={self._dim_v}, weight_dtype={self.weight_dtype!r}{pruned}"
        )

    def _sizes_text(self) -> str:
        return (
            f"d_model={self._d_model} Hq={self._heads} Hkv={self._kv_heads} Dqk={self._dim_qk} "
            f"Dv={self._dim_v} d_kv={self._d_kv}"
        )

    # ------------------------------------------------------------ what it is

    d_model = attribute("_d_model", "The width of X and Y.")
    d_kv = attribute("_d_kv", "The width of X_kv (d_model unless a cross-attention layer).")
    heads = attribute("_heads", "Hq, the query heads (pruned ones included).")
    kv_heads = attribute("_kv_heads", "Hkv, the key/value heads.")
    dim_qk = attribute("_dim_qk", "Dqk, the head dim of Q and K.")
    dim_v = attribute("_dim_v", "Dv, the head dim of V.")

    @property
    def head_mask(self) -> np.ndarray:
        """bool [heads]: the heads kept (a copy)."""
        return self._mask.copy()

    weight_dtype = named_attribute(
        "_weight_dtype", DTYPE_NAMES, 'The storage of the weights as given: "float32", "float16" or "bfloat16".'
    )

    def info(self) -> LayerInfo:
        """@return the layer as it stands (heads kept, the kv heads a KV cache needs, ...)."""
        with self._locked() as (ctx, mha):
            info = fetch(_capi.MhaInfo, "clattn_mha_info_init_sized", "clattn_mha_get_info", mha, context_handle=ctx)
        return record(
            LayerInfo,
            info,
            heads=info.heads_q,
            kv_heads=info.heads_kv,
            weight_dtype=DTYPE_NAMES.get(info.weight_dtype, str(info.weight_dtype)),
        )

    def last_stats(self) -> LayerStats:
        """@return what the layer's last successful call did. Raises Error before any call."""
        with self._locked() as (_, mha):
            stats = fetch(
                _capi.MhaStats,
                "clattn_mha_stats_init_sized",
                "clattn_mha_last_stats",
                mha,
                message="the layer has not run yet",
            )
        return record(
            LayerStats,
            stats,
            variant=_capi.text(_capi.lib.clattn_variant_name(stats.variant)),
            projection_gemm=_capi.text(_capi.lib.clattn_gemm_name(stats.projection_gemm)),
            output_gemm=_capi.text(_capi.lib.clattn_gemm_name(stats.output_gemm)),
        )

    def set_head_mask(self, head_mask: Any) -> None:
        """Sets the heads kept: bool [heads] (nonzero keeps), None for every head; the kept
        heads' weights are packed again. A KV cache filled under another mask no longer fits
        when info().attention_heads_kv changes. Raises clattn.Error for a mask that keeps no
        head; then the layer keeps its previous mask."""
        mask = _head_mask(head_mask, self._heads)
        pointer = None if mask is None else mask.ctypes.data_as(ctypes.POINTER(ctypes.c_uint8))
        with self._locked() as (ctx, mha):
            check(_capi.lib.clattn_mha_set_head_mask(mha, pointer), context_handle=ctx)
        self._mask = np.ones(self._heads, dtype=bool) if mask is None else mask.astype(bool)

    def new_cache(
        self,
        batch: int,
        capacity: int,
        *,
        dtype: Any = "float32",
        layout: str = "bshd",
        page_size: Optional[int] = None,
        num_pages: Optional[int] = None,
    ) -> KVCache:
        """A KVCache that fits the layer as it stands: on its context, with
        info().attention_heads_kv heads and its Dqk and Dv (see clattn.KVCache for the rest)."""
        return KVCache(
            batch,
            self.info().attention_heads_kv,
            self._dim_qk,
            capacity,
            dim_v=self._dim_v,
            dtype=dtype,
            layout=layout,
            page_size=page_size,
            num_pages=num_pages,
            context=self._context,
        )

    # ------------------------------------------------------------ running

    def _input(self, x: Any, name: str, width: int, storage: Optional[int]) -> Tuple[HostTensor, bool]:
        """X or X_kv as the library reads it: dense [B, N, width] (a 2-D [N, width] gets B = 1;
        the flag says so)."""
        tensor = host_tensor(x, name, bits_are_bf16=storage == _capi.DTYPE_BF16)
        shape = tensor.shape
        unbatched = tensor.ndim == 2
        if unbatched:
            tensor = host_tensor(tensor.owner[None], name, bits_are_bf16=storage == _capi.DTYPE_BF16)
        if tensor.ndim != 3 or tensor.shape[2] != width:
            raise invalid(f"{name} has shape {shape}; the layer takes [B, N, {width}] (or [N, {width}])")
        if min(tensor.shape) < 1:
            raise invalid(f"{name} has shape {shape}: every size must be >= 1")
        return dense(tensor, tensor.dtype if storage is None else storage, name), unbatched

    @keyword_groups(options=_Options)
    def forward(
        self,
        x: Any,
        x_kv: Any = None,
        *,
        options: _Options,
        storage: Any = None,
        kv_cache: Optional[KVCache] = None,
        new_lengths: Any = None,
    ) -> Any:
        """Runs the layer: Y = attention(X W_qᵀ + b_q, X_kv W_kᵀ + b_k, X_kv W_vᵀ + b_v) W_oᵀ + b_o.

        x: [B, N, d_model] (or [N, d_model]), a NumPy array or CPU torch tensor of float32,
            float16 or bfloat16 (NumPy: ml_dtypes.bfloat16, or uint16 bits with storage="bf16").
        x_kv: [B, Nk, d_kv] of x's dtype for cross-attention; None: self-attention (X_kv = X,
            Nk = N; a layer with d_kv != d_model needs it).
        returns y: [B, N, d_model] (or [N, d_model]) of x's kind and dtype (of `storage` when
            given).
        Masks, as in clattn.attention, over Q [B, Hq, N] and K [B, Hkv, Nk] (a query row i sits
            at key position i + Nk - N: bottom-right causal): causal, window (left, right),
            dilation, global_tokens, block_layout [ceil(N/BQ), ceil(Nk/BK)] or one per query
            head [Hq, ...] with block_size, bias (float, broadcast to [B, Hq, N, Nk]; only -inf
            masks). Per-head layouts and biases are indexed by the layer's own heads (a pruned
            head's are not read).
        scale: default 1/sqrt(Dqk).    storage: "f32", "f16" or "bf16": X (and X_kv) rounded
            to it first, Y stored in it.    path / variant: the attention's, as in
            clattn.attention.
        kv_cache: a clattn.KVCache on the layer's context with B sequences,
            info().attention_heads_kv heads and the layer's Dqk and Dv (layer.new_cache() makes
            one): the new tokens' K and V are appended to it (sequence b appends its first
            new_lengths[b] rows, int [B] or one int, default N), then their queries attend over
            the cache (docs/semantics.md section 6; rows past new_lengths[b] are padding, with
            Y = b_o). Masks see each sequence's cached rows as KVCache.attention does: a block
            layout is [ceil(N/BQ), ceil(capacity/BK)], a bias broadcasts to
            [B, Hq, N, capacity]. Appending a token at a time gives, row for row, one causal
            call over the whole sequence. x_kv must be None (the layer's d_kv must be d_model).
        Raises clattn.Error for every bad argument, whether the package or the library finds it
        (its message says what).
        """
        storage_dtype = parse_storage(storage)
        xt, unbatched = self._input(x, "x", self._d_model, storage_dtype)
        batch, n = xt.shape[0], xt.shape[1]
        xkv: Optional[HostTensor] = None
        if x_kv is not None:
            if kv_cache is not None:
                raise invalid("x_kv and kv_cache: a call over a KV cache projects K and V from x")
            xkv, kv_unbatched = self._input(x_kv, "x_kv", self._d_kv, storage_dtype)
            if kv_unbatched != unbatched:
                raise invalid(
                    f"x has shape {tuple(x.shape)} and x_kv {tuple(x_kv.shape)}: give both a batch "
                    "dimension ([B, N, width]) or neither ([N, width])"
                )
            if xkv.shape[0] != batch:
                raise invalid(
                    f"x has shape {xt.shape} and x_kv {xkv.shape} (as [B, N, width]): their batches differ"
                )
            if xkv.dtype != xt.dtype:
                raise invalid(
                    f"x ({DTYPE_NAMES[xt.dtype]}) and x_kv ({DTYPE_NAMES[xkv.dtype]}) must share one "
                    "dtype; convert them, or set storage="
                )
        if kv_cache is not None and not isinstance(kv_cache, KVCache):
            raise invalid(f"kv_cache must be a clattn.KVCache, not {type(kv_cache).__name__}")
        if new_lengths is not None and kv_cache is None:
            raise invalid("new_lengths is for calls with kv_cache=")
        dtype = xt.dtype
        if kv_cache is not None:
            len_k = kv_cache.capacity
        else:
            len_k = xkv.shape[1] if xkv is not None else n

        hq, hkv, dqk, dv = self._heads, self._kv_heads, self._dim_qk, self._dim_v
        call = _Call(
            _dense(batch, hq, n, dqk),
            _dense(batch, hkv, len_k, dqk),
            _dense(batch, hkv, len_k, dv),
            "bshd",
            dtype,
        )
        call.desc.o = _dense(batch, hq, n, dv).as_c()
        call.set_options(options)

        y = empty((batch, n, self._d_model), dtype, like=xt)
        if kv_cache is None:
            with self._locked() as (ctx, mha):
                status = _capi.lib.clattn_mha_forward_host(
                    mha, ctypes.byref(call.desc), xt.pointer, None if xkv is None else xkv.pointer, y.pointer
                )
                check(status, context_handle=ctx)
        else:
            counts = None
            if new_lengths is not None:
                counts = _checks.int32_array(
                    new_lengths, "new_lengths", (batch,), "new rows a sequence", True
                )
            self._forward_cache(call, xt, y, kv_cache, counts)
        return y.owner[0] if unbatched else y.owner

    __call__ = forward

    def _forward_cache(
        self, call: _Call, xt: HostTensor, y: HostTensor, cache: KVCache, counts: Optional[np.ndarray]
    ) -> None:
        """clattn_mha_forward_cache, which takes device buffers: X (and the bias) uploaded to
        buffers on the layer's context, Y read back."""
        d = call.desc
        x_bytes = int(np.prod(xt.shape)) * _ELEMENT_BYTES[xt.dtype]
        y_bytes = int(np.prod(y.shape)) * _ELEMENT_BYTES[y.dtype]
        with self._locked() as (ctx, mha), cache._locked() as (_, cache_handle):
            with _opencl.Buffers(ctx) as buffers:
                x_buffer = buffers.upload(xt.pointer, x_bytes, "X")
                y_buffer = buffers.output(y_bytes, "Y")
                if d.bias_host:
                    s = d.bias_strides  # the key stride is 1 (set_bias makes it so)
                    count = 1 + (d.batch - 1) * s.stride_batch + (d.heads_q - 1) * s.stride_head
                    count += (d.len_q - 1) * s.stride_seq + (d.len_k - 1)
                    address = ctypes.cast(d.bias_host, ctypes.c_void_p).value
                    d.bias = buffers.upload(address, count * 4, "the bias")
                    d.bias_host = None
                status = _capi.lib.clattn_mha_forward_cache(
                    mha, cache_handle, ctypes.byref(d), x_buffer, int32_pointer(counts), y_buffer, None
                )
                check(status, context_handle=ctx)
                buffers.read(y_buffer, y.pointer, y_bytes, "Y")
