"""clattn.Error: the one exception for bad input and failed calls, whether the library or the
package's own checks (_checks.py) found the problem."""

from __future__ import annotations

from typing import Optional

from . import _capi


class Error(ValueError):
    """Bad input, or a call the library could not do.

    A ValueError, so that code catching ValueError for bad arguments catches it.

    Attributes:
        status: the C status name: "CLATTN_ERR_INVALID_ARGUMENT" (also for every problem the
            package finds before calling the library: a wrong type, shape, dtype or value),
            "CLATTN_ERR_NO_DEVICE", "CL_OUT_OF_RESOURCES", ...
        code: its clattn_status value (-7001 for CLATTN_ERR_INVALID_ARGUMENT; OpenCL's own codes
            keep their values).
        message: what was wrong: the library's own line (clattn_context_last_error, or
            clattn_attention_desc_check's message), or the package's, naming the argument.
    """

    def __init__(self, code: int, message: str = "") -> None:
        self.code = code
        self.status = _capi.status_name(code)
        self.message = message or _capi.status_string(code)
        super().__init__(f"{self.status}: {self.message}")

    def __reduce__(self) -> tuple:
        """Rebuilt from its code and message: copies, pickles and errors raised in other
        processes (concurrent.futures) arrive as clattn.Error."""
        return (type(self), (self.code, self.message))


def invalid(message: str) -> Error:
    """An Error for an argument the package refuses before calling the library (raise it)."""
    return Error(_capi.ERR_INVALID_ARGUMENT, message)


def check(status: int, message: str = "", context_handle: Optional[int] = None) -> None:
    """Raises Error unless status is CLATTN_SUCCESS. The message is the context's last error
    when a context handle is given and it has one, else `message`."""
    if status == _capi.SUCCESS:
        return
    detail = ""
    if context_handle:
        detail = _capi.text(_capi.lib.clattn_context_last_error(context_handle))
    raise Error(status, detail or message)
