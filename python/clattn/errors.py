"""clattn.Error: a failure the library reported, with its status and its own message."""

from __future__ import annotations

from typing import Optional

from . import _capi


class Error(RuntimeError):
    """A clattn library call failed.

    Attributes:
        status: the clattn_status value (CLATTN_ERR_* in -7001..., or OpenCL's own code).
        name: the status's name ("CLATTN_ERR_INVALID_ARGUMENT", "CL_OUT_OF_RESOURCES").
        message: the library's one-line description of the problem (clattn_context_last_error,
            or clattn_attention_desc_check's message), or the status's own description.
    """

    def __init__(self, status: int, message: str = "") -> None:
        self.status = status
        self.name = _capi.status_name(status)
        self.message = message or _capi.status_string(status)
        super().__init__(f"{self.name}: {self.message}")


def check(status: int, message: str = "", context_handle: Optional[int] = None) -> None:
    """Raises Error unless status is CLATTN_SUCCESS. The message is the context's last error
    when a context handle is given and it has one, else `message`."""
    if status == _capi.SUCCESS:
        return
    detail = ""
    if context_handle:
        detail = _capi.text(_capi.lib.clattn_context_last_error(context_handle))
    raise Error(status, detail or message)
