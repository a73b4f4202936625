"""clattn.attention against the float64 NumPy reference: every mask kind, GQA/MQA, both
layouts, float32/float16/bfloat16 storage, LSE, empty rows, zero-copy strided inputs."""

from __future__ import annotations

from typing import Any, Dict, Tuple

import numpy as np
import pytest
from conftest import uniform
from reference import (
    assert_close,
    assert_lse_close,
    attention_reference,
    from_bf16_bits,
    to_bf16_bits,
)

import clattn
from clattn import _tensors

# (B, Hq, Hkv, Nq, Nk, Dqk, Dv): not multiples of any tile size
SHAPES = {
    "square": (2, 4, 4, 37, 37, 24, 24),
    "gqa_nq<nk": (2, 4, 2, 19, 53, 32, 16),
    "mqa_nq>nk": (1, 3, 1, 41, 23, 16, 40),
    "decode": (2, 2, 2, 1, 29, 64, 64),
}

MASKS: Dict[str, Dict[str, Any]] = {
    "none": {},
    "causal": {"causal": True},
    "window": {"window": (5, 3)},
    "window_left_only": {"window": (7, None)},
    "causal_window_dilated": {"causal": True, "window": (12, -1), "dilation": 3},
    "global_tokens": {"window": (2, 2), "global_tokens": [0, 6, 11]},
    "block_layout_shared": {"block_layout": "shared", "block_size": (8, 16)},
    "block_layout_per_head_causal": {"block_layout": "per_head", "block_size": (16, 8), "causal": True},
}


def make_inputs(rng: np.random.Generator, shape: Tuple[int, ...], layout: str):
    B, Hq, Hkv, Nq, Nk, Dqk, Dv = shape

    def tensor(heads: int, rows: int, dim: int) -> np.ndarray:
        if layout == "bhsd":
            return uniform(rng, B, heads, rows, dim)
        return uniform(rng, B, rows, heads, dim)

    return tensor(Hq, Nq, Dqk), tensor(Hkv, Nk, Dqk), tensor(Hkv, Nk, Dv)


