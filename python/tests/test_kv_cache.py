"""clattn.KVCache against the float64 NumPy reference: a prefill and decode steps into a cache of
every storage type (float32, float16, bfloat16, q8_0) and both layouts, each step's attention
compared with docs/semantics.md section 1 over the rows cached so far; paged storage through a shuffled
block table (identical to contiguous storage); per-sequence appends and query lengths; masks
and a bias over the cache; rolling back speculative rows; and the errors."""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Tuple

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

B, HQ, HKV, DQK, DV, CAPACITY = 2, 4, 2, 32, 64, 24  # q8_0 needs head dims that are multiples of 32


class Storage:
    """How one storage type's inputs are made and what the cache holds of them."""

    def __init__(
        self,
        name: str,
        inputs: Callable[[np.ndarray], Any],
        held: Callable[[np.ndarray], np.ndarray],
        tolerance: str,
    ) -> None:
        self.name, self.inputs, self.held, self.tolerance = name, inputs, held, tolerance


STORAGES = {
    "float32": Storage("float32", lambda x: x, lambda x: x.astype(np.float64), "float32"),
    "float16": Storage(
        "float16",
        lambda x: x.astype(np.float16),
        lambda x: x.astype(np.float16).astype(np.float64),
        "float16",
    ),
    # float32 rows into a bfloat16 cache: rounded to nearest even on the way in; q stays float32
    "bfloat16": Storage(
        "bfloat16", lambda x: x, lambda x: from_bf16_bits(to_bf16_bits(x)).astype(np.float64), "bfloat16"
    ),
    # q8_0: the reference reads the cache's dequantised values (cached_rows), at float16's
    # tolerance (docs/semantics.md section 4)
    "q8_0": Storage("q8_0", lambda x: x, lambda x: x.astype(np.float64), "float16"),
}


def to_layout(x: np.ndarray, layout: str) -> np.ndarray:
    """A [B, n, H, D] array in `layout` (a copy for "bhsd")."""
    return x if layout == "bshd" else np.ascontiguousarray(x.transpose(0, 2, 1, 3))


def from_layout(x: np.ndarray, layout: str) -> np.ndarray:
    return x if layout == "bshd" else x.transpose(0, 2, 1, 3)


class Mirror:
    """What the cache should hold, row by row, kept in float64 by the test ([L_b, Hkv, D] per
    sequence), for the reference."""

    def __init__(self, storage: Storage) -> None:
        self.storage = storage
        self.k: List[np.ndarray] = [np.zeros((0, HKV, DQK)) for _ in range(B)]
        self.v: List[np.ndarray] = [np.zeros((0, HKV, DV)) for _ in range(B)]

    def append(self, k_new: np.ndarray, v_new: np.ndarray, counts: List[int]) -> None:
        for b in range(B):
            self.k[b] = np.concatenate([self.k[b], self.storage.held(k_new[b, : counts[b]])])
            self.v[b] = np.concatenate([self.v[b], self.storage.held(v_new[b, : counts[b]])])

    def truncate(self, lengths: List[int]) -> None:
        self.k = [k[:n] for k, n in zip(self.k, lengths)]
        self.v = [v[:n] for v, n in zip(self.v, lengths)]

    def lengths(self) -> List[int]:
        return [len(k) for k in self.k]


def cached_rows(cache: clattn.KVCache, mirror: Mirror) -> Tuple[List[np.ndarray], List[np.ndarray]]:
    """Sequence b's first L_b rows [L_b, Hkv, D]: the mirror's, or for q8_0 the cache's own
    dequantised values (after checking they are within half a quantisation step of the mirror's)."""
    if cache.dtype != "q8_0":
        return mirror.k, mirror.v
    stored = [from_layout(x, cache.layout).astype(np.float64) for x in cache.read()]
    assert not cache.paged, "the q8_0 reference reads contiguous storage"
    ks, vs = [], []
    for b, length in enumerate(mirror.lengths()):
        for rows, want, out in (
            (stored[0][b, :length], mirror.k[b], ks),
            (stored[1][b, :length], mirror.v[b], vs),
        ):
            blocks = want.reshape(length, HKV, -1, 32)
            step = np.abs(blocks).max(axis=-1, keepdims=True) / 127  # the block's scale d
            error = np.abs(rows.reshape(blocks.shape) - blocks)
            assert (error <= 0.6 * step + 1e-7).all(), f"q8_0 rows of sequence {b}: worst error {error.max()}"
            out.append(rows)
    return ks, vs


