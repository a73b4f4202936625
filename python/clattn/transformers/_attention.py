"""The "clattn" entry of transformers' AttentionInterface: the attention of one layer, computed by
clattn on the default context's device.

A model calls it as it calls sdpa_attention_forward: query [B, Hq, L, D], key and value
[B, Hkv, S, D] (views of the projections), the mask of the forward pass, the scale and the
dropout; it returns the output [B, L, Hq, Dv] and no weights. The mask is the Mask that
_masks.mask() made (clattn's causal and window masks, the padding as a per-key bias row), a
model's own 4-D tensor (added as a bias, as sdpa adds it), or None (sdpa's is_causal rule).
Keys and values that come from a DeviceCache are placeholders that name their layer: that layer
appends the new rows on the device and attends there (_cache.py).
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Tuple

import torch

from ..attention import attention
from ..errors import invalid
from ._masks import Mask

# Arguments that models pass to the attention function and clattn does not compute yet (none
# now); when clattn takes one, its entry moves to PASSED_THROUGH.
NOT_YET_COMPUTED: Dict[str, str] = {}
# transformers' argument -> clattn.attention's (and KVCache.attention's) keyword for it:
# Gemma 2's soft-capping of the scores, gpt-oss's attention sinks (a learned logit a head, the
# module's `sinks` parameter, passed as s_aux), docs/semantics.md section 8.
PASSED_THROUGH: Dict[str, str] = {"softcap": "softcap", "s_aux": "sinks", "sinks": "sinks"}


def refuse_what_clattn_cannot_compute(module: Any, dropout: float, kwargs: Dict[str, Any]) -> None:
    """Raises clattn.Error naming the first argument clattn cannot honour."""
    config = getattr(module, "config", None)
    wants_weights = kwargs.get("output_attentions")
    if wants_weights is None:
        wants_weights = getattr(config, "output_attentions", False)
    if wants_weights:
        raise invalid(
            "output_attentions=True: clattn never forms the attention weights (it computes "
            "softmax(QK^T)V a tile at a time); use attn_implementation='eager' to get them"
        )
    if dropout:
        training = " (the model is in training mode)" if getattr(module, "training", False) else ""
        raise invalid(
            f"dropout={dropout}{training}: clattn computes attention for inference, without "
            "dropout; call model.eval(), or set the config's attention dropout to 0"
        )
    for name, what in NOT_YET_COMPUTED.items():
        if kwargs.get(name) is not None and name not in PASSED_THROUGH:
            raise invalid(
                f"{name}: the model asks for {what}, which clattn does not compute yet; use "
                "attn_implementation='eager' or 'sdpa' for this model"
            )


def passed_through(kwargs: Dict[str, Any]) -> Dict[str, Any]:
    """The arguments clattn takes, under clattn's names."""
    return {ours: kwargs[theirs] for theirs, ours in PASSED_THROUGH.items() if kwargs.get(theirs) is not None}


def _minus_inf_where_not(valid: torch.Tensor) -> torch.Tensor:
    bias = torch.zeros(valid.shape, dtype=torch.float32)
    return bias.masked_fill_(~valid, float("-inf"))


class Plan:
    """One call's keys (the first key_count of S), clattn masks and bias."""

    def __init__(self, key_count: int, causal: bool, window: Any, bias: Optional[torch.Tensor]) -> None:
        self.key_count, self.causal, self.window, self.bias = key_count, causal, window, bias

    def attend(
        self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, bias: Any, scaling: Any, **extra: Any
    ) -> torch.Tensor:
        """clattn.attention of query [B, Hq, L, D] over the first key_count rows of key and
        value [B, Hkv, S, D] with this plan's masks and `bias`; `extra`: its other keywords
        (softcap, sinks, context). [B, H, N, D] views as [B, N, H, D]: the projections' own
        memory order, and O comes out as the [B, L, Hq, Dv] the model wants, without a
        transposing copy."""
        return attention(
            query.transpose(1, 2),
            key[:, :, : self.key_count].transpose(1, 2),
            value[:, :, : self.key_count].transpose(1, 2),
            layout="bshd",
            causal=self.causal,
            window=self.window,
            bias=bias,
            scale=scaling,
            **extra,
        )


