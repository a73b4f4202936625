"""Every public function checks its plain arguments as the CLI checks its options, and every bad
argument raises clattn.Error, whether the package or the library finds it: integers are
range-checked (never wrapped by ctypes), floats are not taken for integers (never truncated),
types are checked, and a scale that rounds to 0 in float32 is refused (it never turns into the
default). Also: the NumPy paths work where torch cannot be imported."""

from __future__ import annotations

import inspect
import pydoc
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Dict

import numpy as np
import pytest
from conftest import uniform
from reference import assert_close, attention_reference

import clattn

BIG = 2**64  # wraps to 0 in a 64-bit C field
INT64_RANGE = r"must be an integer in \[-2\^63, 2\^63-1\]"
SIZE_RANGE = r"must be an integer in \[1, 2\^64-1\]"


@pytest.fixture
def env(context, rng):
    """What the cases call: q [1, 2, 4, 16], k and v [1, 2, 6, 16] (bhsd), a KV cache
    (B=2, Hkv=2, D=16, capacity 8, contiguous) and one paged (page_size 4), and a layer
    (d_model 16, 2 heads)."""
    weights = {name: uniform(rng, 16, 16) * 0.25 for name in ("w_q", "w_k", "w_v", "w_o")}
    with (
        clattn.KVCache(2, 2, 16, 8, context=context) as cache,
        clattn.KVCache(2, 2, 16, 8, page_size=4, context=context) as paged,
        clattn.MultiheadAttention(heads=2, context=context, **weights) as layer,
    ):
        yield SimpleNamespace(
            context=context,
            q=uniform(rng, 1, 2, 4, 16),
            k=uniform(rng, 1, 2, 6, 16),
            rows=uniform(rng, 2, 1, 2, 16),  # one new row a sequence ([B, n, Hkv, D])
            x=uniform(rng, 2, 3, 16),
            cache=cache,
            paged=paged,
            layer=layer,
        )


def attention(e: SimpleNamespace, **kwargs: Any) -> Any:
    return clattn.attention(e.q, e.k, e.k, context=e.context, **kwargs)


def sdpa(e: SimpleNamespace, **kwargs: Any) -> Any:
    with clattn.using(e.context):
        return clattn.scaled_dot_product_attention(e.q, e.k, e.k, **kwargs)


def kv_cache(e: SimpleNamespace, **kwargs: Any) -> Any:
    arguments: Dict[str, Any] = dict(batch=2, heads_kv=2, dim_qk=16, capacity=8, context=e.context)
    arguments.update(kwargs)
    return clattn.KVCache(**arguments)


def layer(e: SimpleNamespace, **kwargs: Any) -> Any:
    weights = {name: np.zeros((16, 16), np.float32) for name in ("w_q", "w_k", "w_v", "w_o")}
    arguments: Dict[str, Any] = dict(heads=2, context=e.context, **weights)
    arguments.update(kwargs)
    return clattn.MultiheadAttention(**arguments)


layout_4 = {"block_layout": np.ones((1, 2), np.uint8)}  # with block_size 4: Nq=4, Nk=6
P = clattn.patterns

