"""Float64 NumPy references for the tests, written from docs/semantics.md and PyTorch's documentation,
independent of the C library's own reference.

- attention_reference: docs/semantics.md sections 1 and 2 (bottom-right alignment, every mask kind, GQA).
- torch_sdpa_reference: torch.nn.functional.scaled_dot_product_attention as PyTorch documents
  it (its reference code), with one documented deviation: a row that may see no key gives
  zeros, as PyTorch's kernels return since 2.5 (its reference code would give NaN).
- bfloat16 rounding (round to nearest even) on uint16 bit patterns, and docs/semantics.md section 4's
  tolerances.
"""

from __future__ import annotations

import math
from typing import Optional, Sequence, Tuple

import numpy as np

TOLERANCES = {  # docs/semantics.md section 4: (atol, rtol)
    "float32": (2e-5, 2e-4),
    "float16": (2e-3, 4e-3),
    "bfloat16": (4e-3, 1e-2),
}


# ---------------------------------------------------------------- bfloat16 bits


def to_bf16_bits(x: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bit patterns (uint16), rounding to nearest even (NaN stays NaN)."""
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    nan = np.isnan(x)
    rounded[nan] = (bits[nan] >> 16) | 0x40
    return rounded.astype(np.uint16)


def from_bf16_bits(bits: np.ndarray) -> np.ndarray:
    """bfloat16 bit patterns (uint16) -> float32, exactly."""
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


# ---------------------------------------------------------------- docs/semantics.md section 2


def allowed_keys(
    heads: int,
    len_q: int,
    len_k: int,
    causal: bool = False,
    window: Optional[Tuple[int, int]] = None,
    dilation: int = 1,
    global_tokens: Sequence[int] = (),
    block_layout: Optional[np.ndarray] = None,
    block_size: Optional[Tuple[int, int]] = None,
) -> np.ndarray:
    """bool [heads, len_q, len_k]: which keys each query may see, pair by pair."""
    i = np.arange(len_q)[:, None]
    j = np.arange(len_k)[None, :]
    p = i + (len_k - len_q)  # queries aligned to the end of the keys
    causal_ok = (j <= p) if causal else np.ones((len_q, len_k), bool)
    left, right = (-1 if side is None else side for side in (window or (-1, -1)))
    window_ok = np.ones((len_q, len_k), bool)
    if left >= 0:
        window_ok &= j >= p - left
    if right >= 0:
        window_ok &= j <= p + right
    if dilation > 1:
        window_ok &= (p - j) % dilation == 0
    is_global = np.isin(j, list(global_tokens)) | np.isin(p, list(global_tokens))
    allowed = causal_ok & (window_ok | is_global)
    allowed = np.broadcast_to(allowed, (heads, len_q, len_k)).copy()
    if block_layout is not None:
        bq, bk = block_size
        layout = np.asarray(block_layout) != 0
        layout = layout if layout.ndim == 3 else layout[None]
        cells = layout[:, (i // bq)[:, 0], :][:, :, (j // bk)[0]]
        allowed &= np.broadcast_to(cells, allowed.shape)
    return allowed


# ---------------------------------------------------------------- docs/semantics.md section 1


def _softmax_rows(scores: np.ndarray, allowed: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """P and LSE over the allowed entries of the last axis; empty rows: P = 0, LSE = -inf."""
    masked = np.where(allowed, scores, -np.inf)
    with np.errstate(invalid="ignore"):
        peak = np.max(masked, axis=-1, keepdims=True)
    finite_peak = np.where(np.isfinite(peak), peak, 0.0)
    weights = np.where(allowed, np.exp(masked - finite_peak), 0.0)
    total = weights.sum(axis=-1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        p = np.where(total > 0, weights / np.where(total > 0, total, 1), 0.0)
        lse = np.where(
            total[..., 0] > 0, np.log(np.where(total > 0, total, 1))[..., 0] + finite_peak[..., 0], -np.inf
        )
    return p, lse


def attention_reference(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    layout: str = "bhsd",
    bias: Optional[np.ndarray] = None,
    scale: Optional[float] = None,
    **mask: object,
) -> Tuple[np.ndarray, np.ndarray]:
    """O [layout] and LSE [B, Hq, Nq] in float64 from (already rounded) float inputs."""
    q, k, v = (np.asarray(x, dtype=np.float64) for x in (q, k, v))
    if layout == "bshd":
        q, k, v = (x.transpose(0, 2, 1, 3) for x in (q, k, v))
    B, Hq, Nq, D = q.shape
    Hkv, Nk = k.shape[1], k.shape[2]
    group = Hq // Hkv
    k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)  # head h reads h // group
    scale = 1.0 / math.sqrt(D) if scale is None else scale
    scores = scale * np.einsum("bhid,bhjd->bhij", q, k)
    allowed = allowed_keys(Hq, Nq, Nk, **mask)[None]  # type: ignore[arg-type]
    if bias is not None:
        full_bias = np.broadcast_to(np.asarray(bias, dtype=np.float64), scores.shape)
        scores = scores + np.where(np.isneginf(full_bias), 0, full_bias)
        allowed = allowed & ~np.isneginf(full_bias)
    allowed = np.broadcast_to(allowed, scores.shape)
    p, lse = _softmax_rows(scores, allowed)
    o = np.einsum("bhij,bhjd->bhid", p, v)
    if layout == "bshd":
        o = o.transpose(0, 2, 1, 3)
    return o, lse


# ---------------------------------------------------------------- PyTorch's documented SDPA


def torch_sdpa_reference(
    query: np.ndarray,
    key: np.ndarray,
    value: np.ndarray,
    attn_mask: Optional[np.ndarray] = None,
    is_causal: bool = False,
    scale: Optional[float] = None,
    enable_gqa: bool = False,
) -> np.ndarray:
    """PyTorch's reference implementation from its documentation, in float64 NumPy:

        L, S = query.size(-2), key.size(-2)
        scale_factor = 1 / math.sqrt(query.size(-1)) if scale is None else scale
        attn_bias = zeros(L, S); if is_causal: attn_bias[~tril(ones(L, S))] = -inf
        bool mask: attn_bias[~attn_mask] = -inf; float mask: attn_bias = attn_mask + attn_bias
        enable_gqa: key, value = repeat_interleave(..., Hq // H, dim=-3)
        attn_weight = softmax(query @ key.T * scale_factor + attn_bias); return attn_weight @ value

    with torch.matmul's broadcasting of the leading dimensions, and zeros for rows with no
    allowed key (PyTorch's kernels' behaviour, not the NaN of the documented code)."""
    query, key, value = (np.asarray(x, dtype=np.float64) for x in (query, key, value))
    L, S = query.shape[-2], key.shape[-2]
    scale_factor = 1 / math.sqrt(query.shape[-1]) if scale is None else scale
    attn_bias = np.zeros((L, S))
    if is_causal:
        attn_bias[~np.tril(np.ones((L, S), bool))] = -np.inf
    if attn_mask is not None:
        attn_mask = np.asarray(attn_mask)
        if attn_mask.dtype == np.bool_:
            attn_bias = np.where(attn_mask, attn_bias, -np.inf)
        else:
            attn_bias = attn_mask.astype(np.float64) + attn_bias
    if enable_gqa:
        key = np.repeat(key, query.shape[-3] // key.shape[-3], axis=-3)
        value = np.repeat(value, query.shape[-3] // value.shape[-3], axis=-3)
    scores = query @ np.swapaxes(key, -2, -1) * scale_factor
    scores = scores + attn_bias
    allowed = ~np.isneginf(scores)
    p, _ = _softmax_rows(np.where(allowed, scores, 0), allowed)
    return p @ value


# ---------------------------------------------------------------- comparison


def assert_close(got: np.ndarray, ref: np.ndarray, dtype: str, what: str = "O") -> None:
    """Every element within the contract's tolerance for `dtype`; NaN and infinities must match. Lists
    the first few mismatches with their index."""
    atol, rtol = TOLERANCES[dtype]
    got = np.asarray(got, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    assert got.shape == ref.shape, f"{what}: shape {got.shape}, expected {ref.shape}"
    finite = np.isfinite(ref)
    special_ok = np.where(finite, True, (got == ref) | (np.isnan(got) & np.isnan(ref)))
    with np.errstate(invalid="ignore"):
        close = np.where(finite, np.abs(got - ref) <= atol + rtol * np.abs(ref), special_ok)
    if not close.all():
        bad = np.argwhere(~close)[:5]
        lines = [
            f"  {tuple(int(x) for x in index)}: got {got[tuple(index)]!r}, expected {ref[tuple(index)]!r}"
            for index in bad
        ]
        raise AssertionError(
            f"{what}: {int((~close).sum())} of {close.size} elements outside {dtype} tolerance\n"
            + "\n".join(lines)
        )


def assert_lse_close(got: np.ndarray, ref: np.ndarray) -> None:
    """docs/semantics.md section 4: |lse - ref| <= 1e-4 * max(1, |ref|); -inf rows exactly."""
    got = np.asarray(got, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    assert got.shape == ref.shape
    assert np.array_equal(np.isneginf(got), np.isneginf(ref)), "LSE: -inf rows differ"
    finite = np.isfinite(ref)
    error = np.abs(got[finite] - ref[finite])
    assert (error <= 1e-4 * np.maximum(1, np.abs(ref[finite]))).all(), f"LSE: worst error {error.max()}"