def plan_mask(mask: Mask, q_length: int, keys: int) -> Plan:
    """clattn's masks for a Mask: queries at positions q_offset + i, keys at kv_offset + j. With
    causal, keys past the last query's position are never seen, so the call takes the first
    q_offset - kv_offset + L keys, and clattn's end-aligned causal then matches positions."""
    if mask.dense is not None:
        if mask.dense.shape[-1] != keys:
            raise invalid(f"the mask covers {mask.dense.shape[-1]} keys, the call has {keys}")
        return Plan(keys, False, None, _minus_inf_where_not(mask.dense))
    shift = mask.q_offset - mask.kv_offset  # key index of query row 0's position
    key_count = shift + q_length if mask.causal else keys
    if not 1 <= key_count <= keys:
        raise invalid(
            f"the mask places {q_length} queries at positions from {mask.q_offset} over keys from "
            f"position {mask.kv_offset}, but the call has {keys} keys"
        )
    window = mask.window
    if window is not None and not mask.causal:  # end-aligned: p = i + S - L; positions: i + shift
        offset = keys - q_length - shift
        left = None if window[0] is None else window[0] + offset
        right = None if window[1] is None else window[1] - offset
        if (left is not None and left < 0) or (right is not None and right < 0):
            raise invalid(f"a bidirectional window {window} at query offset {shift} is not expressible")
        window = (left, right)
    valid = mask.key_validity(mask.kv_offset, key_count)
    bias = None if valid is None else _minus_inf_where_not(valid)[:, None, None, :]
    return Plan(key_count, mask.causal, window, bias)


def plan_tensor(mask: torch.Tensor, keys: int) -> Plan:
    """A model's own mask [.., L, S]: bool (True = attend) or float, added as sdpa adds it (sdpa
    refuses other dtypes: an integer 0/1 mask added as a bias would mask nothing)."""
    if mask.dtype != torch.bool and not mask.is_floating_point():
        raise invalid(
            f"attention_mask is {mask.dtype}: clattn reads bool masks (True = attend) or float "
            "ones (added to the scores), as sdpa does"
        )
    bias = _minus_inf_where_not(mask) if mask.dtype == torch.bool else mask.float()
    return Plan(keys, False, None, bias)


def plan_none(q_length: int, keys: int, is_causal: bool) -> Plan:
    """No mask: sdpa's rule, causal only for more than one query, aligned top-left (query i sees
    keys j <= i), which clattn's end-aligned causal matches over the first L keys."""
    if not (is_causal and q_length > 1):
        return Plan(keys, False, None, None)
    if keys >= q_length:
        return Plan(q_length, True, None, None)
    return Plan(keys, False, (None, q_length - keys), None)


def attention_forward(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: Any,
    dropout: float = 0.0,
    scaling: Optional[float] = None,
    is_causal: Optional[bool] = None,
    position_bias: Optional[torch.Tensor] = None,
    **kwargs: Any,
) -> Tuple[torch.Tensor, None]:
    """transformers' attention interface for "clattn": returns ([B, L, Hq, Dv], None)."""
    layer = getattr(key, "_clattn_layer", None)
    try:
        refuse_what_clattn_cannot_compute(module, dropout, kwargs)
        extra = passed_through(kwargs)
        if layer is not None and position_bias is not None:
            raise invalid("position_bias: a DeviceCache takes no bias; use transformers' own cache")
    except Exception:
        if layer is not None:  # a DeviceCache's placeholder: its layer forgets the update
            layer.discard_pending()
        raise
    causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    if layer is not None:  # a DeviceCache's placeholder: its layer attends on the device
        return layer.attend(query, attention_mask, scaling, causal, extra), None
    q_length, keys = query.shape[2], key.shape[2]
    if isinstance(attention_mask, Mask):
        plan = plan_mask(attention_mask, q_length, keys)
    elif isinstance(attention_mask, torch.Tensor):
        plan = plan_tensor(attention_mask, keys)
    elif attention_mask is None:
        plan = plan_none(q_length, keys, causal)
    else:
        raise invalid(f"attention_mask: a {type(attention_mask).__name__} is not a mask clattn reads")
    bias = plan.bias
    if position_bias is not None:
        position = position_bias[..., : plan.key_count].float()
        bias = position if bias is None else position + bias
    return plan.attend(query, key, value, bias, scaling, **extra), None
