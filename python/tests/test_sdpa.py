"""clattn.scaled_dot_product_attention against a float64 NumPy re-implementation of PyTorch's
documented semantics (tests/reference.py), on NumPy inputs; and, when torch is installed, on
torch tensors against torch.nn.functional.scaled_dot_product_attention itself."""

from __future__ import annotations

from typing import Any, Dict, Tuple

import numpy as np
import pytest
from conftest import uniform
from reference import assert_close, torch_sdpa_reference

import clattn

# name: (query shape, key shape, value shape)
SHAPES: Dict[str, Tuple[Tuple[int, ...], ...]] = {
    "4d_L<S": ((2, 3, 13, 16), (2, 3, 29, 16), (2, 3, 29, 8)),
    "4d_L=S": ((1, 2, 21, 32), (1, 2, 21, 32), (1, 2, 21, 32)),
    "4d_L>S": ((2, 2, 31, 16), (2, 2, 12, 16), (2, 2, 12, 24)),
    "3d": ((3, 17, 8), (3, 9, 8), (3, 9, 8)),
    "2d": ((11, 16), (19, 16), (19, 16)),
    "5d_batch_broadcast": ((2, 3, 2, 7, 16), (1, 3, 2, 10, 16), (1, 3, 2, 10, 16)),
    "mqa_broadcast": ((2, 4, 9, 16), (2, 1, 14, 16), (2, 1, 14, 16)),
    # a 2-D query broadcast against keys with heads (its output kept their dims: they were dropped)
    "2d_query_4d_kv": ((5, 8), (2, 1, 6, 8), (2, 1, 6, 8)),
    "2d_query_3d_kv": ((5, 8), (1, 6, 8), (1, 6, 8)),
}


def inputs(rng: np.random.Generator, name: str):
    return tuple(uniform(rng, *shape) for shape in SHAPES[name])


@pytest.mark.parametrize("name", list(SHAPES))
@pytest.mark.parametrize("is_causal", [False, True])
def test_shapes_and_top_left_causal(context, rng, name: str, is_causal: bool) -> None:
    q, k, v = inputs(rng, name)
    with clattn.using(context):
        out = clattn.scaled_dot_product_attention(q, k, v, is_causal=is_causal)
    assert_close(out, torch_sdpa_reference(q, k, v, is_causal=is_causal), "float32")


@pytest.mark.parametrize("name", ["4d_L<S", "4d_L>S", "3d", "5d_batch_broadcast"])
@pytest.mark.parametrize("mask_shape", ["LS", "B1LS", "B11S"])
def test_boolean_mask_true_attends(context, rng, name: str, mask_shape: str) -> None:
    q, k, v = inputs(rng, name)
    L, S = q.shape[-2], k.shape[-2]
    shape = {"LS": (L, S), "B1LS": q.shape[:-3] + (1, L, S), "B11S": q.shape[:-3] + (1, 1, S)}[mask_shape]
    mask = rng.random(shape) < 0.6
    with clattn.using(context):
        out = clattn.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    assert_close(out, torch_sdpa_reference(q, k, v, attn_mask=mask), "float32")


def test_fully_masked_rows_are_zero(context, rng) -> None:
    """PyTorch's kernels return zeros for a row whose boolean mask is all False (its documented
    reference code would give NaN); so does clattn."""
    q, k, v = inputs(rng, "4d_L<S")
    mask = np.ones((13, 29), bool)
    mask[4] = False
    with clattn.using(context):
        out = clattn.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    assert np.all(out[:, :, 4] == 0)
    assert_close(out, torch_sdpa_reference(q, k, v, attn_mask=mask), "float32")


def test_float_mask_is_added(context, rng) -> None:
    q, k, v = inputs(rng, "4d_L>S")
    mask = rng.normal(size=(2, 1, 31, 12)).astype(np.float32)
    mask[:, :, :, 9:] = np.finfo(np.float32).min  # Hugging Face's padding
    mask[1, :, 3, :5] = -np.inf
    with clattn.using(context):
        out = clattn.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    assert_close(out, torch_sdpa_reference(q, k, v, attn_mask=mask), "float32")


