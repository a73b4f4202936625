"""Bad input raises clattn.Error, with a message that names the problem, and never crashes:
for arrays the binding cannot pass as for what the library refuses (test_arguments.py has the
plain arguments: integers, flags, scales, choices)."""

from __future__ import annotations

from typing import Any, Dict

import numpy as np
import pytest
from conftest import uniform

import clattn


@pytest.fixture
def qkv(rng):
    return uniform(rng, 2, 4, 9, 16), uniform(rng, 2, 2, 11, 16), uniform(rng, 2, 2, 11, 8)


@pytest.mark.parametrize("dtype", [np.float64, np.int32, np.uint16, np.complex64])
def test_wrong_dtype_is_a_type_error(context, qkv, dtype) -> None:
    q, k, v = qkv
    with pytest.raises(clattn.Error, match="not a storage type"):
        clattn.attention(q.astype(dtype), k.astype(dtype), v.astype(dtype), context=context)


def test_mixed_dtypes(context, qkv) -> None:
    q, k, v = qkv
    with pytest.raises(clattn.Error, match="share one dtype"):
        clattn.attention(q, k.astype(np.float16), v, context=context)
    # as the message says, storage= takes them: each is converted to it
    mixed = clattn.attention(q, k.astype(np.float16), v, storage="f16", context=context)
    same = clattn.attention(*(x.astype(np.float16) for x in (q, k, v)), context=context)
    np.testing.assert_array_equal(mixed, same)


def test_not_an_array(context, qkv) -> None:
    q, k, v = qkv
    with pytest.raises(clattn.Error):
        clattn.attention("q", k, v, context=context)


@pytest.mark.parametrize(
    "make_view",
    [lambda x: x[..., ::2], lambda x: x[:, :, ::-1], lambda x: np.swapaxes(x, -1, -2)],
    ids=["strided_last_dim", "negative_stride", "transposed_last_dim"],
)
def test_strides_the_library_cannot_read(context, rng, make_view) -> None:
    q = make_view(uniform(rng, 2, 4, 16, 16))
    with pytest.raises(clattn.Error, match="cannot be read in place"):
        clattn.attention(q, q, q, context=context)


@pytest.mark.parametrize(
    "shapes,text",
    [
        (((2, 4, 9, 16), (2, 2, 11, 16), (2, 2, 10, 8)), "same heads and length"),
        (((2, 4, 9, 16), (2, 2, 11, 12), (2, 2, 11, 8)), "head dims differ"),
        (((2, 4, 9, 16), (3, 2, 11, 16), (3, 2, 11, 8)), "batch sizes differ"),
        (((4, 9, 16), (2, 11, 16), (2, 11, 8)), "must be 4-D"),
        (((2, 4, 0, 16), (2, 2, 11, 16), (2, 2, 11, 8)), ">= 1"),
    ],
    ids=["kv_length", "dim_qk", "batch", "rank", "empty"],
)
def test_mismatched_shapes(context, rng, shapes, text: str) -> None:
    q, k, v = (uniform(rng, *shape) for shape in shapes)
    with pytest.raises(clattn.Error, match=text):
        clattn.attention(q, k, v, context=context)


@pytest.mark.parametrize(
    "kwargs,text",
    [
        ({"window": (-2, 0)}, "window"),
        ({"dilation": 0}, "dilation"),
        ({"global_tokens": [3, 11]}, "global token 11"),
        ({"variant": "warp-speed"}, "no row of the variant table"),
    ],
    ids=["window", "dilation", "global_token", "variant"],
)
def test_library_refusals_are_clattn_errors(context, qkv, kwargs: Dict[str, Any], text: str) -> None:
    with pytest.raises(clattn.Error, match=text) as caught:
        clattn.attention(*qkv, context=context, **kwargs)
    assert caught.value.status == "CLATTN_ERR_INVALID_ARGUMENT" and caught.value.code == -7001


def test_heads_not_a_multiple(context, rng) -> None:
    q, k, v = uniform(rng, 1, 3, 4, 8), uniform(rng, 1, 2, 4, 8), uniform(rng, 1, 2, 4, 8)
    with pytest.raises(clattn.Error, match="multiple") as caught:
        clattn.attention(q, k, v, context=context)
    assert str(caught.value).startswith("CLATTN_ERR_INVALID_ARGUMENT: ")


@pytest.mark.parametrize(
    "kwargs,text",
    [
        ({"block_layout": np.ones((2, 2), np.uint8), "block_size": 4}, "block_layout has shape"),
        ({"block_layout": [[1, 1], [1, 1]], "block_size": 4}, r"block_layout has shape \(2, 2\)"),
        ({"block_layout": np.ones((3, 3), np.uint8)}, "block_size"),
        ({"bias": np.zeros((9, 10), np.float32)}, "does not broadcast"),
        ({"bias": np.zeros((9, 11), bool)}, "not a float type"),
        ({"layout": "sbhd"}, "layout"),
        ({"path": "fastest"}, "path"),
        ({"storage": "int8"}, "storage"),
        ({"scale": 0.0}, "scale"),
        ({"window": 4}, "window"),
    ],
    ids=[
        "layout_shape",
        "layout_list_shape",
        "layout_without_size",
        "bias_shape",
        "bias_dtype",
        "layout_name",
        "path",
        "storage",
        "scale",
        "window_int",
    ],
)
def test_argument_errors(context, qkv, kwargs: Dict[str, Any], text: str) -> None:
    with pytest.raises(clattn.Error, match=text):
        clattn.attention(*qkv, context=context, **kwargs)


