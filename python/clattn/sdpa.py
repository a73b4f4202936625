"""clattn.scaled_dot_product_attention: torch.nn.functional.scaled_dot_product_attention's
signature and semantics, computed by clattn.

How it maps PyTorch's semantics onto clattn's (exactly, with no approximation):
- Shapes (..., Hq, L, E), (..., H, S, E), (..., H, S, Ev) -> (..., Hq, L, Ev); the leading
  dimensions broadcast as in torch.matmul and are flattened into clattn's batch.
- Heads: H == Hq; H == 1 (broadcast, MQA); or, with enable_gqa, H dividing Hq (query head h
  reads KV head h // (Hq // H), as repeat_interleave does). Broadcasts read memory with
  stride 0, never copied.
- is_causal is PyTorch's TOP-LEFT alignment (query i sees keys j <= i), not clattn's
  bottom-right one (query i sees j <= i + S - L). With S > L, no query sees a key past L - 1, so
  K and V are cut to their first L rows (a view) and clattn's causal applies (S' = L); with
  S < L it is clattn's window (left unbounded, right L - S); with S == L they agree.
- attn_mask: a boolean mask (True = attend) becomes a bias of 0 / -inf; a float mask is added
  as a bias (only -inf masks: torch.finfo(float32).min is a large finite number, added like
  any other, as PyTorch does). It broadcasts to (..., Hq, L, S).
- A query row that may see no key: PyTorch's documented reference computes NaN there, but
  PyTorch's own kernels (the math kernel since 2.5, and the fused CPU kernels) return zeros.
  clattn returns zeros too (its empty-row rule: O = 0), so this function matches what
  torch.nn.functional.scaled_dot_product_attention returns.
- scale=None is 1/sqrt(E), as in PyTorch; scale=0.0 gives PyTorch's uniform weights; a scale
  that is not 0 but rounds to 0 in float32 (1e-46) is refused, as clattn.attention refuses it.
- Zero sizes give what PyTorch gives: an empty result when a dimension of the output is 0,
  zeros when S is 0 (every row sees no key), and uniform weights when E is 0 (every score 0).
- dropout_p must be 0: clattn computes inference attention, with no dropout.
- No autograd: tensors that require grad raise clattn.Error outside torch.no_grad().
Inputs with strides clattn cannot read in place (a negative stride, a strided last dimension)
are copied, as PyTorch accepts any strides.
"""

from __future__ import annotations

from typing import Any, List, Optional, Sequence, Tuple

import numpy as np

from . import _checks
from ._tensors import as_numpy, host_tensor, host_values, is_torch_tensor, torch_module
from .attention import attention
from .errors import invalid


def _broadcast_to(x: Any, shape: Sequence[int]) -> Any:
    if is_torch_tensor(x):
        return x.expand(*shape)
    return np.broadcast_to(x, tuple(shape))


def _shape(x: Any) -> Tuple[int, ...]:
    return tuple(int(n) for n in x.shape)


def _as_array(x: Any, name: str) -> Any:
    if is_torch_tensor(x) or isinstance(x, np.ndarray):
        return x
    if x is None:
        raise invalid(f"{name} must be an array or a tensor, not None")
    return as_numpy(x, name)


def _broadcast_shapes(shapes: List[Tuple[int, ...]], what: str) -> Tuple[int, ...]:
    try:
        return tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        raise invalid(f"{what} do not broadcast: {', '.join(map(str, shapes))}") from None


def _heads(hq: int, hkv: int, enable_gqa: bool) -> int:
    """The query heads of the call (PyTorch broadcasts a single query head over KV heads)."""
    if hq == hkv or hkv == 1:
        return hq
    if enable_gqa:
        if hq % hkv != 0:
            raise invalid(
                f"enable_gqa: the query heads ({hq}) must be a multiple of the key/value heads ({hkv})"
            )
        return hq
    if hq == 1:
        return hkv
    raise invalid(
        f"query has {hq} heads and key/value {hkv}: they must be equal, or one of them 1, or "
        "set enable_gqa=True for grouped-query attention"
    )