@pytest.mark.parametrize("is_causal", [False, True])
def test_enable_gqa(context, rng, is_causal: bool) -> None:
    q, k, v = uniform(rng, 2, 6, 11, 16), uniform(rng, 2, 2, 17, 16), uniform(rng, 2, 2, 17, 16)
    with clattn.using(context):
        out = clattn.scaled_dot_product_attention(q, k, v, is_causal=is_causal, enable_gqa=True)
    assert_close(out, torch_sdpa_reference(q, k, v, is_causal=is_causal, enable_gqa=True), "float32")


@pytest.mark.parametrize("scale", [0.05, 1.0, 0.0])
def test_scale(context, rng, scale: float) -> None:
    q, k, v = inputs(rng, "4d_L<S")
    with clattn.using(context):
        out = clattn.scaled_dot_product_attention(q, k, v, scale=scale)
    assert_close(out, torch_sdpa_reference(q, k, v, scale=scale), "float32")


def test_float16_numpy(context, rng) -> None:
    q, k, v = (x.astype(np.float16) for x in inputs(rng, "4d_L>S"))
    with clattn.using(context):
        out = clattn.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert out.dtype == np.float16
    assert_close(out, torch_sdpa_reference(q, k, v, is_causal=True), "float16")


def test_unreadable_strides_are_copied(context, rng) -> None:
    """PyTorch takes any strides, so this function copies what clattn cannot read in place."""
    q, k, v = inputs(rng, "4d_L=S")
    flipped = q[..., ::-1]
    with clattn.using(context):
        out = clattn.scaled_dot_product_attention(flipped, k, v)
    assert_close(out, torch_sdpa_reference(flipped, k, v), "float32")


@pytest.mark.parametrize(
    "kwargs,text",
    [
        ({"dropout_p": 0.1}, "dropout"),
        ({"is_causal": True, "attn_mask": np.ones((13, 29), bool)}, "is_causal"),
        ({"attn_mask": np.ones((13, 29), np.int32)}, "attn_mask"),
        ({"attn_mask": np.ones((5, 29), bool)}, "broadcast"),
    ],
    ids=["dropout", "mask_and_causal", "int_mask", "mask_shape"],
)
def test_refusals(context, rng, kwargs: Dict[str, Any], text: str) -> None:
    q, k, v = inputs(rng, "4d_L<S")
    with clattn.using(context), pytest.raises(clattn.Error, match=text):
        clattn.scaled_dot_product_attention(q, k, v, **kwargs)


def test_heads_must_match_without_gqa(context, rng) -> None:
    q, k, v = uniform(rng, 1, 4, 5, 8), uniform(rng, 1, 2, 5, 8), uniform(rng, 1, 2, 5, 8)
    with clattn.using(context), pytest.raises(clattn.Error, match="enable_gqa"):
        clattn.scaled_dot_product_attention(q, k, v)


# ---------------------------------------------------------------- against PyTorch itself


def _compare_with_torch(torch, context, dtype_name: str, *args: Any, **kwargs: Any) -> None:
    with torch.no_grad():
        expected = torch.nn.functional.scaled_dot_product_attention(*args, **kwargs)
        with clattn.using(context):
            got = clattn.scaled_dot_product_attention(*args, **kwargs)
    assert isinstance(got, torch.Tensor) and got.dtype == expected.dtype and got.shape == expected.shape
    # PyTorch's float32 result stands in for the reference: both are within float32 of it
    reference_dtype = "float16" if dtype_name == "float32" else dtype_name
    assert_close(got.float().numpy(), expected.float().numpy(), reference_dtype)


