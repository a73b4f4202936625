"""The C API of include/clattn.h in ctypes: its structs, enums and function prototypes.

Only what the header declares is used. Every struct that starts with `struct_size` is
initialised through its `*_init_sized` function with ctypes.sizeof of the struct below, as the
header's `*_init` macros do in C; tests/test_abi.py checks these layouts against the header.
"""

from __future__ import annotations

import ctypes
from ctypes import (
    POINTER,
    Structure,
    c_char,
    c_char_p,
    c_double,
    c_float,
    c_int,
    c_int32,
    c_int64,
    c_size_t,
    c_uint,
    c_uint8,
    c_uint32,
    c_uint64,
    c_void_p,
)

from ._library import load

lib, library_path = load()

# ---------------------------------------------------------------- enums (values of clattn.h)

SUCCESS = 0
ERR_INVALID_ARGUMENT = -7001
ERR_UNSUPPORTED = -7002
ERR_NO_DEVICE = -7003

DTYPE_F32, DTYPE_F16, DTYPE_BF16, DTYPE_Q8_0, DTYPE_Q4_0 = 0, 1, 2, 3, 4
Q8_BLOCK, Q8_BLOCK_BYTES = 32, 34  # q8_0: 32 values a block, a float16 scale then 32 int8
Q4_BLOCK_BYTES = 18  # q4_0: 32 values a block, a float16 scale then 16 bytes of 4-bit codes
QUANT_BLOCK_BYTES = {DTYPE_Q8_0: Q8_BLOCK_BYTES, DTYPE_Q4_0: Q4_BLOCK_BYTES}
LAYOUT_BSHD, LAYOUT_BHSD = 0, 1
PATH_AUTO, PATH_FUSED, PATH_GEMM, PATH_REFERENCE = 0, 1, 2, 3
VARIANT_AUTO = 0
PATTERN_SLIDING, PATTERN_BIGBIRD, PATTERN_FIXED, PATTERN_STRIDED, PATTERN_LONGFORMER = range(5)

CL_DEVICE_TYPE_CPU, CL_DEVICE_TYPE_GPU, CL_DEVICE_TYPE_ACCELERATOR = 1 << 1, 1 << 2, 1 << 3

# ---------------------------------------------------------------- structs


def _members(c_type, names: str) -> list:
    """Consecutive struct members of one C type, in the header's order: (name, c_type) each."""
    return [(name, c_type) for name in names.split()]


class DeviceInfo(Structure):
    _fields_ = [
        *_members(c_size_t, "struct_size index"),
        *_members(c_uint, "platform_index device_index"),
        *_members(c_void_p, "platform device"),
        *_members(c_char * 256, "name vendor platform_name platform_version driver_version"),
        ("opencl_c_version", c_char * 128),
        ("type", c_uint64),
        ("compute_units", c_uint32),
        *_members(c_uint64, "global_mem_bytes local_mem_bytes max_alloc_bytes"),
        ("max_work_group_size", c_size_t),
        *_members(c_uint32, "preferred_vector_width_float preferred_vector_width_half"),
        *_members(c_int, "has_fp16 has_fp64 has_subgroups"),
        ("num_subgroup_sizes", c_uint),
        ("subgroup_sizes", c_size_t * 8),
    ]


class Tensor(Structure):
    """Element offset and strides (batch, head, seq) of one tensor; the dim stride is 1."""

    _fields_ = _members(c_size_t, "offset stride_batch stride_head stride_seq")


class AttentionDesc(Structure):
    _fields_ = [
        *_members(c_size_t, "struct_size batch heads_q heads_kv len_q len_k dim_qk dim_v"),
        *_members(c_int, "dtype out_dtype"),
        *_members(Tensor, "q k v o"),
        ("scale", c_float),
        ("causal", c_int),
        *_members(c_int64, "window_left window_right dilation"),
        ("global_tokens", POINTER(c_int64)),
        ("num_global_tokens", c_size_t),
        ("block_layout", POINTER(c_uint8)),
        *_members(c_size_t, "block_q block_k"),
        ("block_layout_per_head", c_int),
        ("bias", c_void_p),
        ("bias_host", POINTER(c_float)),
        ("bias_strides", Tensor),
        *_members(c_int, "path variant"),
        ("gemm_budget_bytes", c_size_t),
        *_members(c_int, "count_tiles kv_q8_0"),
        *_members(c_size_t, "q_start k_start full_len_q full_len_k"),
        *_members(c_int, "lse_parts kv_q4_0"),
        ("softcap", c_float),
        ("alibi_slopes", POINTER(c_float)),
        ("alibi_per_batch", c_int),
        ("sinks", POINTER(c_float)),
    ]


class AttentionExtents(Structure):
    """Bytes each tensor of a call spans in its buffer, from its offset to its last element."""

    _fields_ = [
        *_members(c_size_t, "q k v o"),
        ("lse", c_size_t),  # float32 [B, Hq, Nq]
        ("bias", c_size_t),  # 0 when the desc has no bias
    ]


