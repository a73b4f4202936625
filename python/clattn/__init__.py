"""clattn: attention, softmax(Q·Kᵀ·scale + mask)·V, on any OpenCL device.

A NumPy and PyTorch binding of the clattn C library (ctypes over its public C API, include/
clattn.h). The library is the wheel's own copy, else $CLATTN_LIBRARY, else the system's.

    import numpy as np, clattn
    q = np.random.rand(1, 8, 128, 64).astype(np.float32)   # [B, H, N, D]
    o = clattn.attention(q, q, q, causal=True)              # [B, H, N, D]

Main entry points: devices(), Context, attention(), scaled_dot_product_attention() (PyTorch's
signature and semantics), KVCache (decoding over a KV cache), MultiheadAttention (a whole
attention layer: projections, attention, output), patterns, Error.
"""

from . import patterns
from ._capi import library_path
from ._capi import lib as _lib
from .attention import attention
from .context import Context, Stats, Transfers, Variant, default_context, using
from .devices import Device, devices
from .errors import Error
from .kv_cache import KVCache
from .mha import LayerInfo, LayerStats, MultiheadAttention
from .patterns import alibi_slopes
from .sdpa import scaled_dot_product_attention

__version__: str = _lib.clattn_version().decode()
"""The version of the loaded library (the package has the same)."""

__all__ = [
    "Context",
    "Device",
    "Error",
    "KVCache",
    "LayerInfo",
    "LayerStats",
    "MultiheadAttention",
    "Stats",
    "Transfers",
    "Variant",
    "alibi_slopes",
    "attention",
    "default_context",
    "devices",
    "library_path",
    "patterns",
    "scaled_dot_product_attention",
    "using",
]