@pytest.mark.parametrize("dtype_name", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("name", ["4d_L<S", "4d_L>S", "3d", "mqa_broadcast", "2d_query_4d_kv"])
@pytest.mark.parametrize("is_causal", [False, True])
def test_matches_torch(torch, context, rng, dtype_name: str, name: str, is_causal: bool) -> None:
    q, k, v = (torch.from_numpy(x).to(getattr(torch, dtype_name)) for x in inputs(rng, name))
    _compare_with_torch(torch, context, dtype_name, q, k, v, is_causal=is_causal)


@pytest.mark.parametrize("dtype_name", ["float32", "bfloat16"])
def test_matches_torch_with_masks(torch, context, rng, dtype_name: str) -> None:
    dtype = getattr(torch, dtype_name)
    q, k, v = (torch.from_numpy(x).to(dtype) for x in inputs(rng, "4d_L<S"))
    boolean = torch.from_numpy(rng.random((2, 1, 13, 29)) < 0.5)
    boolean[0, 0, 3] = False  # a fully masked row
    _compare_with_torch(torch, context, dtype_name, q, k, v, attn_mask=boolean)
    padding = torch.zeros(2, 1, 1, 29)
    padding[:, :, :, 20:] = torch.finfo(torch.float32).min
    _compare_with_torch(torch, context, dtype_name, q, k, v, attn_mask=padding.to(dtype))
    everything_padded = torch.full((13, 29), torch.finfo(torch.float32).min)  # the plain mean of V
    _compare_with_torch(torch, context, dtype_name, q, k, v, attn_mask=everything_padded)


def test_matches_torch_gqa_and_strided_views(torch, context, rng) -> None:
    qkv = torch.from_numpy(uniform(rng, 2, 19, 3, 4, 16))  # [B, N, 3, H, D]
    q, k, v = (qkv[:, :, i].transpose(1, 2) for i in range(3))
    _compare_with_torch(torch, context, "float32", q, k, v, is_causal=True)
    _compare_with_torch(torch, context, "float32", q, k[:, :2], v[:, :2], enable_gqa=True)


def test_requires_grad_is_refused_outside_no_grad(torch, context, rng) -> None:
    q = torch.from_numpy(uniform(rng, 1, 1, 4, 8)).requires_grad_()
    with clattn.using(context), pytest.raises(clattn.Error, match="no_grad"):
        clattn.scaled_dot_product_attention(q, q, q)


# (query, key, value) shapes with a zero size: no rows, no batch, no keys, no head dim
ZERO_SIZES = {
    "no_rows": ((1, 2, 0, 8), (1, 2, 4, 8), (1, 2, 4, 5)),
    "no_batch": ((0, 2, 3, 8), (0, 2, 4, 8), (0, 2, 4, 5)),
    "no_keys": ((1, 2, 3, 8), (1, 2, 0, 8), (1, 2, 0, 5)),
    "no_head_dim": ((1, 2, 3, 0), (1, 2, 4, 0), (1, 2, 4, 5)),
    "no_value_dim": ((1, 2, 3, 8), (1, 2, 4, 8), (1, 2, 4, 0)),
}


@pytest.mark.parametrize("name", list(ZERO_SIZES))
@pytest.mark.parametrize("is_causal", [False, True])
def test_zero_sizes_match_torch(torch, context, rng, name: str, is_causal: bool) -> None:
    """PyTorch returns an empty result, zeros for rows that see no key, and V's mean when every
    score is 0 (no head dim); so does clattn, where the C library refuses zero sizes."""
    q, k, v = (torch.from_numpy(uniform(rng, *shape)) for shape in ZERO_SIZES[name])
    _compare_with_torch(torch, context, "float32", q, k, v, is_causal=is_causal)
    mask = torch.from_numpy(rng.random((q.shape[-2], k.shape[-2])) < 0.5)
    _compare_with_torch(torch, context, "float32", q, k, v, attn_mask=mask)
