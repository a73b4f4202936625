"""Block-sparse layouts of the standard sparse-attention patterns (clattn_pattern_layout).

Each generator takes the sequence lengths and the block size of the call it is for, and returns
a uint8 array [ceil(Nq/BQ), ceil(Nk/BK)] (1 = the block is computed) to pass as
`attention(..., block_layout=layout, block_size=(BQ, BK))`. Block row a is aligned to the end
like causal attention, at block column a' = a + blocks_k - blocks_q; causal=True keeps only the
blocks with b <= a'. docs/patterns.md has the formulas and pictures.
"""

from __future__ import annotations

import ctypes
import math
from typing import Sequence, Tuple, Union

import numpy as np

from . import _capi, _checks
from ._common import new_struct
from .errors import check, invalid

BlockSize = Union[int, Tuple[int, int]]


def _grid(len_q: int, len_k: int, block_size: BlockSize) -> Tuple[int, int]:
    len_q, len_k = _checks.size(len_q, "len_q"), _checks.size(len_k, "len_k")
    bq, bk = _checks.block_size(block_size)
    return math.ceil(len_q / bq), math.ceil(len_k / bk)


def _odd_window(window: int) -> int:
    window = _checks.size(window, "window")
    if window % 2 == 0:
        raise invalid(f"window={window}: the band's width in blocks must be odd (1, 3, 5, ...)")
    return window


def _layout(kind: int, grid: Tuple[int, int], causal: bool, **fields: object) -> np.ndarray:
    pattern = new_struct(_capi.PatternDesc, "clattn_pattern_desc_init_sized", kind, *grid)
    for name, value in fields.items():
        setattr(pattern, name, value)
    pattern.causal = int(_checks.flag(causal, "causal"))
    layout = np.zeros(grid, dtype=np.uint8)
    status = _capi.lib.clattn_pattern_layout(
        ctypes.byref(pattern), layout.ctypes.data_as(ctypes.POINTER(ctypes.c_uint8))
    )
    check(status, f"clattn_pattern_layout refused {fields} on a {grid[0]}x{grid[1]} block grid")
    return layout


def sliding(
    len_q: int, len_k: int, block_size: BlockSize, *, window: int, causal: bool = False
) -> np.ndarray:
    """A band of `window` (odd) blocks around the diagonal: |a' - b| <= window // 2.
    @return uint8 [ceil(len_q/BQ), ceil(len_k/BK)]."""
    window = _odd_window(window)
    return _layout(_capi.PATTERN_SLIDING, _grid(len_q, len_k, block_size), causal, window=window)


def bigbird(
    len_q: int, len_k: int, block_size: BlockSize, *, window: int = 3, num_global: int = 1,
    num_random: int = 1, seed: int = 0, causal: bool = False
) -> np.ndarray:
    """BigBird (Zaheer et al. 2020): the sliding band of `window` blocks, the first `num_global`
    block rows and columns dense, and `num_random` random blocks a row (seeded: the same seed
    gives the same layout). @return uint8 [ceil(len_q/BQ), ceil(len_k/BK)]."""
    return _layout(
        _capi.PATTERN_BIGBIRD,
        _grid(len_q, len_k, block_size),
        causal,
        window=_odd_window(window),
        global_=_checks.size(num_global, "num_global", minimum=0),
        random=_checks.size(num_random, "num_random", minimum=0),
        seed=_checks.integer(seed, "seed", 0, _checks.UINT64_MAX),
    )


def longformer(
    len_q: int, len_k: int, block_size: BlockSize, *, window: int, global_blocks: Sequence[int] = (),
    causal: bool = False
) -> np.ndarray:
    """Longformer (Beltagy et al. 2020): the sliding band of `window` blocks, and the rows and
    columns of the blocks `global_blocks` dense. @return uint8 [ceil(len_q/BQ), ceil(len_k/BK)]."""
    window = _odd_window(window)
    grid = _grid(len_q, len_k, block_size)
    blocks = [int(b) for b in _checks.integers(global_blocks, "global_blocks").reshape(-1)]
    outside = [b for b in blocks if not 0 <= b < grid[1]]
    if outside:
        raise invalid(f"global_blocks {outside} are outside the {grid[1]} key blocks")
    array = (ctypes.c_size_t * max(1, len(blocks)))(*blocks)
    return _layout(
        _capi.PATTERN_LONGFORMER,
        grid,
        causal,
        window=window,
        global_blocks=ctypes.cast(array, ctypes.POINTER(ctypes.c_size_t)),
        num_global_blocks=len(blocks),
    )


def fixed(
    len_q: int, len_k: int, block_size: BlockSize, *, stride: int, summary: int = 1, causal: bool = False
) -> np.ndarray:
    """The Sparse Transformer's "fixed" pattern (Child et al. 2019), in blocks: a' // stride ==
    b // stride, or b % stride >= stride - summary (the last `summary` blocks of each stride).
    @return uint8 [ceil(len_q/BQ), ceil(len_k/BK)]."""
    stride, summary = _checks.size(stride, "stride"), _checks.size(summary, "summary")
    if summary > stride:
        raise invalid(f"stride={stride}, summary={summary}: need stride >= 1 and 1 <= summary <= stride")
    return _layout(
        _capi.PATTERN_FIXED, _grid(len_q, len_k, block_size), causal, stride=stride, summary=summary
    )


def strided(
    len_q: int, len_k: int, block_size: BlockSize, *, stride: int, causal: bool = False
) -> np.ndarray:
    """The Sparse Transformer's "strided" pattern (Child et al. 2019), in blocks:
    |a' - b| < stride, or (a' - b) % stride == 0. @return uint8 [ceil(len_q/BQ), ceil(len_k/BK)]."""
    stride = _checks.size(stride, "stride")
    return _layout(_capi.PATTERN_STRIDED, _grid(len_q, len_k, block_size), causal, stride=stride)


def alibi_slopes(heads: int) -> np.ndarray:
    """ALiBi's standard slopes for `heads` query heads (BLOOM's, FlashAttention-2's): float32
    [heads], 2^(-8 (h + 1) / n) for the first n heads (n the largest power of two <= heads), the
    rest 2^(-4 (2k + 1) / n). For clattn.attention(alibi_slopes=...)."""
    count = _checks.integer(heads, "heads")
    if count < 1:
        raise invalid(f"heads={heads}: at least one head")
    slopes = np.empty(count, dtype=np.float32)
    status = _capi.lib.clattn_pattern_alibi_slopes(count, slopes.ctypes.data_as(ctypes.POINTER(ctypes.c_float)))
    check(status, "alibi_slopes")
    return slopes
