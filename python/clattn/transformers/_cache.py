"""DeviceCache: a transformers Cache whose keys and values live on the OpenCL device, in clattn's
paged KV cache (one clattn.KVCache a layer), for generate(cache=...) as transformers' own
StaticCache is passed.

Why the layers return placeholders: transformers' cache layers hand the model the whole past,
as tensors, at every step (DynamicLayer concatenates, StaticLayer returns its buffers), and the
attention function gets only those tensors. A device cache must not read its past back to the
host, so update() keeps the new rows aside and returns placeholders, NaN tensors of the past's
shape (no memory: a broadcast scalar) that name their layer. clattn's attention function sees
the name and lets the layer append the new rows and attend over the device's rows in one go. A
model that computed on the placeholders instead would get NaN, never silently wrong numbers.

Padding: the append happens in the attention function, which has the forward pass's Mask, so
the padded positions of a left-padded batch are never stored: each sequence holds its own real
tokens, and its length on the device is what clattn's per-sequence masks see. Left padding keeps
the distances between real tokens, so causal and sliding-window masks stay exact; a window over a
sequence with padding after real tokens (holes) is refused. Pages are given to a sequence as it
grows, from the layer's pool.
"""

from __future__ import annotations

import math
from typing import Any, Dict, List, Optional

import numpy as np
import torch
from transformers.cache_utils import Cache, CacheLayerMixin

from .._checks import size as checked_size
from ..context import Context, resolve_context
from ..errors import invalid
from ..kv_cache import KVCache
from ._attention import plan_mask, plan_none
from ._masks import Mask

_LAYER_TYPES = ("full_attention", "sliding_attention")


def _placeholder(like: torch.Tensor, shape: tuple, layer: "DeviceLayer") -> torch.Tensor:
    """A NaN tensor of `shape` that occupies one element and names its layer."""
    tensor = torch.full((), float("nan"), dtype=like.dtype).expand(*shape)
    tensor._clattn_layer = layer  # read by _attention.attention_forward
    return tensor