@pytest.mark.parametrize("spec", ["no-such-device-anywhere", 999, "7:7"])
def test_a_device_that_does_not_exist(spec) -> None:
    with pytest.raises(clattn.Error, match="no device matches") as caught:
        clattn.Context(spec)
    assert caught.value.status == "CLATTN_ERR_NO_DEVICE"


def test_a_device_spec_of_the_wrong_type() -> None:
    with pytest.raises(clattn.Error):
        clattn.Context(1.5)  # type: ignore[arg-type]


def test_objects_over_c_handles_are_not_copied(context) -> None:
    """A copy would share the C object, which the first copy collected would free under the
    others (a shallow copy crashed the interpreter)."""
    import copy
    import pickle

    cache = clattn.KVCache(1, 1, 32, 8, context=context)
    for owner in (context, cache):
        for make_copy in (copy.copy, copy.deepcopy, pickle.dumps):
            with pytest.raises(TypeError, match="cannot be copied"):
                make_copy(owner)
    cache.close()


def test_errors_survive_copies_and_pickles(context, rng) -> None:
    """clattn.Error rebuilds from its code and message: an error raised in another process
    (concurrent.futures) arrives as itself."""
    import copy
    import pickle

    q, k = uniform(rng, 1, 3, 4, 8), uniform(rng, 1, 2, 4, 8)
    with pytest.raises(clattn.Error) as caught:
        clattn.attention(q, k, k, context=context)
    for again in (copy.copy(caught.value), pickle.loads(pickle.dumps(caught.value))):
        assert isinstance(again, clattn.Error)
        assert (again.code, again.status, again.message) == (
            caught.value.code, caught.value.status, caught.value.message)
        assert str(again) == str(caught.value)


def test_a_closed_context(qkv) -> None:
    ctx = clattn.Context()
    ctx.close()
    ctx.close()  # idempotent
    with pytest.raises(clattn.Error, match="closed"):
        clattn.attention(*qkv, context=ctx)


@pytest.mark.parametrize(
    "make,text",
    [
        (lambda: clattn.patterns.sliding(64, 64, 16, window=2), "odd"),
        (lambda: clattn.patterns.fixed(64, 64, 16, stride=2, summary=3), "summary"),
        (lambda: clattn.patterns.strided(64, 64, 16, stride=0), "stride"),
        (lambda: clattn.patterns.longformer(64, 64, 16, window=3, global_blocks=[4]), "outside"),
        (lambda: clattn.patterns.bigbird(0, 64, 16), r"len_q=0: must be an integer in \[1,"),
    ],
    ids=["even_window", "summary", "stride", "global_block", "empty"],
)
def test_pattern_errors(make, text: str) -> None:
    with pytest.raises(clattn.Error, match=text):
        make()


def test_torch_dtype_and_device(torch, context, rng) -> None:
    q = torch.from_numpy(uniform(rng, 1, 2, 4, 8))
    with pytest.raises(clattn.Error, match="torch.float64"):
        clattn.attention(q.double(), q.double(), q.double(), context=context)
    with pytest.raises(clattn.Error, match="torch.int32"):
        clattn.attention(q.int(), q.int(), q.int(), context=context)
    meta = q.to("meta")
    with pytest.raises(clattn.Error, match="is on meta"):
        clattn.attention(meta, meta, meta, context=context)


def test_torch_memory_clattn_cannot_read(torch, context, rng) -> None:
    """Sparse tensors, lazily negated views and tensors without data (meta) are refused by name,
    as q, k and v and as the small inputs (bias, sinks, masks, layouts) alike."""
    q = torch.from_numpy(uniform(rng, 1, 2, 4, 8))
    with pytest.raises(clattn.Error, match="q is a torch.sparse_coo tensor"):
        clattn.attention(q.to_sparse(), q, q, context=context)
    with pytest.raises(clattn.Error, match=r"v is a lazily negated view: call \.resolve_neg\(\)"):
        clattn.attention(q, q, torch._neg_view(q), context=context)
    conj = torch.zeros(1, 2, 4, 8, dtype=torch.complex64).conj()
    with pytest.raises(clattn.Error, match=r"k is a lazily conjugated view: call \.resolve_conj\(\)"):
        clattn.attention(q, conj, q, context=context)
    on_meta = {
        "bias": dict(bias=torch.zeros(4, 4, device="meta")),
        "sinks": dict(sinks=torch.zeros(2, device="meta")),
        "alibi_slopes": dict(alibi_slopes=torch.zeros(2, device="meta")),
    }
    for name, extra in on_meta.items():
        with pytest.raises(clattn.Error, match=f"{name} is on meta"):
            clattn.attention(q, q, q, context=context, **extra)
    mask = torch.ones(4, 4, dtype=torch.bool).to_sparse()
    with clattn.using(context), pytest.raises(clattn.Error, match="attn_mask is a torch.sparse"):
        clattn.scaled_dot_product_attention(q, q, q, attn_mask=mask)