def _to_bhsd(query: Any, key: Any, value: Any, enable_gqa: bool) -> Tuple[Any, Any, Any, Tuple[int, ...]]:
    """q, k, v as 4-D [B, H, N, D] views (broadcasting with stride 0), and the leading
    dimensions of the output."""
    shapes = [_shape(x) for x in (query, key, value)]
    if any(len(s) < 2 for s in shapes):
        raise invalid(f"query, key and value need at least 2 dimensions (..., L, E): {shapes}")
    (L, E), (S, Ek), (Sv, Ev) = shapes[0][-2:], shapes[1][-2:], shapes[2][-2:]
    if E != Ek:
        raise invalid(f"query and key need the same last dimension (E): {shapes[0]} and {shapes[1]}")
    if S != Sv:
        raise invalid(f"key and value need the same length S: {shapes[1]} and {shapes[2]}")
    head = [s[-3] if len(s) >= 3 else 1 for s in shapes]
    batch_shape = _broadcast_shapes([s[:-3] for s in shapes], "the leading (batch) dimensions")
    hkv = _broadcast_shapes([(head[1],), (head[2],)], "the key and value heads")[0]
    hq = _heads(head[0], hkv, enable_gqa)
    batch = int(np.prod(batch_shape, dtype=np.int64))

    def four_d(x: Any, heads: int, rows: int, dim: int) -> Any:
        if len(_shape(x)) < 3:
            x = x.reshape((1,) + _shape(x))
        x = _broadcast_to(x, batch_shape + (heads, rows, dim))
        return x.reshape((batch, heads, rows, dim))  # a view where the strides allow it

    q = four_d(query, hq, L, E)
    k = four_d(key, hkv, S, E)
    v = four_d(value, hkv, S, Ev)
    # the leading dimensions of all three broadcast, as torch.matmul's do
    out_shape = batch_shape + ((hq,) if any(len(s) >= 3 for s in shapes) else ()) + (L, Ev)
    return q, k, v, out_shape


def _mask_as_float32(attn_mask: Any, query: Any) -> np.ndarray:
    """attn_mask as float32 values: a boolean mask as 0 (True, attend) / -inf (False); a float
    mask as it is. The dtypes PyTorch takes: bool, float32, or the query's dtype."""
    if is_torch_tensor(attn_mask):
        torch = torch_module()
        mask = host_values(attn_mask, "attn_mask")
        if mask.dtype == torch.bool:
            bias = torch.zeros(mask.shape, dtype=torch.float32)
            return bias.masked_fill_(~mask, float("-inf")).numpy()
        if mask.dtype == torch.float32 or (is_torch_tensor(query) and mask.dtype == query.dtype):
            return mask.float().numpy()
        raise invalid(f"attn_mask: dtype {mask.dtype} must be bool, float32 or the query's dtype")
    mask = as_numpy(attn_mask, "attn_mask")
    if mask.dtype == np.bool_:
        return np.where(mask, np.float32(0), np.float32(-np.inf))
    if mask.dtype == np.float32 or mask.dtype == getattr(query, "dtype", None):
        return mask.astype(np.float32, copy=False)
    raise invalid(f"attn_mask: dtype {mask.dtype} must be bool, float32 or the query's dtype")


def _mask_as_bias(
    attn_mask: Any, query: Any, out_shape: Tuple[int, ...], batch: int, hq: int, L: int, S: int
) -> np.ndarray:
    """attn_mask as a float32 bias [B, Hq, L, S], broadcast with stride 0 where it can be."""
    mask = _mask_as_float32(attn_mask, query)
    weights_shape = out_shape[:-2] + (L, S)  # PyTorch's attention weights (..., Hq, L, S)
    try:
        mask = np.broadcast_to(mask, weights_shape)
    except ValueError:
        raise invalid(
            f"attn_mask of shape {mask.shape} does not broadcast to the attention weights {weights_shape}"
        ) from None
    return mask.reshape((batch, hq, L, S))


