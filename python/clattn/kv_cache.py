"""clattn.KVCache: the KV cache for decoding (docs/semantics.md section 6), over the C API's
clattn_kv_cache_* functions.

The semantics are FlashAttention-2's `flash_attn_with_kvcache`: each of B sequences holds
lengths[b] key/value rows on the device; append() writes new rows after them and advances the
lengths; attention() lets sequence b's queries, the last q_lengths[b] positions of that sequence,
attend to its first lengths[b] rows, with every mask of docs/semantics.md section 2 applied per sequence.
Storage is contiguous, K [B, capacity, Hkv, Dqk] and V [B, capacity, Hkv, Dv], or paged: pools of
pages [num_pages, page_size, Hkv, D] and a block table [B, capacity / page_size] of int32 page
indices (row t of sequence b is row t % page_size of page table[b][t // page_size]), vLLM's
layout. Paged and contiguous storage give the same results, bit for bit.

    cache = clattn.KVCache(batch=1, heads_kv=8, dim_qk=128, capacity=4096, dtype="float16")
    cache.append(k_prompt, v_prompt)                   # [1, n, 8, 128] each
    o = cache.attention(q_prompt, causal=True)         # q [1, n, 32, 128] -> o [1, n, 32, 128]
    for step in range(steps):
        cache.append(k_token, v_token)                 # [1, 1, 8, 128]
        o = cache.attention(q_token, causal=True)      # [1, 1, 32, 128]
"""

from __future__ import annotations

import ctypes
from typing import Any, Optional, Tuple, Union

import numpy as np

from . import _capi, _checks
from ._capi import float_pointer, int32_pointer
from ._common import attribute, keyword_groups, named_attribute, new_struct
from ._tensors import (
    DTYPE_NAMES,
    STORAGE_TYPES,
    HostTensor,
    as_numpy,
    dense,
    host_tensor,
    is_torch_tensor,
    parse_dtype,
)
from .attention import _LAYOUTS, _Call, _Dims, _input, _Modifiers, _new_lse, _Options, _outputs
from .context import Context, _OwnedHandle, resolve_context
from .errors import check, invalid

_CACHE_DTYPES = {
    **STORAGE_TYPES,
    "q8_0": _capi.DTYPE_Q8_0,
    "q8": _capi.DTYPE_Q8_0,
    "q4_0": _capi.DTYPE_Q4_0,
    "q4": _capi.DTYPE_Q4_0,
}
_CACHE_DTYPE_NAMES = {**DTYPE_NAMES, _capi.DTYPE_Q8_0: "q8_0", _capi.DTYPE_Q4_0: "q4_0"}
# the NumPy dtype read() gives each storage type (bfloat16 as its uint16 bit patterns)
_STORAGE_NUMPY = {
    _capi.DTYPE_F32: np.dtype(np.float32),
    _capi.DTYPE_F16: np.dtype(np.float16),
    _capi.DTYPE_BF16: np.dtype(np.uint16),
}

Shape = Tuple[int, ...]