class DeviceLayer(CacheLayerMixin):
    """One layer's keys and values on the device (a paged clattn.KVCache, made at the first
    update from the shapes it sees)."""

    is_compileable = False
    is_croppable = True
    is_sliding = False  # every row is kept; sliding windows are clattn's window mask

    def __init__(self, max_cache_len: int, page_size: int, dtype: Any, context: Context) -> None:
        super().__init__()
        self.max_cache_len, self.page_size, self.storage, self.context = max_cache_len, page_size, dtype, context
        self.kv: Optional[KVCache] = None
        self.seen = 0  # positions the model has passed (padding included), transformers' length
        self.pending: Optional[tuple] = None  # the new rows, until the attention function
        self.stored = np.zeros(0, dtype=np.int64)  # rows each sequence holds on the device
        self.pages: List[List[int]] = []  # each sequence's pages, in order
        self.free: List[int] = []

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        batch, heads_kv, _, dim_qk = key_states.shape
        capacity = math.ceil(self.max_cache_len / self.page_size) * self.page_size
        self.kv = KVCache(
            batch,
            heads_kv,
            dim_qk,
            capacity,
            dim_v=value_states.shape[-1],
            dtype=self.storage if self.storage is not None else key_states.dtype,
            page_size=self.page_size,
            context=self.context,
        )
        self.device, self.dtype, self.batch_size = key_states.device, key_states.dtype, batch
        self.stored = np.zeros(batch, dtype=np.int64)
        self.pages = [[] for _ in range(batch)]
        self.free = list(range(self.kv.num_pages - 1, -1, -1))
        self.is_initialized = True

    # ------------------------------------------------------------ transformers' side

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any):
        if key_states.device.type != "cpu":
            raise invalid(f"DeviceCache: keys on {key_states.device}; clattn reads host tensors")
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        if self.pending is not None:
            raise invalid("DeviceCache: two updates without attention between them (the model "
                          "does not call the attention function the cache was made for)")
        if key_states.shape[0] != self.batch_size:
            raise invalid(f"DeviceCache: batch {key_states.shape[0]}, the cache holds {self.batch_size}")
        self.pending = (key_states, value_states)
        self.seen += key_states.shape[2]
        batch, heads, _, dim = key_states.shape
        self.keys = _placeholder(key_states, (batch, heads, self.seen, dim), self)
        self.values = _placeholder(value_states, (batch, heads, self.seen, value_states.shape[-1]), self)
        return self.keys, self.values

    def discard_pending(self) -> None:
        """Forgets update()'s rows when the attention function refuses the call before storing
        them: the layer is as it was before the update."""
        if self.pending is not None:
            self.seen -= self.pending[0].shape[2]
            self.pending = None

    def get_mask_sizes(self, query_length: int) -> tuple:
        return self.seen + query_length, 0

    def get_seq_length(self) -> int:
        return self.seen

    def get_max_length(self) -> int:
        return self.max_cache_len

    def reset(self) -> None:
        if self.kv is not None:
            self.kv.set_lengths(0)
            self.kv.set_block_table(np.full((self.batch_size, self.kv.max_pages), -1, dtype=np.int32))
            self.stored[:] = 0
            self.pages = [[] for _ in range(self.batch_size)]
            self.free = list(range(self.kv.num_pages - 1, -1, -1))
        self.seen, self.pending = 0, None

    def crop(self, tokens_to_remove: int) -> None:
        """Forgets the last -tokens_to_remove positions (generated tokens, stored in every
        sequence): assisted decoding's rollback."""
        if tokens_to_remove > 0:
            raise invalid("DeviceCache.crop takes a negative count (tokens to remove)")
        count = -tokens_to_remove
        if count == 0 or self.kv is None:
            return
        if count > self.stored.min():
            raise invalid(f"DeviceCache.crop({tokens_to_remove}): a sequence holds {self.stored.min()} tokens")
        self.stored -= count
        self.seen -= count
        self.kv.set_lengths(self.stored.astype(np.int32))

    def _refuse(self, what: str) -> None:
        if self.seen > 0:
            raise invalid(f"DeviceCache: {what} of a cache that holds rows is not supported (beam "
                          "search); use transformers' own cache for it")

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        self._refuse("reordering the sequences")

    def batch_repeat_interleave(self, repeats: int) -> None:
        self._refuse("repeating the sequences")

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        self._refuse("selecting sequences")

    def offload(self) -> None:  # the rows live on the OpenCL device already
        pass

    def prefetch(self) -> None:
        pass

    # ------------------------------------------------------------ clattn's side

    def _give_pages(self, counts: np.ndarray) -> None:
        """Pages enough for every sequence's rows after appending `counts`."""
        need = self.stored + counts
        if need.max() > self.max_cache_len:
            raise invalid(
                f"DeviceCache(max_cache_len={self.max_cache_len}) is full: a sequence would hold "
                f"{int(need.max())} tokens; make the cache larger"
            )
        changed = False
        for b in range(self.batch_size):
            while len(self.pages[b]) * self.page_size < need[b]:
                self.pages[b].append(self.free.pop())
                changed = True
        if changed:
            table = np.full((self.batch_size, self.kv.max_pages), -1, dtype=np.int32)
            for b, pages in enumerate(self.pages):
                table[b, : len(pages)] = pages
            self.kv.set_block_table(table)

    def _valid_rows(self, mask: Any, q_length: int) -> Optional[torch.Tensor]:
        """bool [B, L]: which new rows are real tokens (None: all), from the forward's Mask."""
        if mask is None:
            return None
        if not isinstance(mask, Mask):
            raise invalid(
                f"DeviceCache: the attention mask is a {type(mask).__name__}; the device cache "
                "takes clattn's masks (clattn.transformers.register() installs them)"
            )
        if mask.dense is not None:
            raise invalid(f"DeviceCache: {mask.dense_reason}; use transformers' own cache for this model")
        if mask.q_offset != self.seen - q_length or mask.kv_offset != 0:
            raise invalid(
                f"DeviceCache: the mask places the queries at {mask.q_offset}, the cache at "
                f"{self.seen - q_length}"
            )
        return mask.key_validity(self.seen - q_length, q_length)

    def _check_window(self, valid: torch.Tensor, window: Any) -> None:
        """A window counts positions: dropping padding keeps them only when no padding follows a
        sequence's first real token."""
        if window is None:
            return
        for b in range(self.batch_size):
            row = valid[b]
            first = int(row.to(torch.int8).argmax()) if bool(row.any()) else len(row)
            if (self.stored[b] > 0 and not bool(row.all())) or not bool(row[first:].all()):
                raise invalid(
                    f"DeviceCache: sequence {b} has padding after a real token, and the layer's "
                    "sliding window counts positions; pad on the left, or use transformers' own cache "
                    "(earlier layers may have stored this forward's rows: reset() the cache)"
                )

    def _append(self, k_new: torch.Tensor, v_new: torch.Tensor, query: torch.Tensor, mask: Any,
                window: Any) -> tuple:
        """Stores the pending rows' real tokens; Q [B, L, Hq, D] in the same order, the counts
        appended (None: all) and the order (None: as given)."""
        valid = self._valid_rows(mask, query.shape[2])
        # [B, H, L, D] views as [B, L, H, D], the cache's layout
        k, v, q = k_new.transpose(1, 2), v_new.transpose(1, 2), query.transpose(1, 2)
        counts, order = None, None
        if valid is not None:
            self._check_window(valid, window)
            order = torch.argsort((~valid).to(torch.int8), dim=1, stable=True)  # real rows first
            k, v, q = (_gather_rows(x, order) for x in (k, v, q))
            counts = valid.sum(dim=1).numpy().astype(np.int32)
        new = counts if counts is not None else np.full(self.batch_size, query.shape[2], dtype=np.int32)
        self._give_pages(new)
        self.kv.append(k, v, new_lengths=counts)
        self.stored += new
        return q, counts, order

    def attend(self, query: torch.Tensor, mask: Any, scaling: Optional[float], causal: bool,
               extra: Dict[str, Any]) -> torch.Tensor:
        """Appends the pending rows (the real tokens only) and attends: [B, L, Hq, Dv]."""
        if self.pending is None:
            raise invalid("DeviceCache: attention without new rows (update was not called)")
        k_new, v_new = self.pending
        self.pending = None
        q_length = query.shape[2]
        window = mask.window if isinstance(mask, Mask) else None
        causal = mask.causal if isinstance(mask, Mask) else causal
        # a prompt from position 0 into an empty cache (not a later chunk after all-padding ones)
        first_fill = not self.stored.any() and self.seen == q_length
        try:
            q, counts, order = self._append(k_new, v_new, query, mask, window)
        except Exception:
            self.seen -= q_length  # update() counted rows the device did not store
            raise
        if first_fill and q_length > 1:  # a prompt into an empty cache: see _attend_prompt
            return _attend_prompt(query, k_new, v_new, mask, scaling, causal, extra, self.context)
        out = self.kv.attention(q, causal=causal, window=window, scale=scaling, q_lengths=counts, **extra)
        if order is None:
            return out
        return torch.zeros_like(out).scatter_(1, order[:, :, None, None].expand_as(out), out)


