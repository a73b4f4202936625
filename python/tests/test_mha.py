"""clattn.MultiheadAttention against a float64 NumPy implementation of the layer (projections,
heads split, attention by reference.py's reference, heads concatenated, W_o): self- and
cross-attention, GQA/MQA, masks and a bias, pruned heads (equal to the unpruned layer with the
pruned heads' O zeroed before W_o), float16 and bfloat16 weights and inputs, decoding over a
KVCache (equal to one causal call), torch.nn.MultiheadAttention itself, and the errors."""

from __future__ import annotations

import math
from typing import Any, Dict, Optional

import numpy as np
import pytest
from conftest import uniform
from reference import TOLERANCES, attention_reference, from_bf16_bits, to_bf16_bits

import clattn

# ---------------------------------------------------------------- the layer in NumPy


D_MODEL, DQK, DV = 48, 16, 8  # the sizes of every layer the tests make


def make_weights(
    rng: np.random.Generator, heads: int, kv_heads: int, d_kv: int = D_MODEL, bias: bool = True
) -> Dict[str, np.ndarray]:
    """float32 weights [out, in] of a layer of d_model D_MODEL, head dims DQK and DV, uniform in
    ±1/sqrt(in), as nn.Linear initialises them."""
    shapes = {
        "w_q": (heads * DQK, D_MODEL),
        "w_k": (kv_heads * DQK, d_kv),
        "w_v": (kv_heads * DV, d_kv),
        "w_o": (D_MODEL, heads * DV),
    }
    weights = {
        n: (uniform(rng, *s) / np.float32(math.sqrt(s[1]))).astype(np.float32) for n, s in shapes.items()
    }
    if bias:
        for name, (rows, cols) in shapes.items():
            weights["b" + name[1:]] = (uniform(rng, rows) / np.float32(math.sqrt(cols))).astype(np.float32)
    return weights


def layer_reference(
    weights: Dict[str, np.ndarray],
    heads: int,
    kv_heads: int,
    x: np.ndarray,
    x_kv: Optional[np.ndarray] = None,
    head_mask: Optional[Any] = None,
    **attention: Any,
) -> np.ndarray:
    """Y [B, N, d_model] in float64: Q, K, V projected and stored as float32 (the layer's
    definition), split into heads, attention_reference (bshd), pruned heads' O zeroed, heads
    concatenated, W_o."""
    w = {n: np.asarray(v, dtype=np.float64) for n, v in weights.items()}
    x = np.asarray(x, dtype=np.float64)
    x_kv = x if x_kv is None else np.asarray(x_kv, dtype=np.float64)
    batch, n, _ = x.shape
    nk = x_kv.shape[1]

    def project(inputs: np.ndarray, name: str) -> np.ndarray:
        out = inputs @ w["w_" + name].T + w.get("b_" + name, 0.0)
        return out.astype(np.float32).astype(np.float64)

    dqk = w["w_q"].shape[0] // heads
    dv = w["w_v"].shape[0] // kv_heads
    q = project(x, "q").reshape(batch, n, heads, dqk)
    k = project(x_kv, "k").reshape(batch, nk, kv_heads, dqk)
    v = project(x_kv, "v").reshape(batch, nk, kv_heads, dv)
    o, _ = attention_reference(q, k, v, layout="bshd", **attention)  # [B, N, Hq, Dv]
    if head_mask is not None:
        o = o * (np.asarray(head_mask) != 0)[None, None, :, None]
    return o.reshape(batch, n, heads * dv) @ w["w_o"].T + w.get("b_o", 0.0)


def assert_layer_close(got: Any, ref: np.ndarray, dtype: str = "float32", what: str = "Y") -> None:
    """docs/layer.md: docs/semantics.md section 4's tolerance for Y's type, the absolute term
    scaled by the largest |Y| of the reference."""
    atol, rtol = TOLERANCES[dtype]
    got = np.asarray(got, dtype=np.float64)
    assert got.shape == ref.shape, f"{what}: shape {got.shape}, expected {ref.shape}"
    error = np.abs(got - ref)
    bound = atol * np.abs(ref).max() + rtol * np.abs(ref)
    assert np.isfinite(got).all(), f"{what}: not finite"
    outside = int((error > bound).sum())
    assert (
        outside == 0
    ), f"{what}: {outside} elements outside {dtype} tolerance; worst error {error.max():.3g}"


