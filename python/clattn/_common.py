"""What the package's objects share over the C API: structs made by their *_init_sized function
and filled by a getter, with the status checked; a C struct read into the frozen dataclass the
package returns (Device, Stats, LayerInfo, ...); and read-only attributes."""

from __future__ import annotations

import ctypes
import dataclasses
import operator
import typing
from typing import Any, Optional, Type, TypeVar

from . import _capi
from .errors import check

_Record = TypeVar("_Record")


def new_struct(struct_type: Any, init_function: str, *args: Any, message: str = "") -> Any:
    """A struct initialised by its *_init_sized function (as the header's *_init macro does).
    Raises Error, with `message` when given, unless the library takes the arguments."""
    value, status = _capi.new_struct(struct_type, init_function, *args)
    check(status, message)
    return value


def fetch(struct_type: Any, init_function: str, getter: str, handle: Any, **check_with: Any) -> Any:
    """A new struct filled by the C call `getter(handle, &struct)`. Raises Error when the call
    fails, with check()'s message= and context_handle= from `check_with`."""
    value = new_struct(struct_type, init_function)
    check(getattr(_capi.lib, getter)(handle, ctypes.byref(value)), **check_with)
    return value


def record(record_type: Type[_Record], struct: Any, **given: Any) -> _Record:
    """A dataclass from a C struct: each field not `given` is the struct's member of the same
    name, C strings (char arrays) as text and the fields typed bool as bool."""
    hints = typing.get_type_hints(record_type)
    values = dict(given)
    for field in dataclasses.fields(record_type):  # type: ignore[arg-type]
        if field.name in values:
            continue
        member = getattr(struct, field.name)
        if hints[field.name] is bool:
            member = bool(member)
        elif isinstance(member, bytes):
            member = _capi.text(member)
        values[field.name] = member
    return record_type(**values)


def attribute(name: str, doc: Optional[str] = None) -> Any:
    """A read-only property that returns the attribute `name` of its object."""
    return property(operator.attrgetter(name), doc=doc)