class Stats(Structure):
    _fields_ = [
        ("struct_size", c_size_t),
        *_members(c_int, "path variant"),
        ("pairs", c_uint64),
        ("density", c_double),
        *_members(c_uint64, "tiles_visited tiles_total device_bytes"),
        *_members(c_uint, "block_m block_n chunks"),
        ("kernel_ms", c_double),
        ("kernel", c_char * 96),
        *_members(c_uint64, "tiles_counted host_to_device_bytes device_to_host_bytes mapped_bytes"),
        ("verdict", c_int),
        ("fallback", c_char * 512),
    ]


class Transfers(Structure):
    _fields_ = [
        ("struct_size", c_size_t),
        *_members(c_uint64, "host_to_device_bytes device_to_host_bytes mapped_bytes copies"),
    ]


class TuningAxis(Structure):
    _fields_ = [("field", c_char_p), ("count", c_uint), ("values", c_uint * 8)]


class VariantInfo(Structure):
    _fields_ = [
        ("struct_size", c_size_t),
        *_members(c_int, "variant path"),
        *_members(c_char_p, "name summary"),
        *_members(c_int, "supported used_by_auto"),
        ("reason", c_char * 256),
        ("tuning", c_char * 32),
        ("old_name", c_char_p),
        ("num_axes", c_size_t),
        ("axes", TuningAxis * 8),
    ]


class PatternDesc(Structure):
    _fields_ = [
        ("struct_size", c_size_t),
        ("kind", c_int),
        *_members(c_size_t, "blocks_q blocks_k window"),
        ("global_", c_size_t),  # `global` in C
        ("random", c_size_t),
        ("seed", c_uint64),
        *_members(c_size_t, "stride summary"),
        ("global_blocks", POINTER(c_size_t)),
        ("num_global_blocks", c_size_t),
        ("causal", c_int),
    ]


class KvCacheDesc(Structure):
    _fields_ = [
        *_members(c_size_t, "struct_size batch heads_kv dim_qk dim_v capacity"),
        *_members(c_int, "dtype layout"),
        *_members(c_size_t, "page_size num_pages"),
    ]


class MhaParam(Structure):
    """One weight or bias of a layer: a host array or a cl_mem, from element `offset` on."""

    _fields_ = [("host", c_void_p), ("buffer", c_void_p), ("offset", c_size_t)]


class MhaDesc(Structure):
    _fields_ = [
        *_members(c_size_t, "struct_size d_model heads_q heads_kv dim_qk dim_v d_kv"),
        ("weight_dtype", c_int),
        *_members(MhaParam, "w_q w_k w_v w_o b_q b_k b_v b_o"),
        ("head_mask", POINTER(c_uint8)),
    ]


class MhaInfo(Structure):
    _fields_ = [
        *_members(c_size_t, "struct_size d_model d_kv heads_q heads_kv dim_qk dim_v"),
        ("weight_dtype", c_int),
        *_members(c_size_t, "heads_kept attention_heads_q attention_heads_kv"),
        *_members(c_int, "kv_duplicated has_bias"),
        ("weight_bytes", c_uint64),
    ]


class MhaStats(Structure):
    _fields_ = [
        ("struct_size", c_size_t),
        *_members(c_double, "projection_ms attention_ms output_ms"),
        ("variant", c_int),
        ("kernel", c_char * 96),
        *_members(c_size_t, "attention_heads_q attention_heads_kv"),
        *_members(c_uint64, "projection_flops output_flops"),
        ("projection_gemm", c_int),  # clattn_gemm, from 0.3
        ("output_gemm", c_int),
        ("gemm_kernel", c_char * 96),
    ]


# ---------------------------------------------------------------- functions

Context_p = c_void_p  # clattn_context *


def _declare(name: str, restype, *argtypes) -> None:
    function = getattr(lib, name)
    function.restype = restype
    function.argtypes = list(argtypes)


_declare("clattn_version", c_char_p)
_declare("clattn_status_name", c_char_p, c_int)
_declare("clattn_status_string", c_char_p, c_int)
_declare("clattn_device_info_init_sized", c_int, POINTER(DeviceInfo), c_size_t)
_declare("clattn_device_count", c_int, POINTER(c_size_t))
_declare("clattn_device_get_info", c_int, c_size_t, POINTER(DeviceInfo))
_declare("clattn_device_select", c_int, c_char_p, POINTER(c_size_t), c_size_t, POINTER(c_size_t))
_declare("clattn_device_discovery_summary", c_char_p)
_declare("clattn_context_create", c_int, POINTER(Context_p), c_size_t)
_declare("clattn_context_destroy", None, Context_p)
_declare("clattn_context_device_info", c_int, Context_p, POINTER(DeviceInfo))
_declare("clattn_context_build_log", c_char_p, Context_p)
_declare("clattn_context_last_error", c_char_p, Context_p)
_declare("clattn_context_cl_context", c_void_p, Context_p)
_declare("clattn_context_queue", c_void_p, Context_p)
_declare("clattn_context_set_timing", c_int, Context_p, c_int)
_declare("clattn_context_last_stats", c_int, Context_p, POINTER(Stats))
_declare("clattn_stats_init_sized", c_int, POINTER(Stats), c_size_t)
_declare("clattn_context_transfers", c_int, Context_p, POINTER(Transfers))
_declare("clattn_transfers_init_sized", c_int, POINTER(Transfers), c_size_t)
_declare("clattn_variant_name", c_char_p, c_int)
_declare("clattn_variant_from_name", c_int, c_char_p, POINTER(c_int))
_declare("clattn_variant_info_init_sized", c_int, POINTER(VariantInfo), c_size_t)
_declare("clattn_variant_describe", c_int, Context_p, c_int, POINTER(VariantInfo))
_declare(
    "clattn_attention_desc_init_sized",
    c_int,
    POINTER(AttentionDesc),
    c_size_t,
    c_int,
    *([c_size_t] * 7),
)
_declare(
    "clattn_attention_desc_check",
    c_int,
    POINTER(AttentionDesc),
    POINTER(AttentionExtents),
    c_char_p,
    c_size_t,
)
_declare(
    "clattn_attention_host",
    c_int,
    Context_p,
    POINTER(AttentionDesc),
    c_void_p,
    c_void_p,
    c_void_p,
    c_void_p,
    POINTER(c_float),
)
_declare("clattn_convert", c_int, c_int, c_void_p, c_int, c_void_p, c_size_t)

