"""The few OpenCL calls the package makes itself: device buffers for the C calls that take
cl_mem only (clattn_mha_forward_cache), on the clattn context's own cl_context and queue
(clattn_context_cl_context, clattn_context_queue).

The functions come from the OpenCL ICD loader that libclattn is linked against, already
loaded with it (the system's libOpenCL.so.1, or the manylinux wheel's own copy in clattn.libs/,
whose file name auditwheel changed), opened on first use.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys
from ctypes import POINTER, c_int32, c_size_t, c_uint32, c_uint64, c_void_p
from typing import Any, List, Optional

from . import _capi
from ._library import loaded_files
from .errors import Error

CL_SUCCESS = 0
CL_MEM_READ_WRITE = 1 << 0
CL_MEM_READ_ONLY = 1 << 2
CL_MEM_COPY_HOST_PTR = 1 << 5
CL_TRUE = 1

_loader: Optional[ctypes.CDLL] = None


def _load() -> ctypes.CDLL:
    global _loader
    if _loader is not None:
        return _loader
    names: List[str] = loaded_files("libOpenCL")  # libclattn's own loader, first
    if sys.platform == "darwin":
        names.append("/System/Library/Frameworks/OpenCL.framework/OpenCL")
    elif sys.platform == "win32":
        names.append("OpenCL.dll")
    else:
        names.append("libOpenCL.so.1")
    found = ctypes.util.find_library("OpenCL")
    if found:
        names.append(found)
    errors = []
    for name in names:
        try:
            lib = ctypes.CDLL(name)
        except OSError as error:
            errors.append(f"{name}: {error}")
            continue
        lib.clCreateBuffer.restype = c_void_p
        lib.clCreateBuffer.argtypes = [c_void_p, c_uint64, c_size_t, c_void_p, POINTER(c_int32)]
        lib.clEnqueueReadBuffer.restype = c_int32
        lib.clEnqueueReadBuffer.argtypes = [
            c_void_p,
            c_void_p,
            c_uint32,
            c_size_t,
            c_size_t,
            c_void_p,
            c_uint32,
            c_void_p,
            c_void_p,
        ]
        lib.clReleaseMemObject.restype = c_int32
        lib.clReleaseMemObject.argtypes = [c_void_p]
        _loader = lib
        return lib
    raise Error(_capi.ERR_NO_DEVICE, "cannot load the OpenCL ICD loader: " + "; ".join(errors))


class Buffers:
    """cl_mem buffers on one clattn context, released together (use as a `with` block)."""

    def __init__(self, context_handle: int) -> None:
        self._lib = _load()
        self._cl_context = _capi.lib.clattn_context_cl_context(context_handle)
        self._queue = _capi.lib.clattn_context_queue(context_handle)
        self._buffers: List[int] = []

    def __enter__(self) -> "Buffers":
        return self

    def __exit__(self, *exc_info: object) -> None:
        for buffer in reversed(self._buffers):
            self._lib.clReleaseMemObject(buffer)
        self._buffers.clear()

    def _create(self, flags: int, nbytes: int, host: Any, what: str) -> int:
        err = c_int32(0)
        buffer = self._lib.clCreateBuffer(self._cl_context, flags, nbytes, host, ctypes.byref(err))
        if err.value != CL_SUCCESS or not buffer:
            status = err.value or _capi.ERR_INVALID_ARGUMENT
            raise Error(status, f"clCreateBuffer for {what} ({nbytes} bytes): {_capi.status_string(status)}")
        self._buffers.append(buffer)
        return buffer

    def upload(self, pointer: int, nbytes: int, what: str) -> int:
        """A read-only buffer holding a copy of `nbytes` of host memory at `pointer`."""
        return self._create(CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, nbytes, pointer, what)

    def output(self, nbytes: int, what: str) -> int:
        """A new read-write buffer of `nbytes`."""
        return self._create(CL_MEM_READ_WRITE, nbytes, None, what)

    def read(self, buffer: int, pointer: int, nbytes: int, what: str) -> None:
        """Copies `nbytes` of `buffer` to host memory at `pointer`, waiting for the queue."""
        err = self._lib.clEnqueueReadBuffer(self._queue, buffer, CL_TRUE, 0, nbytes, pointer, 0, None, None)
        if err != CL_SUCCESS:
            raise Error(err, f"reading {what} back: {_capi.status_string(err)}")
