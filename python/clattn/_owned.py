"""The life of the objects over a C handle: clattn.Context (a clattn_context), and, through
context._OwnedHandle, the objects made on a context, clattn.KVCache (a clattn_kv_cache) and
clattn.MultiheadAttention (a clattn_mha)."""

from __future__ import annotations

from typing import ClassVar, Optional, TypeVar

from . import _capi
from .errors import Error

_Self = TypeVar("_Self", bound="_Handle")


class _Handle:
    """An object over a C handle: the `handle` property, `with` blocks that close it, and its
    release when garbage-collected.

    A subclass names its C type (_c_type: the handle's type, released by <_c_type>_destroy) and
    itself in messages (_what: "the <_what> is closed"), sets _handle once the C object exists,
    and defines close(), which must call _destroy().
    """

    _c_type: ClassVar[str]  # "clattn_kv_cache"
    _what: ClassVar[str]  # "KV cache"
    _handle: Optional[int] = None  # None until created, and once closed

    def close(self) -> None:
        """Releases the C object (idempotent)."""
        self._destroy()

    def _destroy(self) -> None:
        """Releases the C object, if there still is one; the handle is None from then on."""
        handle, self._handle = self._handle, None
        if handle:
            getattr(_capi.lib, f"{self._c_type}_destroy")(handle)

    def _repr(self, fields: str) -> str:
        """The repr of every such object: clattn.<class>(<fields>), and ", closed" once closed."""
        state = "" if self._handle else ", closed"
        return f"clattn.{type(self).__name__}({fields}{state})"

    def __enter__(self: _Self) -> _Self:
        return self

    def _not_copyable(self, *args: object) -> None:
        """A copy would share the C object, and the first copy collected would free it under
        the others: copying, deep copying and pickling raise TypeError."""
        raise TypeError(f"a clattn.{type(self).__name__} owns a C object and cannot be copied "
                        "or pickled; make another one")

    __copy__ = __deepcopy__ = __reduce_ex__ = _not_copyable

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self._destroy()
        except Exception:  # noqa: BLE001 - at interpreter exit the module may be gone
            pass

    @property
    def handle(self) -> int:
        """The C object's pointer (a clattn_context, clattn_kv_cache or clattn_mha), for calls
        into the C API. Raises Error when closed."""
        if not self._handle:
            raise Error(_capi.ERR_INVALID_ARGUMENT, f"the {self._what} is closed")
        return self._handle
