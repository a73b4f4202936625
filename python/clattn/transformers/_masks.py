"""The "clattn" entry of transformers' AttentionMaskInterface: the masks of a forward pass as
clattn's own masks, not as a dense [B, 1, L, S] tensor.

transformers builds a mask once per forward (per kind of layer) by calling the interface with a
mask function (causal_mask_function, the sliding window's and_masks(overlay, causal), the
bidirectional one of encoders, or a model's own composition), the 2-D padding mask and the
positions of the queries and keys. mask() recognises the functions clattn can compute and
returns a Mask that says so: causal or not, a window, and the padding as per-key validity. The
attention function (_attention.py) turns it into clattn's causal and window masks, the padding
into a per-key bias [B, 1, 1, S] broadcast over heads and queries (or, over the device cache,
into each sequence's length). A mask function it does not recognise (or_masks of image tokens,
chunked attention, packed sequences) is evaluated by transformers' own sdpa_mask, and the Mask
carries that dense mask as a bias: correct, slower, and said in Mask.dense_reason.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch
from transformers import masking_utils

# The closures of transformers' mask factories, recognised by their code objects (every closure
# made by one factory shares its code). A factory missing from this transformers version is
# simply never recognised.


def _code_of(factory_name: str, *args: Any) -> Any:
    factory = getattr(masking_utils, factory_name, None)
    return None if factory is None else factory(*args).__code__


_AND_CODE = _code_of("and_masks", masking_utils.causal_mask_function)
_SLIDING_CODE = _code_of("sliding_window_overlay", 1)
_BIDIRECTIONAL_SLIDING_CODE = _code_of("sliding_window_bidirectional_overlay", 1)
_PADDING_CODE = _code_of("padding_mask_function", torch.ones(1, 1, dtype=torch.bool))


@dataclass
class Mask:
    """A forward pass's mask as clattn computes it, for the queries at positions q_offset,
    q_offset + 1, ... and the keys at positions kv_offset, ..., kv_offset + kv_length - 1.

    causal: a query sees keys at or before its position.
    window: (left, right) in positions (a query at p sees keys p - left ... p + right; None for
        an unbounded side), or None. transformers' sliding window w is (w - 1, 0) with causal.
    padding: bool [B, >= kv_offset + kv_length], True for a real token, indexed by position;
        or None when no token is padding.
    dense: bool [B, 1, q_length, kv_length] (True = attend) for a mask clattn's masks cannot
        express, else None; dense_reason says why.
    """

    batch_size: int
    q_length: int
    q_offset: int
    kv_length: int
    kv_offset: int
    causal: bool
    window: Optional[Tuple[Optional[int], Optional[int]]]
    padding: Optional[torch.Tensor]
    dense: Optional[torch.Tensor] = None
    dense_reason: str = ""
    ndim = 4  # a prepared mask, as transformers' 4-D masks are (they are passed on as they are)

    def key_validity(self, first: int, count: int) -> Optional[torch.Tensor]:
        """bool [B, count]: whether the keys at positions first, ..., first + count - 1 are real
        tokens; None when all are."""
        if self.padding is None:
            return None
        valid = self.padding[:, first : first + count]
        if valid.shape[1] < count:  # past the 2-D mask: padding, as transformers pads it
            extra = torch.zeros(valid.shape[0], count - valid.shape[1], dtype=torch.bool)
            valid = torch.cat([valid, extra], dim=1)
        return None if bool(valid.all()) else valid


@dataclass
class _Pattern:
    causal: bool = False
    window: Optional[Tuple[Optional[int], Optional[int]]] = None
    padding: Optional[torch.Tensor] = None


def _closure(function: Callable) -> Dict[str, Any]:
    cells = function.__closure__ or ()
    return {name: cell.cell_contents for name, cell in zip(function.__code__.co_freevars, cells)}


def _narrow(window: Optional[Tuple[Optional[int], Optional[int]]], left: int, right: Optional[int]):
    """The intersection of a window with (left, right)."""
    if window is None:
        return (left, right)
    old_left, old_right = window
    new_left = left if old_left is None else min(old_left, left)
    if right is None:
        return (new_left, old_right)
    return (new_left, right if old_right is None else min(old_right, right))


def _recognise(function: Callable, pattern: _Pattern) -> bool:
    """Folds `function` into `pattern` (an intersection of the functions seen so far); False
    for a function clattn's masks cannot express."""
    code = getattr(function, "__code__", None)
    if function is masking_utils.causal_mask_function:
        pattern.causal = True
    elif function is masking_utils.bidirectional_mask_function:
        pass
    elif code is not None and code is _AND_CODE:
        return all(_recognise(part, pattern) for part in _closure(function)["mask_functions"])
    elif code is not None and code is _SLIDING_CODE:  # kv > q - w: q - kv <= w - 1
        pattern.window = _narrow(pattern.window, int(_closure(function)["sliding_window"]) - 1, None)
    elif code is not None and code is _BIDIRECTIONAL_SLIDING_CODE:  # |q - kv| <= w
        width = int(_closure(function)["sliding_window"])
        pattern.window = _narrow(pattern.window, width, width)
    elif code is not None and code is _PADDING_CODE:
        padding = _closure(function)["padding_mask"]
        pattern.padding = padding if pattern.padding is None else pattern.padding & padding
    else:
        return False
    return True


def _padding(attention_mask: Optional[torch.Tensor], extra: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
    masks: List[torch.Tensor] = [m.to(torch.bool) for m in (attention_mask, extra) if m is not None]
    if not masks:
        return None
    if len(masks) == 2:
        width = min(masks[0].shape[-1], masks[1].shape[-1])
        combined = masks[0][:, :width] & masks[1][:, :width]
    else:
        combined = masks[0]
    return None if bool(combined.all()) else combined


def mask(
    batch_size: int,
    q_length: int,
    kv_length: int,
    q_offset: int = 0,
    kv_offset: int = 0,
    mask_function: Callable = masking_utils.causal_mask_function,
    attention_mask: Optional[torch.Tensor] = None,
    local_size: Optional[int] = None,
    allow_is_causal_skip: bool = True,
    allow_is_bidirectional_skip: bool = False,
    use_vmap: bool = False,
    device: Any = "cpu",
    **kwargs: Any,
) -> Mask:
    """transformers' mask interface for "clattn" (sdpa_mask's arguments): a Mask, never a dense
    tensor where clattn's masks can express the pattern."""
    if isinstance(attention_mask, Mask):  # already prepared (generate's masks for a cache)
        return attention_mask
    q_offset, kv_offset = int(q_offset), int(kv_offset)
    if attention_mask is not None and attention_mask.ndim == 2:
        attention_mask = attention_mask.to(torch.bool)
    positions = (batch_size, q_length, q_offset, kv_length, kv_offset)  # Mask's first fields
    pattern = _Pattern()
    if _recognise(mask_function, pattern):
        return Mask(*positions, pattern.causal, pattern.window, _padding(attention_mask, pattern.padding))
    dense = masking_utils.sdpa_mask(
        batch_size=batch_size,
        q_length=q_length,
        kv_length=kv_length,
        q_offset=q_offset,
        kv_offset=kv_offset,
        mask_function=mask_function,
        attention_mask=attention_mask,
        allow_is_causal_skip=False,
        use_vmap=use_vmap,
        device=device,
    )
    name = getattr(mask_function, "__qualname__", type(mask_function).__name__)
    return Mask(
        *positions,
        False,
        None,
        None,
        dense=dense,
        dense_reason=f"the mask function {name} is not one clattn's masks express",
    )