def resolve_mask(mask: Dict[str, Any], shape: Tuple[int, ...], rng: np.random.Generator) -> Dict[str, Any]:
    """A MASKS entry with its block layout drawn for the shape (half the blocks on)."""
    mask = dict(mask)
    global_tokens = mask.get("global_tokens")
    if global_tokens is not None:
        mask["global_tokens"] = [t for t in global_tokens if t < shape[4]]
    kind = mask.get("block_layout")
    if kind is not None:
        Hq, Nq, Nk = shape[1], shape[3], shape[4]
        bq, bk = mask["block_size"]
        grid = (-(-Nq // bq), -(-Nk // bk))
        heads = (Hq,) if kind == "per_head" else ()
        mask["block_layout"] = (rng.random(heads + grid) < 0.5).astype(np.uint8)
    return mask


@pytest.mark.parametrize("layout", ["bhsd", "bshd"])
@pytest.mark.parametrize("shape_name", list(SHAPES))
@pytest.mark.parametrize("mask_name", list(MASKS))
def test_float32_every_mask(context, rng, layout: str, shape_name: str, mask_name: str) -> None:
    shape = SHAPES[shape_name]
    q, k, v = make_inputs(rng, shape, layout)
    mask = resolve_mask(MASKS[mask_name], shape, rng)
    o, lse = clattn.attention(q, k, v, layout=layout, return_lse=True, context=context, **mask)
    ref_o, ref_lse = attention_reference(q, k, v, layout=layout, **mask)
    assert o.dtype == np.float32 and o.shape == ref_o.shape
    assert_close(o, ref_o, "float32")
    assert_lse_close(lse, ref_lse)


@pytest.mark.parametrize("layout", ["bhsd", "bshd"])
@pytest.mark.parametrize("mask_name", ["none", "causal", "causal_window_dilated", "block_layout_shared"])
def test_float16_storage(context, rng, layout: str, mask_name: str) -> None:
    shape = SHAPES["gqa_nq<nk"]
    q, k, v = (x.astype(np.float16) for x in make_inputs(rng, shape, layout))
    mask = resolve_mask(MASKS[mask_name], shape, rng)
    o, lse = clattn.attention(q, k, v, layout=layout, return_lse=True, context=context, **mask)
    ref_o, ref_lse = attention_reference(q, k, v, layout=layout, **mask)  # from the rounded inputs
    assert o.dtype == np.float16
    assert_close(o, ref_o, "float16")
    assert_lse_close(lse, ref_lse)


@pytest.mark.parametrize("layout", ["bhsd", "bshd"])
def test_bfloat16_bit_patterns(context, rng, layout: str) -> None:
    """NumPy has no bfloat16: uint16 bit patterns with storage='bf16' in, bit patterns out."""
    shape = SHAPES["mqa_nq>nk"]
    q, k, v = (to_bf16_bits(x) for x in make_inputs(rng, shape, layout))
    o, lse = clattn.attention(
        q, k, v, layout=layout, causal=True, storage="bf16", return_lse=True, context=context
    )
    ref_o, ref_lse = attention_reference(*(from_bf16_bits(x) for x in (q, k, v)), layout=layout, causal=True)
    assert o.dtype == np.uint16
    assert_close(from_bf16_bits(o), ref_o, "bfloat16")
    assert_lse_close(lse, ref_lse)


def test_bfloat16_ml_dtypes(context, rng) -> None:
    """ml_dtypes' bfloat16 NumPy arrays are bfloat16 storage as they are, and come back as such."""
    ml_dtypes = pytest.importorskip("ml_dtypes", reason="ml_dtypes is optional (NumPy's bfloat16 dtype)")
    q, k, v = (x.astype(ml_dtypes.bfloat16) for x in make_inputs(rng, SHAPES["gqa_nq<nk"], "bhsd"))
    o = clattn.attention(q, k, v, causal=True, context=context)
    assert o.dtype == ml_dtypes.bfloat16
    ref_o, _ = attention_reference(*(x.astype(np.float32) for x in (q, k, v)), causal=True)
    assert_close(o.astype(np.float32), ref_o, "bfloat16")


def test_storage_rounds_float32_inputs(context, rng) -> None:
    """storage='bf16' on float32 inputs rounds them to bfloat16 (nearest even) first."""
    q, k, v = make_inputs(rng, SHAPES["square"], "bhsd")
    o = clattn.attention(q, k, v, storage="bf16", context=context)
    ref_o, _ = attention_reference(*(from_bf16_bits(to_bf16_bits(x)) for x in (q, k, v)))
    assert o.dtype == np.uint16
    assert_close(from_bf16_bits(o), ref_o, "bfloat16")
    o16 = clattn.attention(q, k, v, storage="f16", context=context)
    assert o16.dtype == np.float16
    assert_close(o16, attention_reference(*(x.astype(np.float16) for x in (q, k, v)))[0], "float16")


@pytest.mark.parametrize(
    "bias_shape",
    [(37, 37), (4, 37, 37), (2, 1, 37, 37), (2, 1, 1, 37), (1, 4, 37, 1)],
    ids=["NqNk", "HNqNk", "B1NqNk", "B11Nk_padding", "keys_broadcast"],
)
def test_bias_broadcasts(context, rng, bias_shape: Tuple[int, ...]) -> None:
    q, k, v = make_inputs(rng, SHAPES["square"], "bhsd")
    bias = rng.normal(size=bias_shape).astype(np.float32)
    o, lse = clattn.attention(q, k, v, bias=bias, return_lse=True, context=context)
    ref_o, ref_lse = attention_reference(q, k, v, bias=bias)
    assert_close(o, ref_o, "float32")
    assert_lse_close(lse, ref_lse)


def test_a_bias_whose_strides_are_not_whole_floats_is_copied(context, rng) -> None:
    """Rows 150 bytes apart (37 float32 values and 2 bytes more) cannot be read in place: they
    are copied, not read with the row stride rounded down (wrong weights, in silence)."""
    q, k, v = make_inputs(rng, SHAPES["square"], "bhsd")
    bias = np.ndarray((37, 37), "<f4", buffer=np.zeros(37 * 150, np.uint8), strides=(150, 4))
    bias[...] = rng.normal(size=(37, 37))
    o = clattn.attention(q, k, v, bias=bias, context=context)
    assert_close(o, attention_reference(q, k, v, bias=np.ascontiguousarray(bias))[0], "float32")


def test_bias_minus_inf_masks_and_empty_rows(context, rng) -> None:
    """-inf in the bias masks; a row that sees no key gives O = 0 and LSE = -inf. A large finite
    bias (Hugging Face's torch.finfo(float32).min) is added, never a mask."""
    q, k, v = make_inputs(rng, SHAPES["square"], "bhsd")
    bias = np.zeros((37, 37), np.float32)
    bias[:, 30:] = np.finfo(np.float32).min  # padding keys, as Hugging Face writes them
    bias[5, :] = -np.inf  # an empty row
    bias[7, ::2] = -np.inf
    o, lse = clattn.attention(q, k, v, bias=bias, return_lse=True, context=context)
    ref_o, ref_lse = attention_reference(q, k, v, bias=bias)
    assert_close(o, ref_o, "float32")
    assert_lse_close(lse, ref_lse)
    assert np.all(o[:, :, 5] == 0) and np.all(np.isneginf(lse[:, :, 5]))


def test_scale(context, rng) -> None:
    q, k, v = make_inputs(rng, SHAPES["gqa_nq<nk"], "bhsd")
    o = clattn.attention(q, k, v, scale=0.37, causal=True, context=context)
    assert_close(o, attention_reference(q, k, v, scale=0.37, causal=True)[0], "float32")


@pytest.mark.parametrize(
    "path,variant,ran",
    [
        ("fused", "lanes", "lanes"),
        ("fused", "rowwise", "rowwise"),
        ("fused", "cpu", "lanes"),  # the name of 0.2, read until 0.4
        ("reference", None, None),
        ("gemm", None, None),
    ],
)
def test_paths_and_variants(context, rng, path: str, variant: str, ran: str) -> None:
    q, k, v = make_inputs(rng, SHAPES["gqa_nq<nk"], "bshd")
    mask = {"causal": True, "window": (9, 0)}
    o = clattn.attention(q, k, v, layout="bshd", path=path, variant=variant, context=context, **mask)
    assert_close(o, attention_reference(q, k, v, layout="bshd", **mask)[0], "float32")
    stats = context.last_stats()
    assert stats.path == path
    if ran:
        assert stats.variant == ran


@pytest.mark.parametrize("variant", ["lanes", "split", None])
@pytest.mark.parametrize("nq", [3, 20])
def test_head_dims_of_deepseek_mla(context, rng, variant: str, nq: int) -> None:
    """Head dims 576/512 (MQA 4:1, causal) on the two fused variants that take them and on auto
    (split for a few query rows a head, lanes from 12 on where it serves the device)."""
    q, k, v = make_inputs(rng, (1, 4, 1, nq, 50, 576, 512), "bhsd")
    o = clattn.attention(q, k, v, causal=True, variant=variant, context=context)
    assert o.shape == (1, 4, nq, 512)
    assert_close(o, attention_reference(q, k, v, layout="bhsd", causal=True)[0], "float32")
    assert context.last_stats().variant in ({variant} if variant else {"lanes", "split"})


def test_strided_views_are_read_in_place(context, rng) -> None:
    """Transposed and sliced views (last stride 1) go to the library without a copy."""
    base = uniform(rng, 2, 40, 4, 3 * 32)  # [B, N, H, 3*D]: a fused QKV projection
    q, k, v = (base[..., i * 32 : (i + 1) * 32].transpose(0, 2, 1, 3) for i in range(3))  # bhsd views
    assert not q.flags.c_contiguous
    seen = _tensors.host_tensor(q, "q")
    assert seen.pointer == q.__array_interface__["data"][0] and seen.strides == (40 * 4 * 96, 96, 4 * 96, 1)
    o = clattn.attention(q, k, v, causal=True, context=context)
    ref_o, _ = attention_reference(q, k, v, causal=True)
    assert_close(o, ref_o, "float32")
    expanded_k = np.broadcast_to(k[:, :1], k.shape)  # stride 0 over heads
    o = clattn.attention(q, expanded_k, v, context=context)
    assert_close(o, attention_reference(q, np.ascontiguousarray(expanded_k), v)[0], "float32")


def test_default_context_and_using(rng) -> None:
    q, k, v = make_inputs(rng, SHAPES["decode"], "bhsd")
    ref_o, _ = attention_reference(q, k, v)
    assert_close(clattn.attention(q, k, v), ref_o, "float32")
    with clattn.using(0) as ctx:
        assert clattn.default_context() is ctx
        assert_close(clattn.attention(q, k, v), ref_o, "float32")
        assert ctx.last_stats().pairs == 2 * 2 * 1 * 29
    assert clattn.default_context() is not ctx


def test_a_closed_default_context_is_opened_again(rng) -> None:
    """`with clattn.default_context():` closes it at the end; the calls without `context=` that
    follow open a new one (they failed with "the context is closed" until the process ended)."""
    q, k, v = make_inputs(rng, SHAPES["decode"], "bhsd")
    with clattn.default_context() as first:
        pass
    assert_close(clattn.attention(q, k, v), attention_reference(q, k, v)[0], "float32")
    assert clattn.default_context() is not first


# ---------------------------------------------------------------- torch tensors


@pytest.mark.parametrize("dtype_name", ["float32", "float16", "bfloat16"])
def test_torch_tensors_in_and_out(torch, context, rng, dtype_name: str) -> None:
    dtype = getattr(torch, dtype_name)
    q, k, v = (torch.from_numpy(x).to(dtype) for x in make_inputs(rng, SHAPES["gqa_nq<nk"], "bhsd"))
    o, lse = clattn.attention(q, k, v, causal=True, return_lse=True, context=context)
    assert isinstance(o, torch.Tensor) and o.dtype == dtype and isinstance(lse, torch.Tensor)
    ref_o, ref_lse = attention_reference(*(x.float().numpy() for x in (q, k, v)), causal=True)
    assert_close(o.float().numpy(), ref_o, dtype_name)
    assert_lse_close(lse.numpy(), ref_lse)


def test_torch_transposed_view_is_read_in_place(torch, context, rng) -> None:
    base = torch.from_numpy(uniform(rng, 2, 33, 4, 16)).to(torch.bfloat16)  # [B, N, H, D]
    view = base.transpose(1, 2)  # [B, H, N, D], as attention layers make them
    seen = _tensors.host_tensor(view, "q")
    assert seen.pointer == base.data_ptr() and seen.strides == tuple(view.stride())
    o = clattn.attention(view, view, view, context=context)
    ref_o, _ = attention_reference(*(view.float().numpy(),) * 3)
    assert_close(o.float().numpy(), ref_o, "bfloat16")


# ---------------------------------------------------------------- transfer statistics


def test_transfer_statistics_of_a_call_on_host_arrays(context, rng) -> None:
    """Stats counts the call's host-device traffic, and Context.transfers() grows by as much. A
    device that shares host memory (every CPU device) maps Q, K, V and O instead of copying."""
    q, k, v = make_inputs(rng, SHAPES["gqa_nq<nk"], "bhsd")
    before = context.transfers()
    o = clattn.attention(q, k, v, causal=True, context=context)
    moved = context.transfers() - before
    stats = context.last_stats()
    assert (moved.host_to_device_bytes, moved.device_to_host_bytes, moved.mapped_bytes) == (
        stats.host_to_device_bytes,
        stats.device_to_host_bytes,
        stats.mapped_bytes,
    )
    tensors = q.nbytes + k.nbytes + v.nbytes + o.nbytes
    assert stats.host_to_device_bytes + stats.mapped_bytes >= tensors
    if context.device.type == "cpu":
        assert stats.mapped_bytes == tensors and stats.device_to_host_bytes == 0
    else:
        assert stats.device_to_host_bytes >= o.nbytes