def make_layer(
    context: clattn.Context, weights: Dict[str, np.ndarray], heads: int, kv_heads: int, **options: Any
):
    return clattn.MultiheadAttention(heads=heads, kv_heads=kv_heads, context=context, **weights, **options)


# ---------------------------------------------------------------- against the NumPy layer


@pytest.mark.parametrize("heads, kv_heads", [(4, 4), (4, 2), (4, 1)], ids=["mha", "gqa", "mqa"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_self_attention_matches_the_reference(context, rng, heads: int, kv_heads: int, causal: bool) -> None:
    weights = make_weights(rng, heads, kv_heads)
    x = uniform(rng, 2, 9, D_MODEL)
    with make_layer(context, weights, heads, kv_heads) as layer:
        assert (layer.d_model, layer.d_kv, layer.dim_qk, layer.dim_v) == (D_MODEL, D_MODEL, DQK, DV)
        y = layer(x, causal=causal)
        assert isinstance(y, np.ndarray) and y.dtype == np.float32 and y.shape == x.shape
        assert_layer_close(y, layer_reference(weights, heads, kv_heads, x, causal=causal))
        info = layer.info()
        assert (info.heads, info.kv_heads, info.heads_kept, info.attention_heads_kv) == (
            heads,
            kv_heads,
            heads,
            kv_heads,
        )
        assert info.has_bias and not info.kv_duplicated and info.weight_dtype == "float32"
        stats = layer.last_stats()
        assert stats.attention_heads_q == heads and stats.projection_flops > 0 and stats.kernel
        assert stats.projection_gemm in ("panels", "clblast") and stats.output_gemm in ("panels", "clblast")
        assert stats.gemm_kernel


def test_cross_attention_matches_the_reference(context, rng) -> None:
    """X_kv of its own width d_kv and length Nk != N; a window, bottom-right aligned."""
    weights = make_weights(rng, 4, 2, d_kv=24)
    x, x_kv = uniform(rng, 2, 5, D_MODEL), uniform(rng, 2, 11, 24)
    with make_layer(context, weights, 4, 2) as layer:
        assert layer.d_kv == 24
        assert_layer_close(layer(x, x_kv), layer_reference(weights, 4, 2, x, x_kv))
        got = layer(x, x_kv, window=(3, 1), scale=0.3)
        assert_layer_close(got, layer_reference(weights, 4, 2, x, x_kv, window=(3, 1), scale=0.3))


def test_masks_and_bias(context, rng) -> None:
    weights = make_weights(rng, 4, 2, bias=False)
    x = uniform(rng, 2, 12, D_MODEL)
    with make_layer(context, weights, 4, 2) as layer:
        assert not layer.info().has_bias
        mask = dict(window=(4, 0), dilation=2, global_tokens=[0])
        assert_layer_close(layer(x, **mask), layer_reference(weights, 4, 2, x, **mask))
        # one block layout a query head: head h keeps the blocks (i + j + h) % 2 == 0, the
        # diagonal always
        grid = np.array(
            [[[(i + j + h) % 2 == 0 or i == j for j in range(3)] for i in range(3)] for h in range(4)]
        )
        layout = grid.astype(np.uint8)
        got = layer(x, block_layout=layout, block_size=4)
        assert_layer_close(got, layer_reference(weights, 4, 2, x, block_layout=layout, block_size=(4, 4)))
        # a bias [Hq, N, N] (broadcast over B) with -inf masking some keys
        bias = uniform(rng, 4, 12, 12)
        bias[:, :, 3] = -np.inf
        assert_layer_close(layer(x, bias=bias), layer_reference(weights, 4, 2, x, bias=bias))


# ---------------------------------------------------------------- pruning


def test_pruned_heads_equal_zeroed_outputs(context, rng) -> None:
    """Head mask [1, 0, 1, 1] over GQA 4/2 breaks GQA (kv head 0 keeps 1 query head, kv head 1
    two): each kept head gets its own K/V rows. Equal to the unpruned layer with the pruned
    heads' O zeroed before W_o, i.e. with their columns of W_o zeroed."""
    weights = make_weights(rng, 4, 2)
    x = uniform(rng, 2, 7, D_MODEL)
    keep = [True, False, True, True]
    zeroed = dict(weights)
    zeroed["w_o"] = weights["w_o"].copy()
    zeroed["w_o"][:, 1 * DV : 2 * DV] = 0
    with make_layer(context, weights, 4, 2, head_mask=keep) as pruned, make_layer(
        context, zeroed, 4, 2
    ) as unpruned:
        info = pruned.info()
        assert (info.heads_kept, info.attention_heads_kv, info.kv_duplicated) == (3, 3, True)
        assert pruned.head_mask.tolist() == keep
        y = pruned(x, causal=True)
        assert_layer_close(y, layer_reference(weights, 4, 2, x, head_mask=keep, causal=True))
        assert_layer_close(y, unpruned(x, causal=True).astype(np.float64))
        assert pruned.last_stats().attention_heads_q == 3

        # a mask that keeps GQA: kv head 1's two query heads; kv head 0 is dropped too
        pruned.set_head_mask([0, 0, 1, 1])
        info = pruned.info()
        assert (info.heads_kept, info.attention_heads_kv, info.kv_duplicated) == (2, 1, False)
        assert_layer_close(pruned(x), layer_reference(weights, 4, 2, x, head_mask=[0, 0, 1, 1]))

        pruned.set_head_mask(None)  # every head again: the unpruned layer
        assert pruned.info().heads_kept == 4 and pruned.head_mask.all()
        assert_layer_close(pruned(x), layer_reference(weights, 4, 2, x))


def test_a_refused_head_mask_changes_nothing(context, rng) -> None:
    weights = make_weights(rng, 4, 2)
    x = uniform(rng, 1, 4, D_MODEL)
    with make_layer(context, weights, 4, 2, head_mask=[1, 1, 0, 1]) as layer:
        before = layer(x)
        with pytest.raises(clattn.Error, match="keeps none of the 4 heads") as caught:
            layer.set_head_mask([0, 0, 0, 0])
        assert caught.value.status == "CLATTN_ERR_INVALID_ARGUMENT"
        assert layer.head_mask.tolist() == [True, True, False, True] and layer.info().heads_kept == 3
        np.testing.assert_array_equal(layer(x), before)
        with pytest.raises(clattn.Error, match=r"\[heads\] = \[4\]"):
            layer.set_head_mask([1, 0, 1])
    with pytest.raises(clattn.Error, match="keeps none"):
        make_layer(context, weights, 4, 2, head_mask=np.zeros(4, bool))


# ---------------------------------------------------------------- 16-bit weights and inputs


def test_float16_weights_and_inputs(context, rng) -> None:
    weights = make_weights(rng, 4, 2)
    half = {n: w.astype(np.float16) for n, w in weights.items()}
    x = uniform(rng, 2, 6, D_MODEL)
    with make_layer(context, half, 4, 2) as layer:
        assert layer.weight_dtype == "float16" and layer.info().weight_dtype == "float16"
        # float16 weights are widened exactly: the reference reads the same stored values
        assert_layer_close(layer(x, causal=True), layer_reference(half, 4, 2, x, causal=True))
        y16 = layer(x.astype(np.float16), causal=True)
        assert y16.dtype == np.float16
        ref = layer_reference(half, 4, 2, x.astype(np.float16), causal=True)
        assert_layer_close(y16, ref, "float16")
        # storage="f16" rounds float32 X first and stores Y in float16: the same call
        np.testing.assert_array_equal(layer(x, causal=True, storage="f16"), y16)
    # float32 arrays stored as float16 (rounded to nearest even) make the same layer
    with make_layer(context, weights, 4, 2, weight_dtype="float16") as rounded:
        assert rounded.weight_dtype == "float16"
        np.testing.assert_array_equal(rounded(x), layer_reference_run(context, half, x))


def layer_reference_run(context: clattn.Context, weights: Dict[str, np.ndarray], x: np.ndarray) -> np.ndarray:
    with make_layer(context, weights, 4, 2) as layer:
        return layer(x)


def test_bfloat16_weights_as_bits(context, rng) -> None:
    """NumPy has no bfloat16: uint16 bit patterns with weight_dtype="bfloat16"; float32 arrays
    with weight_dtype="bf16" are rounded to the same bits."""
    weights = make_weights(rng, 4, 2)
    bits = {n: to_bf16_bits(w) for n, w in weights.items()}
    values = {n: from_bf16_bits(b) for n, b in bits.items()}
    x = uniform(rng, 2, 5, D_MODEL)
    with make_layer(context, bits, 4, 2, weight_dtype="bfloat16") as layer, make_layer(
        context, weights, 4, 2, weight_dtype="bf16"
    ) as rounded:
        assert layer.weight_dtype == "bfloat16"
        y = layer(x)
        assert_layer_close(y, layer_reference(values, 4, 2, x))
        np.testing.assert_array_equal(rounded(x), y)
        # bfloat16 X as bits, Y as bits
        y_bits = layer(to_bf16_bits(x), storage="bf16")
        assert y_bits.dtype == np.uint16
        assert_layer_close(
            from_bf16_bits(y_bits), layer_reference(values, 4, 2, from_bf16_bits(to_bf16_bits(x))), "bfloat16"
        )


# ---------------------------------------------------------------- decoding over a KV cache


@pytest.mark.parametrize("cache_dtype", ["float32", "float16"])
def test_decode_loop_equals_one_causal_call(context, rng, cache_dtype: str) -> None:
    """A prompt of 4 tokens, then one token a step: Y row for row as one causal call over the
    whole sequence (float32 cache: within float32 tolerance; float16 cache: K/V rounded)."""
    heads, kv_heads = 4, 2
    weights = make_weights(rng, heads, kv_heads)
    x = uniform(rng, 2, 9, D_MODEL)
    with make_layer(context, weights, heads, kv_heads) as layer:
        whole = layer(x, causal=True)
        with layer.new_cache(batch=2, capacity=16, dtype=cache_dtype) as cache:
            assert cache.heads_kv == kv_heads and cache.dim_qk == DQK and cache.dim_v == DV
            rows = [layer(x[:, :4], causal=True, kv_cache=cache)]
            assert cache.lengths.tolist() == [4, 4]
            for t in range(4, 9):
                rows.append(layer(x[:, t : t + 1], causal=True, kv_cache=cache))
            assert cache.lengths.tolist() == [9, 9]
        decoded = np.concatenate(rows, axis=1)
        if cache_dtype == "float32":
            assert_layer_close(decoded, whole.astype(np.float64), what="decoded Y")
            assert_layer_close(decoded, layer_reference(weights, heads, kv_heads, x, causal=True))
        else:
            assert_layer_close(decoded, whole.astype(np.float64), "float16", "decoded Y")


def test_cache_per_sequence_lengths_and_bias(context, rng) -> None:
    """new_lengths: sequence 1 appends 2 of the 3 rows; its padding row gives Y = b_o. A bias
    over the cache is [B, Hq, N, capacity]."""
    weights = make_weights(rng, 4, 2)
    x = uniform(rng, 2, 3, D_MODEL)
    with make_layer(context, weights, 4, 2) as layer, layer.new_cache(2, 8) as cache:
        bias = np.zeros((1, 4, 1, 8), np.float32)
        bias[..., 1] = -np.inf  # no query sees key position 1
        y = layer(x, causal=True, kv_cache=cache, new_lengths=[3, 2], bias=bias)
        assert cache.lengths.tolist() == [3, 2]
        assert_layer_close(y[0], layer_reference(weights, 4, 2, x[:1], causal=True, bias=bias[..., :3])[0])
        assert_layer_close(
            y[1, :2], layer_reference(weights, 4, 2, x[1:, :2], causal=True, bias=bias[..., :2])[0]
        )
        np.testing.assert_allclose(y[1, 2], weights["b_o"], rtol=0, atol=1e-6)


def test_cache_of_the_pruned_layer(context, rng) -> None:
    """A pruned layer's cache has the attention's kv heads (info().attention_heads_kv)."""
    weights = make_weights(rng, 4, 2)
    x = uniform(rng, 1, 5, D_MODEL)
    keep = [1, 0, 1, 1]
    with make_layer(context, weights, 4, 2, head_mask=keep) as layer, layer.new_cache(1, 8) as cache:
        assert cache.heads_kv == 3
        rows = [layer(x[:, t : t + 1], causal=True, kv_cache=cache) for t in range(5)]
        assert_layer_close(
            np.concatenate(rows, axis=1), layer_reference(weights, 4, 2, x, head_mask=keep, causal=True)
        )
        layer.set_head_mask(None)  # 2 kv heads now: the cache no longer fits
        with pytest.raises(clattn.Error, match="the cache has B=1 Hkv=3") as caught:
            layer(x[:, :1], kv_cache=cache)
        assert caught.value.status == "CLATTN_ERR_INVALID_ARGUMENT"
        assert cache.lengths.tolist() == [5]  # refused before the append


# ---------------------------------------------------------------- inputs


def test_unbatched_strided_and_torch_inputs(context, rng) -> None:
    weights = make_weights(rng, 4, 2)
    x = uniform(rng, 2, 6, D_MODEL)
    with make_layer(context, weights, 4, 2) as layer:
        y = layer(x)
        np.testing.assert_array_equal(layer(x[1]), y[1])  # [N, d_model]: B = 1
        wide = np.zeros((2, 6, 2 * D_MODEL), np.float32)
        wide[..., ::2] = x  # a strided view: copied
        np.testing.assert_array_equal(layer(wide[..., ::2]), y)
        torch = pytest.importorskip(
            "torch", reason="torch is not installed (optional; the NumPy part above ran)"
        )
        yt = layer(torch.from_numpy(x))
        assert isinstance(yt, torch.Tensor) and yt.dtype == torch.float32
        np.testing.assert_array_equal(yt.numpy(), y)
        yb = layer(torch.from_numpy(x).to(torch.bfloat16))
        assert yb.dtype == torch.bfloat16 and yb.shape == (2, 6, D_MODEL)
    # torch parameters (requiring grad) as weights: read once, detached
    params = {n: torch.nn.Parameter(torch.from_numpy(w)) for n, w in weights.items()}
    with make_layer(context, params, 4, 2) as layer:
        np.testing.assert_array_equal(layer(x), y)


# ---------------------------------------------------------------- PyTorch itself


def test_from_torch_matches_nn_multihead_attention(torch, context, rng) -> None:
    torch.manual_seed(0)
    module = torch.nn.MultiheadAttention(D_MODEL, 4, batch_first=True).eval()
    with torch.no_grad():
        module.in_proj_bias.uniform_(-0.2, 0.2)
        module.out_proj.bias.uniform_(-0.2, 0.2)
    x = torch.from_numpy(uniform(rng, 2, 10, D_MODEL))
    causal = torch.triu(torch.ones(10, 10, dtype=torch.bool), diagonal=1)  # True = masked
    with torch.no_grad(), clattn.MultiheadAttention.from_torch(module, context=context) as layer:
        assert (layer.heads, layer.kv_heads, layer.dim_qk) == (4, 4, D_MODEL // 4)
        want, _ = module(x, x, x, need_weights=False)
        got = layer(x)
        assert isinstance(got, torch.Tensor)
        assert_layer_close(got.numpy(), want.double().numpy())
        want, _ = module(x, x, x, attn_mask=causal, need_weights=False)
        assert_layer_close(layer(x, causal=True).numpy(), want.double().numpy())
        # a key padding mask as a bias: sequence 1 has 7 valid keys
        padding = torch.zeros(2, 10, dtype=torch.bool)
        padding[1, 7:] = True
        want, _ = module(x, x, x, key_padding_mask=padding, need_weights=False)
        bias = np.where(padding.numpy(), -np.inf, 0.0).astype(np.float32)[:, None, None, :]
        assert_layer_close(layer(x, bias=bias).numpy(), want.double().numpy())


def test_from_torch_cross_attention(torch, context, rng) -> None:
    """kdim = vdim != embed_dim: separate q/k/v_proj_weight; no bias."""
    torch.manual_seed(1)
    module = torch.nn.MultiheadAttention(D_MODEL, 2, kdim=20, vdim=20, bias=False, batch_first=True).eval()
    x, memory = torch.from_numpy(uniform(rng, 2, 5, D_MODEL)), torch.from_numpy(uniform(rng, 2, 8, 20))
    with torch.no_grad(), clattn.MultiheadAttention.from_torch(module, context=context) as layer:
        assert layer.d_kv == 20 and not layer.info().has_bias
        want, _ = module(x, memory, memory, need_weights=False)
        assert_layer_close(layer(x, memory).numpy(), want.double().numpy())
    with pytest.raises(clattn.Error, match="add_bias_kv"):
        clattn.MultiheadAttention.from_torch(torch.nn.MultiheadAttention(16, 2, add_bias_kv=True))
    with pytest.raises(clattn.Error, match="kdim=8 and vdim=12"):
        clattn.MultiheadAttention.from_torch(torch.nn.MultiheadAttention(16, 2, kdim=8, vdim=12))
    with pytest.raises(clattn.Error, match="torch.nn.MultiheadAttention"):
        clattn.MultiheadAttention.from_torch(torch.nn.Linear(4, 4))


def test_gqa_matches_torch_sdpa(torch, context, rng) -> None:
    """A GQA layer written with torch: F.linear and F.scaled_dot_product_attention(enable_gqa)."""
    functional = torch.nn.functional
    weights = make_weights(rng, 4, 2)
    w = {n: torch.from_numpy(v).double() for n, v in weights.items()}
    x = torch.from_numpy(uniform(rng, 2, 7, D_MODEL))

    def split(t: Any, heads: int) -> Any:  # [B, N, H*D] -> [B, H, N, D]
        return t.view(2, 7, heads, -1).transpose(1, 2)

    xd = x.double()
    q = split(functional.linear(xd, w["w_q"], w["b_q"]), 4)
    k = split(functional.linear(xd, w["w_k"], w["b_k"]), 2)
    v = split(functional.linear(xd, w["w_v"], w["b_v"]), 2)
    o = functional.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    want = functional.linear(o.transpose(1, 2).reshape(2, 7, 4 * DV), w["w_o"], w["b_o"])
    with make_layer(context, weights, 4, 2) as layer:
        assert_layer_close(layer(x, causal=True).numpy(), want.numpy())


# ---------------------------------------------------------------- errors and life


def test_errors(context, rng) -> None:
    weights = make_weights(rng, 4, 2)
    x = uniform(rng, 1, 4, D_MODEL)
    with pytest.raises(clattn.Error, match=r"w_k has shape \(16, 48\).*must be \[32, 48\]"):
        make_layer(context, {**weights, "w_k": weights["w_k"][:16]}, 4, 2)
    with pytest.raises(clattn.Error, match=r"b_o has shape"):
        make_layer(context, {**weights, "b_o": weights["b_o"][:5]}, 4, 2)
    with pytest.raises(clattn.Error, match="rows must be heads"):
        make_layer(context, weights, 5, 1)
    with pytest.raises(clattn.Error, match="2-D"):
        make_layer(context, {**weights, "w_o": weights["w_o"].reshape(-1)}, 4, 2)
    with pytest.raises(clattn.Error, match=r"query heads \(4\) must be a multiple of key/value heads \(3\)"):
        w3 = make_weights(rng, 4, 3)
        make_layer(context, w3, 4, 3)
    with pytest.raises(clattn.Error, match="different dtypes"):
        make_layer(context, {**weights, "b_q": weights["b_q"].astype(np.float16)}, 4, 2)
    with pytest.raises(clattn.Error, match="float64 is not a weight type"):
        make_layer(context, {**weights, "w_q": weights["w_q"].astype(np.float64)}, 4, 2)
    with pytest.raises(clattn.Error, match="weight_dtype"):
        make_layer(context, weights, 4, 2, weight_dtype="q8_0")
    with make_layer(
        context, {n: w.astype(np.float64) for n, w in weights.items()}, 4, 2, weight_dtype="float32"
    ) as layer:
        np.testing.assert_array_equal(layer(x), layer_reference_run(context, weights, x))

    with make_layer(context, weights, 4, 2) as layer:
        with pytest.raises(clattn.Error, match="has not run yet"):
            layer.last_stats()
        with pytest.raises(clattn.Error, match=r"the layer takes \[B, N, 48\]"):
            layer(uniform(rng, 1, 4, 40))
        with pytest.raises(clattn.Error, match="batches differ"):
            layer(x, uniform(rng, 2, 4, D_MODEL))
        with pytest.raises(clattn.Error, match=r"x_kv \(4, 48\): give both a batch dimension"):
            layer(x, uniform(rng, 4, D_MODEL))
        with pytest.raises(clattn.Error, match="must share one dtype"):
            layer(x, x.astype(np.float16))
        with pytest.raises(clattn.Error, match="not a storage type"):
            layer(x.astype(np.float64))
        with pytest.raises(clattn.Error, match="new_lengths is for calls with kv_cache"):
            layer(x, new_lengths=[1])
        with pytest.raises(clattn.Error, match="dilation") as caught:  # the library's own check
            layer(x, window=(2, 0), dilation=0)
        assert caught.value.status == "CLATTN_ERR_INVALID_ARGUMENT"
        with pytest.raises(clattn.Error, match="block_layout has shape"):
            layer(x, block_layout=np.ones((2, 2), np.uint8), block_size=4)
        with layer.new_cache(1, 8) as cache:
            with pytest.raises(clattn.Error, match="x_kv and kv_cache"):
                layer(x, x, kv_cache=cache)
            with pytest.raises(clattn.Error, match=r"new_len\[0\] = 9 is not in \[0, N=4\]"):
                layer(x, kv_cache=cache, new_lengths=[9])
            with pytest.raises(clattn.Error, match="capacity"):
                layer(np.concatenate([x, x, x], axis=1), kv_cache=cache)
            assert cache.lengths.tolist() == [0]
        with pytest.raises(clattn.Error, match="clattn.KVCache"):
            layer(x, kv_cache="cache")
        with clattn.Context(context.device.index) as other, clattn.KVCache(
            1, 2, DQK, 8, dim_v=DV, context=other
        ) as foreign:
            with pytest.raises(clattn.Error, match="another context"):
                layer(x, kv_cache=foreign)

    cross = make_weights(rng, 4, 2, d_kv=24)
    with make_layer(context, cross, 4, 2) as layer:
        with pytest.raises(clattn.Error, match="give X_kv"):
            layer(x)
        with layer.new_cache(1, 8) as cache, pytest.raises(
            clattn.Error, match="a KV cache call projects K and V from X"
        ):
            layer(x, kv_cache=cache)


def test_life(rng) -> None:
    weights = make_weights(rng, 4, 2)
    x = uniform(rng, 1, 3, D_MODEL)
    with clattn.Context() as ctx:
        layer = make_layer(ctx, weights, 4, 2)
        assert "heads=4, kv_heads=2" in repr(layer) and layer.context is ctx
        layer.close()
        layer.close()  # idempotent
        assert "closed" in repr(layer)
        with pytest.raises(clattn.Error, match="the layer is closed"):
            layer(x)
        other = make_layer(ctx, weights, 4, 2)
    with pytest.raises(clattn.Error, match="closed"):  # closing the context closed the layer
        other(x)
    # the default context, and garbage collection
    layer = clattn.MultiheadAttention(**weights, heads=4, kv_heads=2)
    assert layer.context is clattn.default_context()
    assert layer(x).shape == x.shape
    del layer
