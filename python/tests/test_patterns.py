"""clattn.patterns against the formulas of docs/patterns.md, written out in NumPy, and a
pattern used as a block layout against the reference."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import uniform
from reference import assert_close, attention_reference

import clattn

# (len_q, len_k, block_size): square, more keys than queries, more queries than keys
GEOMETRIES = [(128, 128, 16), (48, 160, (16, 32)), (200, 90, (20, 10))]


def block_coordinates(len_q: int, len_k: int, block_size):
    """a' (end-aligned block row) and b (block column), broadcast to the layout's shape."""
    bq, bk = (block_size, block_size) if isinstance(block_size, int) else block_size
    rows, cols = -(-len_q // bq), -(-len_k // bk)
    a = np.arange(rows)[:, None] + (cols - rows)
    b = np.arange(cols)[None, :]
    return a, b


def causal_cut(layout: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return layout & (b <= a)


@pytest.mark.parametrize("geometry", GEOMETRIES)
@pytest.mark.parametrize("causal", [False, True])
def test_formulas(geometry, causal: bool) -> None:
    a, b = block_coordinates(*geometry)
    expected = {
        "sliding": np.abs(a - b) <= 1,
        "fixed": (np.floor_divide(a, 4) == b // 4) | (b % 4 >= 4 - 1),
        "strided": (np.abs(a - b) < 3) | (np.mod(a - b, 3) == 0),
        "longformer": (np.abs(a - b) <= 2) | np.isin(b, [0, 2]) | np.isin(a, [0, 2]),
    }
    made = {
        "sliding": clattn.patterns.sliding(*geometry, window=3, causal=causal),
        "fixed": clattn.patterns.fixed(*geometry, stride=4, summary=1, causal=causal),
        "strided": clattn.patterns.strided(*geometry, stride=3, causal=causal),
        "longformer": clattn.patterns.longformer(*geometry, window=5, global_blocks=[0, 2], causal=causal),
    }
    for kind, layout in made.items():
        want = causal_cut(expected[kind], a, b) if causal else expected[kind] & np.ones_like(a + b, bool)
        assert layout.dtype == np.uint8 and layout.shape == want.shape, kind
        assert np.array_equal(layout != 0, want), kind


@pytest.mark.parametrize("geometry", GEOMETRIES)
def test_bigbird(geometry) -> None:
    a, b = block_coordinates(*geometry)
    fixed_part = (np.abs(a - b) <= 1) | (b < 2) | ((a >= 0) & (a < 2))
    layout = clattn.patterns.bigbird(*geometry, window=3, num_global=2, num_random=2, seed=7) != 0
    assert np.all(layout[fixed_part]), "the band and the global blocks are all in"
    extra = (layout & ~fixed_part).sum(axis=1)
    available = (~fixed_part).sum(axis=1)
    assert np.array_equal(extra, np.minimum(2, available)), "two random blocks a row where there is room"
    again = clattn.patterns.bigbird(*geometry, window=3, num_global=2, num_random=2, seed=7) != 0
    assert np.array_equal(layout, again), "the same seed gives the same layout"


def test_a_pattern_as_block_layout(context, rng) -> None:
    q, k, v = uniform(rng, 1, 2, 100, 32), uniform(rng, 1, 2, 130, 32), uniform(rng, 1, 2, 130, 32)
    layout = clattn.patterns.bigbird(
        100, 130, (16, 16), window=3, num_global=1, num_random=1, seed=3, causal=True
    )
    o = clattn.attention(q, k, v, block_layout=layout, block_size=16, causal=True, context=context)
    ref_o, _ = attention_reference(q, k, v, block_layout=layout, block_size=(16, 16), causal=True)
    assert_close(o, ref_o, "float32")
    stats = context.last_stats()
    assert stats.tiles_visited < stats.tiles_total, "blocks outside the pattern are skipped"