def _readable(x: Any, name: str) -> Any:
    """x itself when clattn can read it in place, else a contiguous copy (PyTorch takes any
    strides; clattn.attention takes only a last-dimension stride of 1 and no negative one)."""
    if host_tensor(x, name).describable():
        return x
    return x.contiguous() if is_torch_tensor(x) else np.ascontiguousarray(x)


def _zeros(like: Any, shape: Tuple[int, ...]) -> Any:
    """Zeros of `like`'s kind (torch tensor or NumPy array) and dtype."""
    if is_torch_tensor(like):
        return torch_module().zeros(shape, dtype=like.dtype)
    return np.zeros(shape, dtype=like.dtype)


def scaled_dot_product_attention(
    query: Any,
    key: Any,
    value: Any,
    attn_mask: Any = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: Optional[float] = None,
    enable_gqa: bool = False,
) -> Any:
    """torch.nn.functional.scaled_dot_product_attention, computed by clattn on the default
    context's device (clattn.default_context(); choose one with `with clattn.using(ctx):`).

    query: (..., Hq, L, E)    key: (..., H, S, E)    value: (..., H, S, Ev)
    returns (..., Hq, L, Ev), of the query's type and dtype: CPU torch tensors (float32,
    float16, bfloat16) or NumPy arrays (float32, float16).
    attn_mask: broadcastable to (..., Hq, L, S); bool (True = attend) or float (added).
    is_causal: top-left aligned, as PyTorch: query i sees keys j <= i. Not with attn_mask.
    dropout_p: must be 0.0.    scale: default 1/sqrt(E).
    enable_gqa: key/value may have fewer heads, dividing Hq.
    See the module's docstring for how each maps onto clattn, and what differs from
    clattn.attention (bottom-right causal alignment).
    """
    if _checks.real(dropout_p, "dropout_p") != 0.0:
        raise invalid(
            f"dropout_p={dropout_p}: clattn computes attention for inference and has no dropout; "
            "pass dropout_p=0.0 (in a model: call model.eval())"
        )
    is_causal = _checks.flag(is_causal, "is_causal")
    enable_gqa = _checks.flag(enable_gqa, "enable_gqa")
    scale = _checks.scale(scale, zero_allowed=True)  # 0: PyTorch's uniform weights
    if is_causal and attn_mask is not None:
        raise invalid("attn_mask and is_causal=True cannot both be given (PyTorch refuses them too)")
    query, key, value = (_as_array(x, n) for x, n in ((query, "query"), (key, "key"), (value, "value")))
    q, k, v, out_shape = _to_bhsd(query, key, value, enable_gqa)
    batch, hq, L, _ = _shape(q)
    S = _shape(k)[2]

    causal, window = False, None
    if is_causal:
        if S > L:
            k, v = k[:, :, :L], v[:, :, :L]
            causal = True
        elif S == L:
            causal = True
        else:
            window = (-1, L - S)
    bias = None if attn_mask is None else _mask_as_bias(attn_mask, query, out_shape, batch, hq, L, S)
    if S == 0 or int(np.prod(out_shape, dtype=np.int64)) == 0:
        for x, name in ((query, "query"), (key, "key"), (value, "value")):
            host_tensor(x, name)  # what a call would refuse (dtype, device, grad) still is
        return _zeros(query, out_shape)  # nothing to compute, or rows that see no key: O = 0
    if _shape(q)[3] == 0:  # E = 0: every score is 0, as with scale 0
        q, k, scale = _zeros(q, (batch, hq, L, 1)), _zeros(k, _shape(k)[:3] + (1,)), 0.0
    if scale == 0.0:
        q, scale = _zeros(q, _shape(q)), 1.0  # every score 0, as PyTorch's scale 0 makes them
    out = attention(
        _readable(q, "query"),
        _readable(k, "key"),
        _readable(v, "value"),
        layout="bhsd",
        causal=causal,
        window=window,
        bias=bias,
        scale=scale,
    )
    return out.reshape(out_shape)
