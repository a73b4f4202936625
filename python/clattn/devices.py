"""The OpenCL devices clattn sees, and device specs (the same forms as the CLI's --device)."""

from __future__ import annotations

import ctypes
import numbers
import os
from dataclasses import dataclass
from typing import List, Optional, Tuple, Union

from . import _capi, _checks
from ._common import fetch, new_struct, record
from .errors import Error, check, invalid

DeviceSpec = Union[int, str, None]
"""An index (0), "P:D" (platform P, device D), a type ("gpu", "cpu", "accelerator", "all"), or a
case-insensitive substring of the device or platform name. None: $CLATTN_DEVICE when set, else
the first GPU, else the first device."""


@dataclass(frozen=True)
class Device:
    """One OpenCL device: what `clattn devices` prints about it."""

    index: int  # position in clattn's flat list of every device of every platform
    platform_index: int  # P of the "P:D" spec
    device_index: int  # D of the "P:D" spec
    type: str  # "gpu", "cpu", "accelerator" or "other"
    name: str
    vendor: str
    platform_name: str
    platform_version: str
    driver_version: str
    opencl_c_version: str
    compute_units: int
    global_mem_bytes: int
    local_mem_bytes: int
    max_alloc_bytes: int
    max_work_group_size: int
    preferred_vector_width_float: int
    preferred_vector_width_half: int
    has_fp16: bool  # cl_khr_fp16 (half arithmetic; half storage works everywhere)
    has_fp64: bool
    has_subgroups: bool
    subgroup_sizes: Tuple[int, ...]
    is_default: bool  # the device a Context() without a spec opens

    @property
    def spec(self) -> str:
        """The "P:D" spec naming exactly this device."""
        return f"{self.platform_index}:{self.device_index}"


def _type_name(cl_type: int) -> str:
    if cl_type & _capi.CL_DEVICE_TYPE_GPU:
        return "gpu"
    if cl_type & _capi.CL_DEVICE_TYPE_CPU:
        return "cpu"
    if cl_type & _capi.CL_DEVICE_TYPE_ACCELERATOR:
        return "accelerator"
    return "other"


def device_record(info: _capi.DeviceInfo, default: Optional[int]) -> Device:
    """A Device from the C struct."""
    return record(
        Device,
        info,
        type=_type_name(info.type),
        subgroup_sizes=tuple(info.subgroup_sizes[: info.num_subgroup_sizes]),
        is_default=info.index == default,
    )


def device_count() -> int:
    """@return how many OpenCL devices the ICD loader knows (0 without a driver)."""
    count = ctypes.c_size_t(0)
    check(_capi.lib.clattn_device_count(ctypes.byref(count)))
    return count.value


def default_index() -> Optional[int]:
    index, matched = ctypes.c_size_t(0), ctypes.c_size_t(0)
    status = _capi.lib.clattn_device_select(None, ctypes.byref(index), 1, ctypes.byref(matched))
    return index.value if status == _capi.SUCCESS and matched.value else None


def device_info(index: int) -> Device:
    """@return the Device at `index` of the flat list. Raises Error for an index out of range."""
    info = fetch(
        _capi.DeviceInfo,
        "clattn_device_info_init_sized",
        "clattn_device_get_info",
        index,
        message=f"device index {index} is out of range ({device_count()} devices)",
    )
    return device_record(info, default_index())


def devices() -> List[Device]:
    """@return every device of every OpenCL platform, in clattn's order (an empty list when no
    OpenCL driver is installed)."""
    default = default_index()
    found = []
    for index in range(device_count()):
        info = new_struct(_capi.DeviceInfo, "clattn_device_info_init_sized")
        if _capi.lib.clattn_device_get_info(index, ctypes.byref(info)) == _capi.SUCCESS:
            found.append(device_record(info, default))
    return found


def select(spec: DeviceSpec = None) -> List[int]:
    """Resolves a device spec to the indices of every device it names, in list order.
    Raises Error: CLATTN_ERR_NO_DEVICE when it names none, or no OpenCL device exists;
    CLATTN_ERR_INVALID_ARGUMENT for what is no spec (a negative index, a list, ...)."""
    if spec is not None and not isinstance(spec, str):
        if isinstance(spec, bool) or not isinstance(spec, numbers.Real):
            raise invalid(
                f"device={spec!r}: a device spec is an index, a str or None, not a {type(spec).__name__}"
            )
        spec = _checks.size(spec, "device", minimum=0)
    total = device_count()
    if total == 0:  # the library says why: what loaded and offered none, or what to install
        why = _capi.lib.clattn_device_discovery_summary().decode(errors="replace")
        raise Error(_capi.ERR_NO_DEVICE, f"no OpenCL device found: {why}")
    text = None if spec is None else str(spec).encode()
    indices = (ctypes.c_size_t * total)()
    count = ctypes.c_size_t(0)
    status = _capi.lib.clattn_device_select(text, indices, total, ctypes.byref(count))
    if status != _capi.SUCCESS:
        from_environment = os.environ.get("CLATTN_DEVICE")
        shown = f"'{spec}'" if spec is not None else f"$CLATTN_DEVICE '{from_environment}'"
        raise Error(status, f"no device matches {shown} ({total} devices; see clattn.devices())")
    return list(indices[: min(count.value, total)])