def reference(
    q: np.ndarray,
    ks: List[np.ndarray],
    vs: List[np.ndarray],
    q_lengths: Optional[List[int]] = None,
    bias: Optional[np.ndarray] = None,
    **mask: Any,
) -> Tuple[np.ndarray, np.ndarray]:
    """docs/semantics.md section 6: sequence b's first q_lengths[b] query rows over its cached rows, the rest
    O = 0 and LSE = -inf. q [B, Nq, Hq, D] (bshd); O [B, Nq, Hq, Dv], LSE [B, Hq, Nq]."""
    nq = q.shape[1]
    q_lengths = q_lengths or [nq] * B
    o = np.zeros((B, nq, HQ, DV))
    lse = np.full((B, HQ, nq), -np.inf)
    for b in range(B):
        rows, length = q_lengths[b], len(ks[b])
        if rows == 0 or length == 0:
            continue
        extra = {} if bias is None else {"bias": bias[b : b + 1, :, :rows, :length]}
        ob, lb = attention_reference(
            q[b : b + 1, :rows], ks[b][None], vs[b][None], layout="bshd", **extra, **mask
        )
        o[b, :rows], lse[b, :, :rows] = ob[0], lb[0]
    return o, lse


def compare(got: Any, want: Tuple[np.ndarray, np.ndarray], layout: str, tolerance: str, what: str) -> None:
    o, lse = got
    assert_close(from_layout(np.asarray(o, dtype=np.float64), layout), want[0], tolerance, f"{what}: O")
    assert_lse_close(lse, want[1])


def new_rows(rng: np.random.Generator, n: int) -> Tuple[np.ndarray, np.ndarray]:
    return uniform(rng, B, n, HKV, DQK), uniform(rng, B, n, HKV, DV)


def queries(rng: np.random.Generator, n: int, storage: Storage) -> Tuple[Any, np.ndarray]:
    """Q as passed (float16 for a float16 cache, else float32) and as the reference reads it."""
    q = uniform(rng, B, n, HQ, DQK)
    if storage.name == "float16":
        q = q.astype(np.float16)
    return q, q.astype(np.float64)


# ---------------------------------------------------------------- decoding


@pytest.mark.parametrize("layout", ["bshd", "bhsd"])
@pytest.mark.parametrize("dtype", list(STORAGES))
def test_prefill_then_decode_matches_the_reference(context, rng, dtype: str, layout: str) -> None:
    storage = STORAGES[dtype]
    mirror = Mirror(storage)
    with clattn.KVCache(
        B, HKV, DQK, CAPACITY, dim_v=DV, dtype=dtype, layout=layout, context=context
    ) as cache:
        assert cache.lengths.tolist() == [0, 0] and cache.lengths.dtype == np.int32
        # prefill: 6 rows for sequence 0, 3 for sequence 1 (of one [B, 6, Hkv, D] block)
        k, v = new_rows(rng, 6)
        cache.append(
            to_layout(storage.inputs(k), layout), to_layout(storage.inputs(v), layout), new_lengths=[6, 3]
        )
        mirror.append(k, v, [6, 3])
        assert cache.lengths.tolist() == [6, 3]
        q, q64 = queries(rng, 6, storage)
        got = cache.attention(to_layout(q, layout), causal=True, q_lengths=[6, 3], return_lse=True)
        assert got[0].dtype == q.dtype and got[0].shape == to_layout(np.zeros((B, 6, HQ, DV)), layout).shape
        compare(
            got,
            reference(q64, *cached_rows(cache, mirror), q_lengths=[6, 3], causal=True),
            layout,
            storage.tolerance,
            "prefill",
        )
        # decode: one token a step for every sequence
        for step in range(4):
            k, v = new_rows(rng, 1)
            cache.append(to_layout(storage.inputs(k), layout), to_layout(storage.inputs(v), layout))
            mirror.append(k, v, [1, 1])
            assert cache.lengths.tolist() == mirror.lengths()
            q, q64 = queries(rng, 1, storage)
            got = cache.attention(to_layout(q, layout), causal=True, return_lse=True)
            compare(
                got,
                reference(q64, *cached_rows(cache, mirror), causal=True),
                layout,
                storage.tolerance,
                f"decode step {step}",
            )


