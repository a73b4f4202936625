"""Soft-capping, ALiBi and attention sinks through clattn.attention and KVCache.attention, against
a float64 NumPy reference written from docs/semantics.md section 8 (independent of the library's
reference), on every path; clattn.alibi_slopes against BLOOM's formula; q4_0 caches."""

from __future__ import annotations

import math

import numpy as np
import pytest

import clattn
from reference import TOLERANCES, allowed_keys


def modified_reference(q, k, v, softcap=None, slopes=None, sinks=None, causal=False, scale=None):
    """O [B, Hq, Nq, Dv] and LSE [B, Hq, Nq], float64, bhsd."""
    q, k, v = (np.asarray(x, dtype=np.float64) for x in (q, k, v))
    B, Hq, Nq, D = q.shape
    Hkv, Nk = k.shape[1], k.shape[2]
    k, v = np.repeat(k, Hq // Hkv, axis=1), np.repeat(v, Hq // Hkv, axis=1)
    scale = 1.0 / math.sqrt(D) if scale is None else scale
    s = scale * np.einsum("bhid,bhjd->bhij", q, k)
    if softcap:
        s = softcap * np.tanh(s / softcap)
    p = np.arange(Nq)[:, None] + Nk - Nq
    if slopes is not None:
        per = np.broadcast_to(np.asarray(slopes, dtype=np.float64).reshape(-1, Hq), (B, Hq))
        s = s - per[:, :, None, None] * np.abs(p - np.arange(Nk)[None, :])
    allowed = np.broadcast_to(allowed_keys(Hq, Nq, Nk, causal=causal)[None], s.shape)
    s = np.where(allowed, s, -np.inf)
    sink = np.full((B, Hq, Nq, 1), -np.inf) if sinks is None else np.broadcast_to(
        np.asarray(sinks, dtype=np.float64)[None, :, None, None], (B, Hq, Nq, 1))
    full = np.concatenate([s, sink], axis=-1)
    m = full.max(axis=-1, keepdims=True)
    m = np.where(np.isneginf(m), 0, m)
    e = np.exp(full - m)
    total = e.sum(axis=-1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        o = np.where(total > 0, np.einsum("bhij,bhjd->bhid", e[..., :-1], v) / total, 0.0)
        lse = np.where(total[..., 0] > 0, m[..., 0] + np.log(total[..., 0]), -np.inf)
    return o, lse


def close(got, want, dtype="float32"):
    atol, rtol = TOLERANCES[dtype]
    np.testing.assert_allclose(np.asarray(got, dtype=np.float64), want, atol=atol, rtol=rtol)


@pytest.mark.parametrize("path", ["fused", "gemm", "auto", "reference"])
def test_softcap_alibi_and_sinks_match_the_reference(context, path):
    rng = np.random.default_rng(33)
    q = rng.uniform(-1, 1, (2, 4, 17, 32)).astype(np.float32)
    k = rng.uniform(-1, 1, (2, 2, 23, 32)).astype(np.float32)
    v = rng.uniform(-1, 1, (2, 2, 23, 32)).astype(np.float32)
    slopes = rng.uniform(0, 1, (2, 4)).astype(np.float32)
    sinks = rng.uniform(-2, 2, 4).astype(np.float32)
    cases = [
        dict(softcap=1.5, scale=1.0),
        dict(alibi_slopes=clattn.alibi_slopes(4), causal=True),
        dict(sinks=sinks),
        dict(softcap=2.0, alibi_slopes=slopes, sinks=sinks, causal=True),
    ]
    for case in cases:
        o, lse = clattn.attention(q, k, v, path=path, return_lse=True, context=context, **case)
        want_o, want_lse = modified_reference(
            q, k, v, case.get("softcap"), case.get("alibi_slopes"), case.get("sinks"),
            case.get("causal", False), case.get("scale"))
        close(o, want_o)
        np.testing.assert_allclose(lse, want_lse, atol=1e-4, rtol=1e-4)


def test_alibi_slopes_are_bloom_s():
    def bloom(n):  # BLOOM's build_alibi_tensor / the ALiBi paper's get_slopes
        closest = 2 ** math.floor(math.log2(n))
        base = [2 ** (-8 * (i + 1) / closest) for i in range(closest)]
        extra = [2 ** (-4 * (2 * i + 1) / closest) for i in range(n - closest)]
        return base + extra
    for heads in (1, 6, 8, 12, 32, 40):
        np.testing.assert_allclose(clattn.alibi_slopes(heads), bloom(heads), rtol=1e-7)
    with pytest.raises(clattn.Error):
        clattn.alibi_slopes(0)


def test_bad_modifiers_are_refused(context):
    q = np.zeros((1, 2, 3, 32), np.float32)
    with pytest.raises(clattn.Error, match="softcap"):
        clattn.attention(q, q, q, softcap=-1.0, context=context)
    with pytest.raises(clattn.Error, match="softcap=1e-50"):  # 0 in float32, which means off
        clattn.attention(q, q, q, softcap=1e-50, context=context)
    with pytest.raises(clattn.Error, match="sinks has shape"):
        clattn.attention(q, q, q, sinks=np.zeros(3, np.float32), context=context)
    with pytest.raises(clattn.Error, match="alibi_slopes"):
        clattn.attention(q, q, q, alibi_slopes=[np.nan, 1.0], context=context)


@pytest.mark.parametrize("dtype", ["q4_0", "q8_0"])
def test_quantised_cache_with_modifiers_matches_its_dequantised_values(context, dtype):
    rng = np.random.default_rng(4)
    B, Hq, Hkv, D, cap = 2, 4, 2, 64, 40
    cache = clattn.KVCache(B, Hkv, D, cap, dtype=dtype, layout="bhsd", context=context)
    k_new = rng.uniform(-1, 1, (B, Hkv, 30, D)).astype(np.float32)
    v_new = rng.uniform(-1, 1, (B, Hkv, 30, D)).astype(np.float32)
    cache.append(k_new, v_new)
    k_all, v_all = cache.read()  # dequantised
    q = rng.uniform(-1, 1, (B, Hq, 1, D)).astype(np.float32)
    sinks = rng.uniform(-1, 1, Hq).astype(np.float32)
    o = cache.attention(q, softcap=3.0, alibi_slopes=clattn.alibi_slopes(Hq), sinks=sinks)
    want, _ = modified_reference(q, k_all[:, :, :30], v_all[:, :, :30], 3.0, clattn.alibi_slopes(Hq), sinks)
    close(o, want, "float16")
    assert cache.dtype == dtype