class KVCache(_OwnedHandle):
    """A KV cache on an OpenCL device: B sequences' keys and values, and their lengths.

    Arguments (those of clattn_kv_cache_desc):
        batch: B, the sequences.    heads_kv: Hkv, the key/value heads.
        dim_qk: Dqk, the head dim of K (and Q).    dim_v: Dv, that of V (default dim_qk).
        capacity: the rows a sequence may hold; for paged storage a multiple of page_size
            (then max_pages = capacity // page_size block table entries a sequence).
        dtype: the storage of K and V: "float32", "float16", "bfloat16", "q4_0" (ggml's 4-bit
            blocks of 32, 18 bytes) or "q8_0" (ggml's 8-bit
            blocks of 32 values and a float16 scale; Dqk and Dv multiples of 32). The rows
            appended may be of any float type; they are rounded (or quantised) to it.
        layout: "bshd" (default, FlashAttention's and the C API's: storage
            [.., rows, Hkv, D], rows and queries [B, n, H, D]) or "bhsd" (PyTorch's order:
            [.., Hkv, rows, D], [B, H, n, D]). append() and attention() take their arrays in it.
        page_size: None or 0 for contiguous storage [B, capacity, Hkv, D]; else the rows of a
            page: storage is a pool [num_pages, page_size, Hkv, D], and set_block_table() says
            which pages each sequence uses (a new paged cache has none: every entry is -1).
        num_pages: pages in the pool (paged only); default B * capacity // page_size, enough
            for every sequence to fill its capacity.
        context: the Context whose device holds the cache (default: clattn.default_context()).
            The cache keeps it alive; closing the context closes the cache first.

    A new cache is zeroed, with every length 0. Close it with close() or a `with` block; it is
    also released when garbage-collected. A cache serves one call at a time (its context's).
    Errors: clattn.Error for every bad argument, whether the package or the library finds it
    (.status and .message say what: appending past a sequence's capacity, a block table entry
    out of range, a non-integral size, ...), after which the cache is unchanged.
    """

    _c_type = "clattn_kv_cache"
    _what = "KV cache"

    def __init__(
        self,
        batch: int,
        heads_kv: int,
        dim_qk: int,
        capacity: int,
        *,
        dim_v: Optional[int] = None,
        dtype: Any = "float32",
        layout: str = "bshd",
        page_size: Optional[int] = None,
        num_pages: Optional[int] = None,
        context: Optional[Context] = None,
    ) -> None:
        self._batch = _checks.size(batch, "batch")
        self._heads_kv = _checks.size(heads_kv, "heads_kv")
        self._dim_qk = _checks.size(dim_qk, "dim_qk")
        self._dim_v = self._dim_qk if dim_v is None else _checks.size(dim_v, "dim_v")
        self._capacity = _checks.size(capacity, "capacity")
        self._dtype = parse_dtype(
            dtype,
            "dtype",
            _CACHE_DTYPES,
            "the cache stores 'float32', 'float16', 'bfloat16', 'q8_0' or 'q4_0' (also 'f32', 'f16', 'bf16')",
        )
        _checks.choice(layout, "layout", _LAYOUTS)
        self._layout = layout
        self._page_size = 0 if page_size is None else _checks.size(page_size, "page_size", minimum=0)
        if self._page_size:
            default_pages = max(1, self._batch * (self._capacity // self._page_size))
            self._num_pages = default_pages if num_pages is None else _checks.size(num_pages, "num_pages")
        elif num_pages is not None:
            raise invalid("num_pages is for paged storage: give page_size too")
        else:
            self._num_pages = 0
        self._block_table: Optional[np.ndarray] = None
        self._context = resolve_context(context)

        sizes = (self._batch, self._heads_kv, self._dim_qk, self._dim_v, self._capacity)
        desc = new_struct(
            _capi.KvCacheDesc, "clattn_kv_cache_desc_init_sized", *sizes, message=f"kv cache sizes {self._sizes_text()}"
        )
        desc.dtype = self._dtype
        desc.layout = _LAYOUTS[layout]
        desc.page_size = self._page_size
        desc.num_pages = self._num_pages
        handle = _capi.KvCache_p()
        with self._context.locked() as ctx:
            status = _capi.lib.clattn_kv_cache_create(ctx, ctypes.byref(desc), ctypes.byref(handle))
            check(status, context_handle=ctx)
            self._own(handle.value)

    # ------------------------------------------------------------ life

    def close(self) -> None:
        """Releases the cache's device storage (idempotent)."""
        super().close()

    def __repr__(self) -> str:
        paged = f", page_size={self._page_size}, num_pages={self._num_pages}" if self._page_size else ""
        return self._repr(
            f"batch={self._batch}, heads_kv={self._heads_kv}, dim_qk={self._dim_qk}, "
            f"capacity={self._capacity}, dim_v={self._dim_v}, dtype={self.dtype!r}, "
            f"layout={self._layout!r}{paged}"
        )

    def _sizes_text(self) -> str:
        return (
            f"B={self._batch} Hkv={self._heads_kv} Dqk={self._dim_qk} Dv={self._dim_v} "
            f"capacity={self._capacity}"
        )

    # ------------------------------------------------------------ what it is

    @property
    def context(self) -> Context:
        """The Context whose device holds the cache."""
        return self._context

    batch = attribute("_batch", "B, the sequences.")
    heads_kv = attribute("_heads_kv", "Hkv, the key/value heads.")
    dim_qk = attribute("_dim_qk", "Dqk, the head dim of K (and Q).")
    dim_v = attribute("_dim_v", "Dv, the head dim of V.")
    capacity = attribute("_capacity", "The rows a sequence may hold.")

    dtype = named_attribute(
        "_dtype", _CACHE_DTYPE_NAMES, 'The storage of K and V: "float32", "float16", "bfloat16", "q8_0" or "q4_0".'
    )

    layout = attribute("_layout", 'The order of the storage and of the arrays the cache takes: "bshd" or "bhsd".')

    @property
    def paged(self) -> bool:
        return self._page_size > 0

    page_size = attribute("_page_size", "Rows a page; 0 for contiguous storage.")
    num_pages = attribute("_num_pages", "Pages in the pool; 0 for contiguous storage.")

    @property
    def max_pages(self) -> int:
        """Block table entries a sequence: capacity // page_size; 0 for contiguous storage."""
        return self._capacity // self._page_size if self._page_size else 0

    @property
    def storage_shapes(self) -> Tuple[Shape, Shape]:
        """The shapes of the K and V storage, as read() returns and write() takes them:
        contiguous [B, capacity, Hkv, D] ("bhsd": [B, Hkv, capacity, D]), paged
        [num_pages, page_size, Hkv, D] ("bhsd": [num_pages, Hkv, page_size, D])."""
        entries = self._num_pages if self._page_size else self._batch
        rows = self._page_size or self._capacity
        if self._layout == "bshd":
            return (entries, rows, self._heads_kv, self._dim_qk), (entries, rows, self._heads_kv, self._dim_v)
        return (entries, self._heads_kv, rows, self._dim_qk), (entries, self._heads_kv, rows, self._dim_v)

    def _rows_shape(self, rows: Union[int, str], dim: int) -> str:
        if self._layout == "bshd":
            return f"[B, {rows}, Hkv, D] = [{self._batch}, {rows}, {self._heads_kv}, {dim}]"
        return f"[B, Hkv, {rows}, D] = [{self._batch}, {self._heads_kv}, {rows}, {dim}]"

    # ------------------------------------------------------------ lengths and pages

    @property
    def lengths(self) -> np.ndarray:
        """int32 [B]: the rows each sequence holds (a copy)."""
        lengths = np.zeros(self._batch, dtype=np.int32)
        with self._locked() as (ctx, cache):
            check(_capi.lib.clattn_kv_cache_lengths(cache, int32_pointer(lengths)), context_handle=ctx)
        return lengths

    def set_lengths(self, lengths: Any) -> None:
        """Sets the rows each sequence holds: int32 [B] (or one int for every sequence), each in
        [0, capacity] and, paged, within the pages the block table gives. To roll back
        speculative tokens or for beam search: rows past a length are kept in the storage but
        no longer seen, and the next append overwrites them. Raises clattn.Error naming the
        sequence for a length out of range; then nothing changes."""
        values = _checks.int32_array(lengths, "lengths", (self._batch,), "one length a sequence", True)
        with self._locked() as (ctx, cache):
            check(_capi.lib.clattn_kv_cache_set_lengths(cache, int32_pointer(values)), context_handle=ctx)

    def rollback(self, count: Any) -> None:
        """Forgets the last `count` rows of each sequence (an int for all, or int [B]): for
        speculative decoding, after the draft tokens the target model rejected. Raises
        clattn.Error when a sequence holds fewer rows."""
        current = self.lengths
        drop = _checks.int32_array(count, "count", (self._batch,), "rows to drop a sequence", True)
        if (drop < 0).any() or (drop > current).any():
            raise invalid(f"rollback({count}): the sequences hold {current.tolist()} rows")
        self.set_lengths(current - drop)

    @property
    def block_table(self) -> Optional[np.ndarray]:
        """int32 [B, max_pages]: the block table last set (a copy; -1 = no page), or None for
        contiguous storage."""
        if not self._page_size:
            return None
        if self._block_table is None:
            return np.full((self._batch, self.max_pages), -1, dtype=np.int32)
        return self._block_table.copy()

    def set_block_table(self, table: Any) -> None:
        """Sets a paged cache's block table: int [B, max_pages], entry [b][p] the page in
        [0, num_pages) that holds rows [p * page_size, (p + 1) * page_size) of sequence b, or -1
        for none (rows there cannot be filled). Pages may be shared between sequences (a common
        prefix) and given in any order. Raises clattn.Error naming the entry for one out of
        range, or a sequence whose rows would lose their page; then nothing changes."""
        if not self._page_size:
            raise invalid("kv cache: a contiguous cache has no block table (create it with page_size=)")
        shape = (self._batch, self.max_pages)
        values = _checks.int32_array(table, "table", shape, "[B, capacity // page_size] page indices", False)
        with self._locked() as (ctx, cache):
            status = _capi.lib.clattn_kv_cache_set_block_table(cache, int32_pointer(values))
            check(status, context_handle=ctx)
        self._block_table = values.copy()

    # ------------------------------------------------------------ appending

    def _rows(self, x: Any, name: str, dim: int) -> Tuple[HostTensor, int]:
        """New K or V rows as append_host reads them: 4-D in the cache's layout, dense, in the
        cache's dtype (float32 for a q8_0 cache, which quantises them on the device)."""
        tensor = host_tensor(x, name, bits_are_bf16=self._dtype == _capi.DTYPE_BF16)
        if tensor.ndim != 4:
            raise invalid(f"{name} must be 4-D, {self._rows_shape('n', dim)}; got shape {tensor.shape}")
        b, first, second, d = tensor.shape
        heads, rows = (second, first) if self._layout == "bshd" else (first, second)
        if b != self._batch or heads != self._heads_kv or d != dim:
            raise invalid(f"{name} has shape {tensor.shape}; the cache takes {self._rows_shape('n', dim)}")
        if rows < 1:
            raise invalid(f"{name} has no rows (n = 0): nothing to append")
        target = _capi.DTYPE_F32 if self._dtype in _capi.QUANT_BLOCK_BYTES else self._dtype
        return dense(tensor, target, name), rows

    def append(self, k_new: Any, v_new: Any, new_lengths: Any = None) -> None:
        """Appends rows to every sequence and advances the lengths.

        k_new: [B, n, Hkv, Dqk] and v_new: [B, n, Hkv, Dv] ("bhsd": [B, Hkv, n, D]), NumPy
            arrays or CPU torch tensors of float32, float16 or bfloat16 (for a bfloat16 cache
            also NumPy uint16 bit patterns). They are rounded to the cache's dtype (to nearest
            even) or, for a q8_0 cache, quantised on the device from float32.
        new_lengths: int [B] (or one int): how many of the n rows sequence b appends (its first
            new_lengths[b]), each in [0, n]; default n for every sequence.
        Rows go to positions lengths[b], ... of sequence b. Raises clattn.Error naming the
        sequence when one would pass its capacity (or, paged, its pages), and then nothing is
        written to any sequence.
        """
        k, k_rows = self._rows(k_new, "k_new", self._dim_qk)
        v, v_rows = self._rows(v_new, "v_new", self._dim_v)
        if k_rows != v_rows:
            raise invalid(f"k_new has {k_rows} new rows and v_new {v_rows}: they must match")
        counts = None
        if new_lengths is not None:
            counts = _checks.int32_array(
                new_lengths, "new_lengths", (self._batch,), "new rows a sequence", True
            )
        with self._locked() as (ctx, cache):
            status = _capi.lib.clattn_kv_cache_append_host(
                cache, k.pointer, v.pointer, k_rows, int32_pointer(counts)
            )
            check(status, context_handle=ctx)

    # ------------------------------------------------------------ attention

    def _storage_dims(self, dim: int) -> _Dims:
        """Dense K or V of `capacity` rows a sequence, as the library checks a call over the
        cache (it then reads the cache's own storage)."""
        rows, heads = self._capacity, self._heads_kv
        if self._layout == "bshd":
            return _Dims(self._batch, heads, rows, dim, rows * heads * dim, dim, heads * dim)
        return _Dims(self._batch, heads, rows, dim, heads * rows * dim, rows * dim, dim)

    @keyword_groups(options=_Options, modifiers=_Modifiers)
    def attention(
        self,
        q: Any,
        *,
        options: _Options,
        q_lengths: Any = None,
        return_lse: bool = False,
        modifiers: _Modifiers,
    ) -> Any:
        """Attention of a query block over the cache (flash_attn_with_kvcache without the
        append; call append() first).

        q: [B, Nq, Hq, Dqk] ("bhsd": [B, Hq, Nq, Dqk]), a NumPy array or CPU torch tensor of
            float32, float16 or bfloat16 (read in place when its last dimension has stride 1
            and the others are >= 0); Hq a multiple of Hkv (query head h reads kv head
            h // (Hq // Hkv)).
        returns o: [B, Nq, Hq, Dv] ("bhsd": [B, Hq, Nq, Dv]) of q's kind and dtype, and with
            return_lse also lse: float32 [B, Hq, Nq] (-inf for rows that see no key).
        Sequence b sees its first L_b = lengths[b] rows; its valid queries are q's first
            q_lengths[b] rows (int [B], each in [0, Nq]; default Nq), and they are its LAST
            q_lengths[b] positions: query row i sits at position p = i + L_b - q_lengths[b].
            Rows i >= q_lengths[b], and every row of a sequence with L_b = 0, get O = 0 and
            LSE = -inf.
        Masks, as in clattn.attention, per sequence with Nk = L_b: causal (keys j <= p; one
            new token sees every cached row), window (left, right), dilation, global_tokens
            (key positions in [0, capacity)), block_layout [ceil(Nq/BQ), ceil(capacity/BK)] (or
            one per query head) with block_size, bias (float, broadcast to
            [B, Hq, Nq, capacity]; only -inf masks; columns j >= L_b are not read).
        scale: default 1/sqrt(Dqk).    path / variant: as in clattn.attention (the "split"
            variant serves calls over a cache; a q8_0 or q4_0 cache is read only by it).
        softcap, alibi_slopes, sinks: as in clattn.attention, per sequence with Nk = L_b.
        """
        qt = _input(q, "q", None)
        qd = _Dims.of(qt, self._layout)
        order = "[B, Nq, Hq, Dqk]" if self._layout == "bshd" else "[B, Hq, Nq, Dqk]"
        if qd.batch != self._batch or qd.dim != self._dim_qk:
            raise invalid(
                f"q has shape {qt.shape}; a cache of B={self._batch}, Dqk={self._dim_qk} "
                f"({self._layout}) takes q {order} with B = {self._batch} and Dqk = {self._dim_qk}"
            )
        if min(qd.heads, qd.seq) < 1:
            raise invalid(f"q has shape {qt.shape}: every size must be >= 1 ({order})")
        call = _Call(
            qd, self._storage_dims(self._dim_qk), self._storage_dims(self._dim_v), self._layout, qt.dtype
        )
        call.set_options(options)
        call.set_modifiers(modifiers)
        o = call.new_output(qd, self._dim_v, self._layout, like=qt)
        q_len = None
        if q_lengths is not None:
            q_len = _checks.int32_array(
                q_lengths, "q_lengths", (self._batch,), "valid query rows a sequence", True
            )
        lse = _new_lse(qd, _checks.flag(return_lse, "return_lse"))
        with self._locked() as (ctx, cache):
            status = _capi.lib.clattn_kv_cache_attention_host(
                cache, ctypes.byref(call.desc), qt.pointer, int32_pointer(q_len), o.pointer, float_pointer(lse)
            )
            check(status, context_handle=ctx)
        return _outputs(o, lse, like=qt)

    # ------------------------------------------------------------ the storage itself

    def _q8_shape(self, shape: Shape) -> Shape:
        """A quantised storage shape as its bytes: each row of D values is D/32 blocks of 34
        bytes (q8_0) or 18 (q4_0)."""
        return shape[:-1] + (shape[-1] // _capi.Q8_BLOCK, _capi.QUANT_BLOCK_BYTES[self._dtype])

    def read(self, *, dequantize: bool = True) -> Tuple[np.ndarray, np.ndarray]:
        """Copies of the whole K and V storage, NumPy arrays of storage_shapes (every row, the
        ones past a sequence's length included; paged: the page pools, in page order).

        float32 and float16 caches give their dtype; bfloat16 its uint16 bit patterns. A q8_0
        cache gives float32 values, dequantised (d * q) on the host, or with dequantize=False
        its blocks as they are: uint8 [..., D / 32, 34], each a little-endian float16 scale d
        and 32 int8 q.
        """
        dequantize = _checks.flag(dequantize, "dequantize")
        k_shape, v_shape = self.storage_shapes
        if self._dtype in _capi.QUANT_BLOCK_BYTES:
            k = np.empty(self._q8_shape(k_shape), dtype=np.uint8)
            v = np.empty(self._q8_shape(v_shape), dtype=np.uint8)
        else:
            k = np.empty(k_shape, dtype=_STORAGE_NUMPY[self._dtype])
            v = np.empty(v_shape, dtype=_STORAGE_NUMPY[self._dtype])
        with self._locked() as (ctx, cache):
            status = _capi.lib.clattn_kv_cache_read_host(cache, k.ctypes.data, v.ctypes.data)
            check(status, context_handle=ctx)
        if self._dtype in _capi.QUANT_BLOCK_BYTES and dequantize:
            return _q8_convert(k, self._dtype, k_shape), _q8_convert(v, self._dtype, v_shape)
        return k, v

    def _storage(self, x: Any, name: str, shape: Shape) -> Any:
        """One of write()'s arrays as the bytes of the storage."""
        if self._dtype in _capi.QUANT_BLOCK_BYTES:
            if not is_torch_tensor(x) and as_numpy(x, name).dtype == np.uint8:
                blocks = as_numpy(x, name)
                if blocks.shape != self._q8_shape(shape):
                    raise invalid(
                        f"{name}: {_CACHE_DTYPE_NAMES[self._dtype]} blocks of shape {blocks.shape}; the storage is uint8 {self._q8_shape(shape)}"
                    )
                return np.ascontiguousarray(blocks)
            values = self._storage_values(x, name, shape, _capi.DTYPE_F32)
            return _q8_convert(values, _capi.DTYPE_F32, shape, self._dtype)
        return self._storage_values(x, name, shape, self._dtype)

    def _storage_values(self, x: Any, name: str, shape: Shape, dtype: int) -> HostTensor:
        """One of write()'s arrays of values, dense in storage type `dtype`."""
        tensor = host_tensor(x, name, bits_are_bf16=dtype == _capi.DTYPE_BF16)
        if tensor.shape != shape:
            raise invalid(f"{name} has shape {tensor.shape}; the storage is {shape}")
        return dense(tensor, dtype, name)

    def write(self, k: Any = None, v: Any = None) -> None:
        """Overwrites the whole K and/or V storage (None leaves it as it is) from arrays of
        storage_shapes, of any float type (rounded to the cache's dtype; for a q8_0 cache
        quantised on the host as the device does, or given as read(dequantize=False)'s uint8
        blocks). The lengths do not change: set_lengths() says which rows are filled."""
        k_shape, v_shape = self.storage_shapes
        k_data = None if k is None else self._storage(k, "k", k_shape)
        v_data = None if v is None else self._storage(v, "v", v_shape)

        def pointer(data: Any) -> Optional[int]:
            if data is None:
                return None
            return data.pointer if isinstance(data, HostTensor) else data.ctypes.data

        with self._locked() as (ctx, cache):
            status = _capi.lib.clattn_kv_cache_write_host(cache, pointer(k_data), pointer(v_data))
            check(status, context_handle=ctx)


def _q8_convert(source: Any, from_dtype: int, shape: Shape, to: int = _capi.DTYPE_Q8_0) -> np.ndarray:
    """Quantised blocks (q8_0, q4_0) -> float32 values of `shape`, or dense float32 values ->
    blocks of `to`."""
    count = int(np.prod(shape, dtype=np.int64))
    if from_dtype in _capi.QUANT_BLOCK_BYTES:
        target = np.empty(shape, dtype=np.float32)
        pointer, to_dtype = source.ctypes.data, _capi.DTYPE_F32
    else:
        blocks = (shape[-1] // _capi.Q8_BLOCK, _capi.QUANT_BLOCK_BYTES[to])
        target = np.empty(shape[:-1] + blocks, dtype=np.uint8)
        pointer, to_dtype = source.pointer, to
    status = _capi.lib.clattn_convert(from_dtype, pointer, to_dtype, target.ctypes.data, count)
    check(status, "converting the quantised storage")
    return target