# (what is called, the message it must give)
CASES: Dict[str, tuple] = {
    # clattn.attention: issue 29's reproducers first
    "window_2**64": (
        lambda e: attention(e, window=(BIG, 0)),
        r"window\[0\]=18446744073709551616: " + INT64_RANGE,
    ),
    "window_2.7": (lambda e: attention(e, window=(2.7, 0)), r"window\[0\]=2.7: an integer is needed"),
    "window_2.0": (lambda e: attention(e, window=(0, 2.0)), r"window\[1\]=2.0: an integer is needed"),
    "window_str": (lambda e: attention(e, window="ab"), "window='ab': a pair is needed, not a str"),
    "window_three": (lambda e: attention(e, window=(1, 2, 3)), r"window=\(1, 2, 3\): a pair is needed"),
    "dilation_2**64+1": (
        lambda e: attention(e, window=(2, 0), dilation=BIG + 1),
        "dilation=.*" + INT64_RANGE,
    ),
    "dilation_1.5": (lambda e: attention(e, dilation=1.5), r"dilation=1.5: an integer is needed"),
    "block_size_8.9": (
        lambda e: attention(e, block_size=(8.9, 8), **layout_4),
        r"block_size\[0\]=8.9: an integer is needed",
    ),
    "block_size_2**64": (lambda e: attention(e, block_size=BIG, **layout_4), "block_size=.*" + SIZE_RANGE),
    "block_size_negative": (lambda e: attention(e, block_size=(4, -4), **layout_4), r"block_size\[1\]=-4"),
    "global_tokens_1.9": (lambda e: attention(e, global_tokens=[1.9]), "global_tokens: integers are needed"),
    "global_tokens_2**64": (
        lambda e: attention(e, global_tokens=[0, BIG]),
        "global_tokens: 18446744073709551616",
    ),
    "global_tokens_str": (
        lambda e: attention(e, global_tokens="1"),
        "global_tokens='1': integers are needed",
    ),
    "context_str": (lambda e: clattn.attention(e.q, e.k, e.k, context="0"), r"context='0': a clattn.Context"),
    "causal_str": (lambda e: attention(e, causal="yes"), "causal='yes': True or False"),
    "causal_2": (lambda e: attention(e, causal=2), "causal=2: True or False"),
    "return_lse_none": (lambda e: attention(e, return_lse=None), "return_lse=None: True or False"),
    "layout_int": (lambda e: attention(e, layout=1), "layout=1: one of 'bhsd', 'bshd'"),
    "path_none": (lambda e: attention(e, path=None), "path=None: one of"),
    "variant_int": (lambda e: attention(e, variant=3), "variant=3 is no row of the variant table"),
    "storage_int": (lambda e: attention(e, storage=5), "storage=5: use 'f32'"),
    "scale_str": (lambda e: attention(e, scale="0.5"), "scale='0.5': a number is needed"),
    "scale_1e-50": (lambda e: attention(e, scale=1e-50), "scale=1e-50 rounds to 0 in float32"),
    "scale_-1e-46": (lambda e: attention(e, scale=-1e-46), "scale=-1e-46 rounds to 0 in float32"),
    "scale_inf": (lambda e: attention(e, scale=float("inf")), "scale=inf: must be finite"),
    "scale_nan": (lambda e: attention(e, scale=float("nan")), "scale=nan: must be finite"),
    "scale_1e39": (lambda e: attention(e, scale=1e39), "beyond float32's range"),
    "scale_0": (lambda e: attention(e, scale=0), "scale=0: must be non-zero"),
    # clattn.scaled_dot_product_attention
    "sdpa_scale_1e-46": (lambda e: sdpa(e, scale=1e-46), "scale=1e-46 rounds to 0 in float32"),
    "sdpa_dropout_str": (lambda e: sdpa(e, dropout_p="0"), "dropout_p='0': a number is needed"),
    "sdpa_is_causal_str": (lambda e: sdpa(e, is_causal="no"), "is_causal='no': True or False"),
    "sdpa_enable_gqa_2": (lambda e: sdpa(e, enable_gqa=2), "enable_gqa=2: True or False"),
    # clattn.KVCache and its methods
    "kv_batch_2.5": (lambda e: kv_cache(e, batch=2.5), "batch=2.5: an integer is needed"),
    "kv_capacity_2**64": (lambda e: kv_cache(e, capacity=BIG), "capacity=.*" + SIZE_RANGE),
    "kv_heads_bool": (
        lambda e: kv_cache(e, heads_kv=True),
        "heads_kv=True: an integer is needed, not a bool",
    ),
    "kv_page_size_-1": (lambda e: kv_cache(e, page_size=-1), r"page_size=-1: must be an integer in \[0,"),
    "kv_num_pages_1.5": (lambda e: kv_cache(e, page_size=4, num_pages=1.5), "num_pages=1.5"),
    "kv_dtype_int": (lambda e: kv_cache(e, dtype=5), "dtype=5: the cache stores"),
    "kv_layout_none": (lambda e: kv_cache(e, layout=None), "layout=None: one of"),
    "kv_context_str": (lambda e: kv_cache(e, context="0"), "context='0'"),
    "kv_set_lengths_2**40": (
        lambda e: e.cache.set_lengths([2**40, 0]),
        "lengths: 1099511627776 is out of range",
    ),
    "kv_set_lengths_1.5": (lambda e: e.cache.set_lengths(1.5), "lengths: integers are needed"),
    "kv_new_lengths_1.5": (
        lambda e: e.cache.append(e.rows, e.rows, new_lengths=[1.5, 1]),
        "new_lengths: integers are needed",
    ),
    "kv_new_lengths_2**31": (
        lambda e: e.cache.append(e.rows, e.rows, new_lengths=[2**31, 0]),
        r"new_lengths: 2147483648 is out of range: each value must be an integer in \[-2\^31, 2\^31-1\]",
    ),
    "kv_block_table_float": (lambda e: e.paged.set_block_table([[0.0, 1.0], [2.0, 3.0]]), "table: integers"),
    "kv_block_table_2**64": (
        lambda e: e.paged.set_block_table([[0, BIG], [2, 3]]),
        "table: 18446744073709551616",
    ),
    "kv_rollback_1.5": (lambda e: e.cache.rollback(1.5), "count: integers are needed"),
    "kv_q_lengths_1.5": (
        lambda e: e.cache.attention(e.rows, q_lengths=[1.5, 1]),
        "q_lengths: integers are needed",
    ),
    "kv_attention_window": (lambda e: e.cache.attention(e.rows, window=(BIG, 0)), r"window\[0\]="),
    "kv_attention_scale": (lambda e: e.cache.attention(e.rows, scale=1e-50), "rounds to 0 in float32"),
    "kv_attention_return_lse": (lambda e: e.cache.attention(e.rows, return_lse="yes"), "return_lse='yes'"),
    "kv_read_dequantize": (lambda e: e.cache.read(dequantize="no"), "dequantize='no': True or False"),
    # clattn.MultiheadAttention and its methods
    "mha_heads_2.5": (lambda e: layer(e, heads=2.5), "heads=2.5: an integer is needed"),
    "mha_heads_2**64": (lambda e: layer(e, heads=BIG), "heads=.*" + SIZE_RANGE),
    "mha_kv_heads_bool": (lambda e: layer(e, kv_heads=True), "kv_heads=True"),
    "mha_context_str": (lambda e: layer(e, context="0"), "context='0'"),
    "mha_weight_dtype": (lambda e: layer(e, weight_dtype=3), "weight_dtype=3"),
    "mha_window_2.7": (lambda e: e.layer(e.x, window=(2.7, 0)), r"window\[0\]=2.7"),
    "mha_scale_1e-50": (lambda e: e.layer(e.x, scale=1e-50), "rounds to 0 in float32"),
    "mha_causal_str": (lambda e: e.layer(e.x, causal="yes"), "causal='yes'"),
    "mha_new_lengths_1.5": (
        lambda e: e.layer(e.x, kv_cache=e.cache, new_lengths=[1.5, 1]),
        "new_lengths: integers are needed",
    ),
    "mha_new_cache_batch": (lambda e: e.layer.new_cache(batch=1.5, capacity=8), "batch=1.5"),
    "mha_new_cache_capacity": (lambda e: e.layer.new_cache(batch=1, capacity=BIG), "capacity="),
    # clattn.patterns
    "pattern_len_q_64.5": (lambda e: P.sliding(64.5, 64, 16, window=3), "len_q=64.5: an integer is needed"),
    "pattern_block_size_8.9": (lambda e: P.sliding(64, 64, (8.9, 8), window=3), r"block_size\[0\]=8.9"),
    "pattern_window_3.0": (lambda e: P.sliding(64, 64, 16, window=3.0), "window=3.0: an integer is needed"),
    "pattern_window_2**64": (lambda e: P.sliding(64, 64, 16, window=BIG + 1), "window=.*" + SIZE_RANGE),
    "pattern_seed_2**64": (lambda e: P.bigbird(64, 64, 16, seed=BIG), r"seed=.*\[0, 2\^64-1\]"),
    "pattern_seed_-1": (lambda e: P.bigbird(64, 64, 16, seed=-1), r"seed=-1"),
    "pattern_random_1.5": (lambda e: P.bigbird(64, 64, 16, num_random=1.5), "num_random=1.5"),
    "pattern_global_1.9": (
        lambda e: P.longformer(64, 64, 16, window=3, global_blocks=[1.9]),
        "global_blocks",
    ),
    "pattern_stride_2.5": (lambda e: P.fixed(64, 64, 16, stride=2.5), "stride=2.5"),
    "pattern_stride_bool": (lambda e: P.strided(64, 64, 16, stride=True), "stride=True"),
    "pattern_causal_str": (lambda e: P.strided(64, 64, 16, stride=2, causal="no"), "causal='no'"),
    # contexts and devices
    "context_2**64": (lambda e: clattn.Context(BIG), r"device=.*must be an integer in \[0, 2\^64-1\]"),
    "context_-1": (lambda e: clattn.Context(-1), r"device=-1: must be an integer in \[0,"),
    "context_1.5": (lambda e: clattn.Context(1.5), "device=1.5: an integer is needed"),
    "context_list": (
        lambda e: clattn.Context([0]),
        r"device=\[0\]: a device spec is an index, a str or None",
    ),
    "using_float": (lambda e: clattn.using(1.0).__enter__(), "device=1.0"),
    "set_timing_str": (lambda e: e.context.set_timing("on"), "enabled='on': True or False"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_arguments_are_clattn_errors(env, case: str) -> None:
    call, text = CASES[case]
    with pytest.raises(clattn.Error, match=text) as caught:
        call(env)
    error = caught.value
    assert isinstance(error, ValueError)
    assert (error.status, error.code) == ("CLATTN_ERR_INVALID_ARGUMENT", -7001)
    assert str(error) == f"CLATTN_ERR_INVALID_ARGUMENT: {error.message}"
    # nothing reached the caches
    assert env.cache.lengths.tolist() == [0, 0] and env.paged.lengths.tolist() == [0, 0]
    assert (env.paged.block_table == -1).all()


def test_errors_the_library_finds_carry_its_status(env) -> None:
    """Issue 15's promise: what only C can tell (GQA heads that do not divide) is clattn.Error
    with the library's status and message; so are the shapes Python checks (issue 26)."""
    with pytest.raises(
        clattn.Error, match=r"query heads \(2\) must be a multiple of key/value heads \(3\)"
    ) as c:
        k = env.k[:, :1].repeat(3, 1)
        clattn.attention(env.q, k, k, context=env.context)
    assert c.value.status == "CLATTN_ERR_INVALID_ARGUMENT" and isinstance(c.value, ValueError)
    with pytest.raises(ValueError, match=r"q and k head dims differ \(16 vs 8\)") as c:
        clattn.attention(env.q, env.k[..., :8], env.k, context=env.context)
    assert isinstance(c.value, clattn.Error) and c.value.status == "CLATTN_ERR_INVALID_ARGUMENT"
    with pytest.raises(clattn.Error) as c:
        clattn.Context("no-such-device-anywhere")
    assert (c.value.status, c.value.code) == ("CLATTN_ERR_NO_DEVICE", -7003)


def test_integers_that_fit_are_taken(env) -> None:
    """NumPy integers and exact bounds pass: the checks refuse only what C cannot hold."""
    ref = attention(env, window=(np.int64(2), 0), dilation=np.int32(1))
    assert np.array_equal(ref, attention(env, window=(2, 0)))
    assert_close(attention(env, window=(2**63 - 1, None)), attention(env), "float32")
    env.cache.set_lengths(np.array([1, 2], np.uint8))
    assert env.cache.lengths.tolist() == [1, 2]
    assert P.bigbird(64, 64, 16, seed=2**64 - 1).shape == (4, 4)


# The keyword arguments of the three attention calls, with the defaults docs/python.md gives.
MASKS_AND_PATH = dict(
    causal=False,
    window=None,
    dilation=1,
    global_tokens=None,
    block_layout=None,
    block_size=None,
    bias=None,
    scale=None,
    path="auto",
    variant=None,
)
MODIFIERS = dict(softcap=None, alibi_slopes=None, sinks=None)
CALL_KEYWORDS = {
    "attention": (
        ["q", "k", "v"],
        dict(layout="bhsd", **MASKS_AND_PATH, storage=None, return_lse=False, **MODIFIERS, context=None),
    ),
    "KVCache.attention": (
        ["self", "q"],
        dict(**MASKS_AND_PATH, q_lengths=None, return_lse=False, **MODIFIERS),
    ),
    "MultiheadAttention.forward": (
        ["self", "x", "x_kv"],
        dict(**MASKS_AND_PATH, storage=None, kv_cache=None, new_lengths=None),
    ),
}


@pytest.mark.parametrize("name", list(CALL_KEYWORDS))
def test_the_calls_show_their_keywords(name: str) -> None:
    """The three calls declare their shared keywords once (clattn._common.keyword_groups);
    help() and inspect.signature() still show each keyword, keyword-only, with its default."""
    function = {
        "attention": clattn.attention,
        "KVCache.attention": clattn.KVCache.attention,
        "MultiheadAttention.forward": clattn.MultiheadAttention.forward,
    }[name]
    positional, keywords = CALL_KEYWORDS[name]
    parameters = inspect.signature(function).parameters.values()
    assert [p.name for p in parameters if p.kind == p.POSITIONAL_OR_KEYWORD] == positional
    shown = {p.name: p.default for p in parameters if p.kind == p.KEYWORD_ONLY}
    assert shown == keywords
    assert function.__name__ == name.split(".")[-1] and function.__doc__
    shown_by_help = pydoc.render_doc(function, renderer=pydoc.plaintext)
    assert all(f" {keyword}: " in shown_by_help for keyword in keywords)


def test_a_keyword_no_call_takes_is_a_type_error(env) -> None:
    """As for any Python function: a misspelt keyword, one of another call (a layer takes no
    softcap, a KV cache call no storage), the name of a shared set or a positional argument
    too many is a TypeError naming it, and nothing runs."""
    q_bshd = env.q.transpose(0, 2, 1, 3)
    calls = [
        (lambda: attention(env, casual=True), r"attention\(\) got an unexpected keyword argument 'casual'"),
        (lambda: attention(env, options=None), "unexpected keyword argument 'options'"),
        (lambda: clattn.attention(env.q, env.k, env.k, True), r"takes 3 positional arguments but 4 were given"),
        (lambda: env.layer(env.x, softcap=30.0), r"forward\(\) got an unexpected keyword argument 'softcap'"),
        (lambda: env.layer(env.x, None, True), "positional arguments but 4 were given"),
        (lambda: env.cache.attention(q_bshd, storage="f16"), "unexpected keyword argument 'storage'"),
        (lambda: env.cache.attention(q_bshd, modifiers=None), "unexpected keyword argument 'modifiers'"),
    ]
    before = env.context.transfers()
    for call, text in calls:
        with pytest.raises(TypeError, match=text):
            call()
    assert env.context.transfers() == before and env.cache.lengths.tolist() == [0, 0]


@pytest.mark.parametrize("scale", [-0.3, 1e-44, 40.0])
def test_scales_float32_can_hold(env, scale: float) -> None:
    """Negative, subnormal and large scales that stay non-zero and finite in float32 are taken,
    as the C API and the CLI take them."""
    got, lse = attention(env, scale=scale, return_lse=True)
    want, want_lse = attention_reference(env.q, env.k, env.k, scale=float(np.float32(scale)))
    assert_close(got, want, "float32")
    assert np.isfinite(lse).all() and lse.shape == want_lse.shape


def test_a_tiny_scale_is_not_the_default(env) -> None:
    """Issue 29, defect 3: scale=1e-50 gave exactly the default's result. The smallest scale
    float32 holds is taken as itself: uniform weights, the mean of V."""
    got = attention(env, scale=1.4e-45)
    assert_close(got, np.broadcast_to(env.k.mean(axis=2, keepdims=True), got.shape), "float32")
    assert not np.allclose(got, attention(env))


NO_TORCH = textwrap.dedent("""
    import sys
    sys.modules["torch"] = None  # `import torch` fails from here on, as where it is not installed
    sys.path[:0] = sys.argv[1:]  # the tests' reference.py, the clattn under test
    import numpy as np
    import clattn
    from reference import assert_close, torch_sdpa_reference

    rng = np.random.default_rng(7)
    q, k, v = (rng.uniform(-1, 1, s).astype(np.float32) for s in ((2, 3, 5, 16), (2, 3, 9, 16), (2, 3, 9, 8)))
    boolean = rng.random((5, 9)) < 0.6
    additive = rng.normal(size=(2, 1, 5, 9)).astype(np.float32)
    for mask in (boolean, additive):
        out = clattn.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        assert_close(out, torch_sdpa_reference(q, k, v, attn_mask=mask), "float32")
    clattn.scaled_dot_product_attention(q, k, v, is_causal=True, scale=0.0)
    clattn.attention(q, k, v, bias=additive, return_lse=True)
    with clattn.KVCache(2, 3, 16, 16, dim_v=8) as cache:
        cache.append(k.transpose(0, 2, 1, 3), v.transpose(0, 2, 1, 3))
        cache.attention(q.transpose(0, 2, 1, 3), causal=True)
    try:
        clattn.attention(q, k[..., :8], v)
        raise AssertionError("mismatched head dims were taken")
    except clattn.Error as error:
        assert error.status == "CLATTN_ERR_INVALID_ARGUMENT" and "head dims differ" in error.message
    assert "torch" not in sys.modules or sys.modules["torch"] is None
    print("ok")
    """)


def test_numpy_paths_without_torch(tmp_path: Path) -> None:
    """Issue 26: scaled_dot_product_attention with a NumPy mask raised KeyError 'torch' where
    torch was not installed. Here torch cannot be imported, whether installed or not."""
    package_folder = str(Path(clattn.__file__).resolve().parents[1])
    done = subprocess.run(
        [sys.executable, "-c", NO_TORCH, str(Path(__file__).resolve().parent), package_folder],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr
