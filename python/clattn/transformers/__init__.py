"""clattn.transformers: Hugging Face transformers' attention computed by clattn, on any OpenCL
device, and a KV cache that stays on the device.

    import clattn.transformers
    clattn.transformers.register()
    model = AutoModelForCausalLM.from_pretrained(name, attn_implementation="clattn")
    cache = clattn.transformers.DeviceCache(model.config, max_cache_len=1024)
    out = model.generate(**inputs, cache=cache)

register() adds "clattn" to both of transformers' interfaces: AttentionInterface (the attention
of a layer: _attention.py) and AttentionMaskInterface (the masks of a forward pass, as clattn's
causal, window and padding masks, not dense tensors: _masks.py). Registering the attention
alone is not enough: transformers builds no mask for an implementation it does not know, and
padding would be silently dropped.

Importing this module imports transformers (and torch); `import clattn` never does. The device
is clattn's default context (clattn.using(...) or $CLATTN_DEVICE chooses another). See
docs/transformers.md for what is supported and why.
"""

from __future__ import annotations

try:
    import transformers as _transformers
except ImportError as error:  # pragma: no cover - exercised where transformers is absent
    from ..errors import Error as _Error
    from .._capi import ERR_UNSUPPORTED as _UNSUPPORTED

    raise _Error(
        _UNSUPPORTED, f"clattn.transformers needs the transformers package (pip install transformers): {error}"
    ) from None

from transformers import AttentionInterface, AttentionMaskInterface

from ._attention import NOT_YET_COMPUTED, PASSED_THROUGH, attention_forward
from ._cache import DeviceCache, DeviceLayer
from ._masks import Mask, mask

NAME = "clattn"
"""The attn_implementation that register() adds."""


def register(name: str = NAME) -> str:
    """Adds clattn's attention and mask functions to transformers under `name` (default
    "clattn"), for every model made afterwards with attn_implementation=name (from_pretrained,
    from_config, or model.set_attn_implementation(name)). Idempotent. @return the name."""
    AttentionInterface.register(name, attention_forward)
    AttentionMaskInterface.register(name, mask)
    return name


__all__ = [
    "NAME",
    "NOT_YET_COMPUTED",
    "PASSED_THROUGH",
    "DeviceCache",
    "DeviceLayer",
    "Mask",
    "attention_forward",
    "mask",
    "register",
]