def _attend_prompt(query, k_new, v_new, mask, scaling, causal, extra, context) -> torch.Tensor:
    """Attention of a prompt over itself, the cache being empty before it: what attention over
    the cache gives (the same keys, masks and padding), computed on the new rows as they are,
    by the fused variants that tile many queries (attention over a cache is the split variant's,
    built for a few queries a sequence). [B, L, Hq, Dv]."""
    q_length = query.shape[2]
    if isinstance(mask, Mask):
        plan = plan_mask(mask, q_length, k_new.shape[2])
    else:
        plan = plan_none(q_length, k_new.shape[2], causal)
    return plan.attend(query, k_new, v_new, plan.bias, scaling, context=context, **extra)


def _gather_rows(x: torch.Tensor, order: torch.Tensor) -> torch.Tensor:
    """x [B, L, H, D] with its rows reordered per sequence: row r of sequence b is order[b, r]."""
    return x.gather(1, order[:, :, None, None].expand(-1, -1, x.shape[2], x.shape[3]))


class DeviceCache(Cache):
    """A KV cache on an OpenCL device for transformers' generate() and forward():

        cache = clattn.transformers.DeviceCache(model.config, max_cache_len=1024)
        model.generate(**inputs, cache=cache)     # past_key_values=cache in older code

    config: the model's config (its decoder's layers and their types).
    max_cache_len: the tokens a sequence may hold (prompt, padding excluded, and new tokens).
    page_size: rows of a page of the paged storage (a sequence takes pages as it grows).
    dtype: storage of K and V: None for the model's, or "float32", "float16", "bfloat16", "q8_0".
    context: the clattn.Context whose device holds the rows (default: clattn's default).

    The model must use attn_implementation="clattn" (clattn.transformers.register()). A decode
    step sends the new token's K, V and Q rows to the device and reads one output row back a
    layer, whatever the context (Context.transfers() measures it). Greedy search, sampling and
    assisted decoding (crop) work; beam search reorders sequences and is refused.
    """

    def __init__(
        self,
        config: Any,
        max_cache_len: int,
        *,
        page_size: int = 256,
        dtype: Any = None,
        context: Optional[Context] = None,
    ) -> None:
        text_config = config.get_text_config(decoder=True)
        max_cache_len = checked_size(max_cache_len, "max_cache_len")
        page_size = checked_size(page_size, "page_size")
        layer_types = getattr(text_config, "layer_types", None) or ["full_attention"] * text_config.num_hidden_layers
        for index, kind in enumerate(layer_types):
            if kind not in _LAYER_TYPES:
                raise invalid(f"DeviceCache: layer {index} is {kind!r}; it holds {' and '.join(_LAYER_TYPES)} layers")
        sharing = getattr(text_config, "kv_sharing_modes", None) or []
        shared = [i for i, mode in enumerate(sharing) if mode == "reuse"]
        if not sharing and getattr(text_config, "num_kv_shared_layers", 0):
            shared = list(range(text_config.num_hidden_layers - text_config.num_kv_shared_layers,
                                text_config.num_hidden_layers))
        if shared:
            raise invalid(f"DeviceCache: layer {shared[0]} reuses another layer's keys and values; "
                          "the device cache holds each layer's own (use transformers' own cache)")
        context = resolve_context(context)
        layers = [DeviceLayer(max_cache_len, page_size, dtype, context) for _ in layer_types]
        super().__init__(layers=layers)
        self.max_cache_len = max_cache_len