def test_stored_rows_read_back(context, rng) -> None:
    """read() gives the storage: the appended rows at their positions, zeros elsewhere."""
    with clattn.KVCache(B, HKV, DQK, CAPACITY, dim_v=DV, dtype="float16", context=context) as cache:
        k, v = new_rows(rng, 5)
        cache.append(k, v, new_lengths=[5, 2])  # float32 rows, rounded to float16 on the way in
        k_stored, v_stored = cache.read()
        assert k_stored.shape == (B, CAPACITY, HKV, DQK) and k_stored.dtype == np.float16
        assert v_stored.shape == (B, CAPACITY, HKV, DV)
        np.testing.assert_array_equal(k_stored[0, :5], k[0].astype(np.float16))
        np.testing.assert_array_equal(v_stored[1, :2], v[1, :2].astype(np.float16))
        assert not k_stored[0, 5:].any() and not v_stored[1, 2:].any()


def test_q8_0_read_write_round_trip(context, rng) -> None:
    with clattn.KVCache(B, HKV, DQK, 8, dim_v=DV, dtype="q8_0", context=context) as cache:
        k, v = new_rows(rng, 8)
        cache.append(k, v)
        blocks_k, blocks_v = cache.read(dequantize=False)
        assert blocks_k.dtype == np.uint8 and blocks_k.shape == (B, 8, HKV, DQK // 32, 34)
        values_k, _ = cache.read()
        scales = blocks_k[..., :2].copy().view(np.float16)[..., 0].astype(np.float32)
        quants = blocks_k[..., 2:].view(np.int8).astype(np.float32)
        np.testing.assert_array_equal(values_k, (scales[..., None] * quants).reshape(values_k.shape))
        # host quantisation (write) stores what the device's (append) did
        with clattn.KVCache(B, HKV, DQK, 8, dim_v=DV, dtype="q8_0", context=context) as other:
            other.write(k, v)
            again_k, again_v = other.read(dequantize=False)
            np.testing.assert_array_equal(again_k, blocks_k)
            np.testing.assert_array_equal(again_v, blocks_v)
            other.write(blocks_k, None)  # raw blocks are taken as they are
            np.testing.assert_array_equal(other.read(dequantize=False)[0], blocks_k)
            assert other.lengths.tolist() == [0, 0]


# ---------------------------------------------------------------- paged storage


@pytest.mark.parametrize("dtype", ["float32", "q8_0"])
def test_paged_storage_is_identical_to_contiguous(context, rng, dtype: str) -> None:
    page_size, spare = 4, 3
    max_pages = CAPACITY // page_size
    pages = B * max_pages + spare
    table = rng.permutation(pages)[: B * max_pages].reshape(B, max_pages).astype(np.int32)
    contiguous = clattn.KVCache(B, HKV, DQK, CAPACITY, dim_v=DV, dtype=dtype, context=context)
    paged = clattn.KVCache(
        B, HKV, DQK, CAPACITY, dim_v=DV, dtype=dtype, page_size=page_size, num_pages=pages, context=context
    )
    with contiguous, paged:
        assert paged.paged and paged.max_pages == max_pages and (paged.block_table == -1).all()
        paged.set_block_table(table)
        np.testing.assert_array_equal(paged.block_table, table)
        for step, (n, counts) in enumerate([(7, [7, 5]), (1, None), (3, [2, 3]), (1, None)]):
            k, v = new_rows(rng, n)
            for cache in (contiguous, paged):
                cache.append(k, v, new_lengths=counts)
            assert paged.lengths.tolist() == contiguous.lengths.tolist()
            q = uniform(rng, B, 2, HQ, DQK)
            want = contiguous.attention(q, causal=True, return_lse=True)
            got = paged.attention(q, causal=True, return_lse=True)
            np.testing.assert_array_equal(got[0], want[0], err_msg=f"step {step}: O")
            np.testing.assert_array_equal(got[1], want[1], err_msg=f"step {step}: LSE")
        # the pools hold the rows where the table says
        pool_k, pool_v = paged.read(dequantize=False)
        rows_k, rows_v = contiguous.read(dequantize=False)
        assert pool_k.shape[:4] == (pages, page_size, HKV, DQK if dtype == "float32" else DQK // 32)
        for b, length in enumerate(paged.lengths):
            for t in range(length):
                page, row = table[b, t // page_size], t % page_size
                np.testing.assert_array_equal(pool_k[page, row], rows_k[b, t])
                np.testing.assert_array_equal(pool_v[page, row], rows_v[b, t])


def test_paged_float16_decode_matches_the_reference(context, rng) -> None:
    """Pages shared by nothing, in reverse order, in the bhsd layout."""
    storage = STORAGES["float16"]
    mirror = Mirror(storage)
    table = np.arange(B * 6, dtype=np.int32)[::-1].reshape(B, 6)
    with clattn.KVCache(
        B, HKV, DQK, CAPACITY, dim_v=DV, dtype="float16", layout="bhsd", page_size=4, context=context
    ) as cache:
        assert cache.storage_shapes == ((B * 6, HKV, 4, DQK), (B * 6, HKV, 4, DV))
        cache.set_block_table(table)
        for n in (5, 1, 1, 2):
            k, v = new_rows(rng, n)
            cache.append(to_layout(k.astype(np.float16), "bhsd"), to_layout(v.astype(np.float16), "bhsd"))
            mirror.append(k, v, [n, n])
            q, q64 = queries(rng, 1, storage)
            got = cache.attention(to_layout(q, "bhsd"), causal=True, return_lse=True)
            compare(got, reference(q64, mirror.k, mirror.v, causal=True), "bhsd", "float16", f"after {n}")


# ---------------------------------------------------------------- masks over the cache


MASKS: Dict[str, Dict[str, Any]] = {
    "window_dilated": {"causal": True, "window": (5, -1), "dilation": 2},
    "window_both_sides": {"window": (3, 1)},
    "global_tokens": {"causal": True, "window": (2, 0), "global_tokens": [0, 4]},
    "scale": {"causal": True, "scale": 0.3},
    "block_layout": {"block_layout": True, "block_size": (2, 4)},
    "bias": {"bias": True, "causal": True},
}


@pytest.mark.parametrize("name", list(MASKS))
def test_masks_over_the_cache(context, rng, name: str) -> None:
    mask = dict(MASKS[name])
    nq, q_lengths = 3, [3, 2]
    call = dict(mask)
    if mask.pop("block_layout", None):
        grid = (-(-nq // 2), CAPACITY // 4)  # [ceil(Nq/BQ), ceil(capacity/BK)]
        layout = (rng.random(grid) < 0.6).astype(np.uint8)
        call["block_layout"], mask["block_layout"] = layout, layout
    bias = None
    if mask.pop("bias", None):
        bias = uniform(rng, B, HQ, nq, CAPACITY)
        bias[rng.random(bias.shape) < 0.2] = -np.inf
        call["bias"] = bias
    with clattn.KVCache(B, HKV, DQK, CAPACITY, dim_v=DV, context=context) as cache:
        mirror = Mirror(STORAGES["float32"])
        k, v = new_rows(rng, 11)
        cache.append(k, v, new_lengths=[11, 8])
        mirror.append(k, v, [11, 8])
        q = uniform(rng, B, nq, HQ, DQK)
        got = cache.attention(q, q_lengths=q_lengths, return_lse=True, **call)
        compare(
            got,
            reference(q.astype(np.float64), mirror.k, mirror.v, q_lengths=q_lengths, bias=bias, **mask),
            "bshd",
            "float32",
            name,
        )


def test_padding_rows_and_empty_sequences(context, rng) -> None:
    with clattn.KVCache(B, HKV, DQK, CAPACITY, dim_v=DV, context=context) as cache:
        k, v = new_rows(rng, 4)
        cache.append(k, v, new_lengths=[4, 0])  # sequence 1 stays empty
        o, lse = cache.attention(uniform(rng, B, 3, HQ, DQK), q_lengths=[1, 3], return_lse=True)
        assert not o[0, 1:].any() and np.isneginf(lse[0, :, 1:]).all()  # padding rows
        assert not o[1].any() and np.isneginf(lse[1]).all()  # no rows cached
        assert np.isfinite(lse[0, :, 0]).all()


def test_torch_tensors_in_and_out(torch, context, rng) -> None:
    with (
        clattn.KVCache(B, HKV, DQK, CAPACITY, dim_v=DV, dtype="bfloat16", context=context) as cache,
        clattn.KVCache(B, HKV, DQK, CAPACITY, dim_v=DV, dtype="bfloat16", context=context) as twin,
    ):
        k, v = new_rows(rng, 5)
        cache.append(torch.from_numpy(k).to(torch.bfloat16), torch.from_numpy(v).to(torch.bfloat16))
        twin.append(to_bf16_bits(k), to_bf16_bits(v))  # NumPy: bfloat16 as uint16 bit patterns
        np.testing.assert_array_equal(cache.read()[0], twin.read()[0])
        q = uniform(rng, B, 1, HQ, DQK)
        o, lse = cache.attention(torch.from_numpy(q), causal=True, return_lse=True)
        assert isinstance(o, torch.Tensor) and o.dtype == torch.float32 and isinstance(lse, torch.Tensor)
        np.testing.assert_array_equal(o.numpy(), twin.attention(q, causal=True))


# ---------------------------------------------------------------- rolling back


def test_rollback_of_speculative_rows(context, rng) -> None:
    storage = STORAGES["float32"]
    mirror = Mirror(storage)
    with clattn.KVCache(B, HKV, DQK, CAPACITY, dim_v=DV, context=context) as cache:
        k, v = new_rows(rng, 6)
        cache.append(k, v, new_lengths=[6, 4])
        mirror.append(k, v, [6, 4])
        q = uniform(rng, B, 1, HQ, DQK)
        before = cache.attention(q, causal=True)
        # three draft tokens; the target model accepts one for sequence 0 and none for 1
        draft_k, draft_v = new_rows(rng, 3)
        cache.append(draft_k, draft_v)
        assert cache.lengths.tolist() == [9, 7]
        cache.rollback([2, 3])
        assert cache.lengths.tolist() == [7, 4]
        mirror.append(draft_k, draft_v, [1, 0])
        compare(
            cache.attention(q, causal=True, return_lse=True),
            reference(q.astype(np.float64), mirror.k, mirror.v, causal=True),
            "bshd",
            "float32",
            "rolled back",
        )
        cache.set_lengths([6, 4])
        mirror.truncate([6, 4])
        np.testing.assert_array_equal(cache.attention(q, causal=True), before)
        # the next append overwrites the rows rolled back
        k, v = new_rows(rng, 2)
        cache.append(k, v)
        mirror.append(k, v, [2, 2])
        compare(
            cache.attention(q, causal=True, return_lse=True),
            reference(q.astype(np.float64), mirror.k, mirror.v, causal=True),
            "bshd",
            "float32",
            "rewritten",
        )
        cache.set_lengths(0)
        assert cache.lengths.tolist() == [0, 0]
        with pytest.raises(clattn.Error, match="hold"):
            cache.rollback(1)


# ---------------------------------------------------------------- errors


@pytest.fixture
def cache(context):
    with clattn.KVCache(B, HKV, DQK, 8, dim_v=DV, context=context) as made:
        yield made


def test_appending_past_capacity_changes_nothing(cache, rng) -> None:
    k, v = new_rows(rng, 5)
    cache.append(k, v, new_lengths=[5, 2])
    stored = cache.read()
    k, v = new_rows(rng, 4)
    with pytest.raises(
        clattn.Error, match="sequence 0 holds 5 rows; 4 more pass its capacity of 8"
    ) as caught:
        cache.append(k, v)
    assert caught.value.status == "CLATTN_ERR_INVALID_ARGUMENT"
    assert cache.lengths.tolist() == [5, 2]
    for before, after in zip(stored, cache.read()):
        np.testing.assert_array_equal(before, after)
    cache.append(k, v, new_lengths=[3, 4])  # exactly to capacity for sequence 0
    assert cache.lengths.tolist() == [8, 6]


@pytest.mark.parametrize(
    "k_shape,v_shape,text",
    [
        ((B, 2, HKV, DQK), (B, 3, HKV, DV), "must match"),
        ((B, 2, HKV + 1, DQK), (B, 2, HKV + 1, DV), "the cache takes"),
        ((B + 1, 2, HKV, DQK), (B + 1, 2, HKV, DV), "the cache takes"),
        ((B, 2, HKV, DV), (B, 2, HKV, DV), "the cache takes"),
        ((2, HKV, DQK), (2, HKV, DV), "4-D"),
        ((B, 0, HKV, DQK), (B, 0, HKV, DV), "no rows"),
    ],
    ids=["lengths_differ", "heads", "batch", "dim_qk", "rank", "empty"],
)
def test_append_shapes(cache, rng, k_shape, v_shape, text: str) -> None:
    with pytest.raises(clattn.Error, match=text):
        cache.append(uniform(rng, *k_shape), uniform(rng, *v_shape))
    assert cache.lengths.tolist() == [0, 0]


def test_append_dtypes_and_counts(cache, rng) -> None:
    k, v = new_rows(rng, 2)
    with pytest.raises(clattn.Error, match="not a storage type"):
        cache.append(k.astype(np.float64), v)
    with pytest.raises(clattn.Error, match="not a storage type"):
        cache.append(k.astype(np.int32), v)
    with pytest.raises(clattn.Error, match=r"new_len\[1\] = 3 is not in \[0, 2\]"):
        cache.append(k, v, new_lengths=[1, 3])
    with pytest.raises(clattn.Error, match="must be"):
        cache.append(k, v, new_lengths=[1, 1, 1])
    with pytest.raises(clattn.Error, match="integers"):
        cache.append(k, v, new_lengths=[0.5, 1.0])
    cache.append(k.astype(np.float16), v)  # any float type, rounded to the cache's
    assert cache.lengths.tolist() == [2, 2]


def test_attention_errors(cache, rng) -> None:
    k, v = new_rows(rng, 3)
    cache.append(k, v)
    with pytest.raises(clattn.Error, match="takes q"):
        cache.attention(uniform(rng, B + 1, 1, HQ, DQK))
    with pytest.raises(clattn.Error, match="takes q"):
        cache.attention(uniform(rng, B, 1, HQ, DQK + 1))
    with pytest.raises(clattn.Error, match="multiple"):
        cache.attention(uniform(rng, B, 1, 3, DQK))
    with pytest.raises(clattn.Error, match=r"q_len\[0\] = 2 is not in \[0, Nq=1\]"):
        cache.attention(uniform(rng, B, 1, HQ, DQK), q_lengths=[2, 1])
    with pytest.raises(clattn.Error, match="block_layout has shape"):
        cache.attention(uniform(rng, B, 1, HQ, DQK), block_layout=np.ones((1, 1), np.uint8), block_size=4)
    with pytest.raises(clattn.Error, match="not a storage type"):
        cache.attention(uniform(rng, B, 1, HQ, DQK).astype(np.float64))


def test_lengths_and_block_table_errors(cache, context, rng) -> None:
    with pytest.raises(clattn.Error, match="length 9 of sequence 1 is not in"):
        cache.set_lengths([0, 9])
    with pytest.raises(clattn.Error, match="contiguous cache has no block table"):
        cache.set_block_table(np.zeros((B, 1), np.int32))
    assert cache.block_table is None
    with clattn.KVCache(B, HKV, DQK, 8, dim_v=DV, page_size=4, num_pages=3, context=context) as paged:
        k, v = new_rows(rng, 1)
        with pytest.raises(clattn.Error, match="row 0 has no page"):
            paged.append(k, v)
        with pytest.raises(clattn.Error, match=r"must be \[2, 2\]"):
            paged.set_block_table(np.zeros((B, 3), np.int32))
        with pytest.raises(clattn.Error, match=r"entry \[1\]\[1\] = 3 is not a page"):
            paged.set_block_table([[0, 1], [2, 3]])
        assert (paged.block_table == -1).all()
        paged.set_block_table([[0, 1], [2, -1]])  # sequence 1 may hold 4 rows
        with pytest.raises(clattn.Error, match="has no page"):
            paged.set_lengths([0, 5])
        with pytest.raises(clattn.Error, match="row 4 has no page"):
            paged.append(*new_rows(rng, 5))
        paged.append(*new_rows(rng, 4))
        assert paged.lengths.tolist() == [4, 4]


@pytest.mark.parametrize(
    "kwargs,text",
    [
        ({"dtype": "int8"}, "dtype='int8'"),
        ({"dtype": "q8_0", "dim_v": 48}, "multiples of 32"),
        ({"layout": "sbhd"}, "layout"),
        ({"num_pages": 4}, "give page_size"),
        ({"page_size": 3}, "multiple of page_size"),
        ({"dim_v": -1}, "dim_v=-1"),
        ({"dim_v": 2.0}, "dim_v=2.0: an integer is needed"),
    ],
    ids=["dtype", "q8_0_dims", "layout", "num_pages_alone", "page_size", "negative", "float"],
)
def test_creation_errors(context, kwargs, text: str) -> None:
    with pytest.raises(clattn.Error, match=text):
        clattn.KVCache(B, HKV, DQK, 8, context=context, **kwargs)


def test_closing(rng) -> None:
    with clattn.Context() as context:
        cache = clattn.KVCache(1, 1, 32, 4, context=context)
        assert cache.context is context and "closed" not in repr(cache)
        other = clattn.KVCache(1, 1, 32, 4, context=context)
        other.close()
        other.close()  # idempotent
        with pytest.raises(clattn.Error, match="closed"):
            _ = other.lengths
    assert "closed" in repr(cache)  # closing the context closed the cache first
    with pytest.raises(clattn.Error, match="closed"):
        cache.append(uniform(rng, 1, 1, 1, 32), uniform(rng, 1, 1, 1, 32))
    cache.close()


def test_the_cache_keeps_its_context_alive(rng) -> None:
    cache = clattn.KVCache(1, 1, 32, 4, context=clattn.Context())  # no other reference to the context
    k = uniform(rng, 1, 2, 1, 32)
    cache.append(k, k)
    assert cache.lengths.tolist() == [2]
    del cache  # released by the garbage collector, then its context


def test_a_decoding_step_moves_the_same_bytes_at_any_length(context, rng) -> None:
    """A step (one new row a sequence, then attention) sends the new rows, the query and the
    lengths, whatever the cache holds: Context.transfers() over a step at 8 and at 200 rows."""
    cache = clattn.KVCache(B, HKV, DQK, 256, page_size=32, context=context)
    cache.set_block_table(np.arange(B * 8, dtype=np.int32).reshape(B, 8))

    def step(filled: int) -> clattn.Transfers:
        cache.set_lengths([filled, filled - 5])
        before = context.transfers()
        cache.append(uniform(rng, B, 1, HKV, DQK), uniform(rng, B, 1, HKV, DQK))
        cache.attention(uniform(rng, B, 1, HQ, DQK), causal=True)
        return context.transfers() - before

    short, long = step(8), step(200)
    assert long == short
    to_device = long.host_to_device_bytes + long.mapped_bytes
    new_rows, query = 2 * B * HKV * DQK * 4, B * HQ * DQK * 4
    assert new_rows + query <= to_device < 4 * (new_rows + query)