KvCache_p = c_void_p  # clattn_kv_cache *
Int32_p = POINTER(c_int32)
_declare("clattn_kv_cache_desc_init_sized", c_int, POINTER(KvCacheDesc), c_size_t, *([c_size_t] * 5))
_declare("clattn_kv_cache_create", c_int, Context_p, POINTER(KvCacheDesc), POINTER(KvCache_p))
_declare("clattn_kv_cache_destroy", None, KvCache_p)
_declare("clattn_kv_cache_set_block_table", c_int, KvCache_p, Int32_p)
_declare("clattn_kv_cache_lengths", c_int, KvCache_p, Int32_p)
_declare("clattn_kv_cache_set_lengths", c_int, KvCache_p, Int32_p)
_declare("clattn_kv_cache_append_host", c_int, KvCache_p, c_void_p, c_void_p, c_size_t, Int32_p)
_declare("clattn_kv_cache_write_host", c_int, KvCache_p, c_void_p, c_void_p)
_declare("clattn_kv_cache_read_host", c_int, KvCache_p, c_void_p, c_void_p)
_declare(
    "clattn_kv_cache_attention_host",
    c_int,
    KvCache_p,
    POINTER(AttentionDesc),
    c_void_p,
    Int32_p,
    c_void_p,
    POINTER(c_float),
)

Mha_p = c_void_p  # clattn_mha *
_declare("clattn_mha_desc_init_sized", c_int, POINTER(MhaDesc), c_size_t, *([c_size_t] * 5))
_declare("clattn_mha_create", c_int, Context_p, POINTER(MhaDesc), POINTER(Mha_p))
_declare("clattn_mha_destroy", None, Mha_p)
_declare("clattn_mha_set_head_mask", c_int, Mha_p, POINTER(c_uint8))
_declare("clattn_mha_info_init_sized", c_int, POINTER(MhaInfo), c_size_t)
_declare("clattn_mha_get_info", c_int, Mha_p, POINTER(MhaInfo))
_declare("clattn_mha_forward_host", c_int, Mha_p, POINTER(AttentionDesc), c_void_p, c_void_p, c_void_p)
_declare(
    "clattn_mha_forward_cache",
    c_int,
    Mha_p,
    KvCache_p,
    POINTER(AttentionDesc),
    c_void_p,  # cl_mem x
    Int32_p,
    c_void_p,  # cl_mem y
    c_void_p,  # cl_event *
)
_declare("clattn_mha_stats_init_sized", c_int, POINTER(MhaStats), c_size_t)
_declare("clattn_gemm_name", c_char_p, c_int)
_declare("clattn_mha_last_stats", c_int, Mha_p, POINTER(MhaStats))
_declare("clattn_pattern_desc_init_sized", c_int, POINTER(PatternDesc), c_size_t, c_int, c_size_t, c_size_t)
_declare("clattn_pattern_layout", c_int, POINTER(PatternDesc), POINTER(c_uint8))
_declare("clattn_pattern_alibi_slopes", c_int, c_size_t, POINTER(c_float))


def text(raw: bytes) -> str:
    """A C string from the library as Python text."""
    return raw.decode("utf-8", errors="replace")


def status_name(status: int) -> str:
    return text(lib.clattn_status_name(status))


def status_string(status: int) -> str:
    return text(lib.clattn_status_string(status))


def int32_pointer(array) -> object:
    """An int32 NumPy array as the `int32_t *` the C calls take; None as NULL."""
    return None if array is None else array.ctypes.data_as(Int32_p)


def float_pointer(array) -> object:
    """A float32 NumPy array as the `float *` the C calls and the desc take; None as NULL."""
    return None if array is None else array.ctypes.data_as(POINTER(c_float))


def new_struct(struct_type, init_function: str, *args):
    """A struct initialised by its *_init_sized function, as the header's *_init macro does."""
    value = struct_type()
    status = getattr(lib, init_function)(ctypes.byref(value), ctypes.sizeof(value), *args)
    return value, status
