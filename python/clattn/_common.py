"""What the package's objects share over the C API: structs made by their *_init_sized function
and filled by a getter, with the status checked; a C struct read into the frozen dataclass the
package returns (Device, Stats, LayerInfo, ...); read-only attributes; and sets of keyword
arguments that several public functions take, declared once as a dataclass."""

from __future__ import annotations

import ctypes
import dataclasses
import functools
import inspect
import operator
import typing
from typing import Any, Callable, Mapping, Optional, Type, TypeVar

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


def named_attribute(name: str, names: Mapping[int, str], doc: str) -> Any:
    """A read-only property that returns the name in `names` of the code in attribute `name`."""
    return property(lambda self: names[getattr(self, name)], doc=doc)


def keyword_groups(**groups: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """A decorator for a function that takes sets of keyword arguments other functions take
    too, each set a dataclass whose fields all have defaults. `groups` maps a parameter of the
    function to its dataclass: callers pass the dataclass's fields as keyword arguments in the
    parameter's place, help() and inspect.signature() show them there (keyword-only, with the
    fields' annotations and defaults), and the function receives the dataclass made of those
    given. Every other argument reaches the function as it is, so Python's own TypeError names
    a keyword no one takes, or a missing or extra positional argument."""

    def decorate(function: Callable[..., Any]) -> Callable[..., Any]:
        fields = {group: dataclasses.fields(kind) for group, kind in groups.items()}
        signature = inspect.signature(function)
        positional = sum(p.kind == p.POSITIONAL_OR_KEYWORD for p in signature.parameters.values())
        shared = {f.name for group_fields in fields.values() for f in group_fields}

        @functools.wraps(function)
        def call(*args: Any, **keywords: Any) -> Any:
            if len(args) > positional:  # Python's message, without counting the sets as given
                return function(*args, **{k: v for k, v in keywords.items() if k not in shared})
            for group, kind in groups.items():
                if group in keywords:  # the set's own name is no keyword of the call
                    raise TypeError(f"{function.__qualname__}() got an unexpected keyword argument {group!r}")
                given = {f.name: keywords.pop(f.name) for f in fields[group] if f.name in keywords}
                keywords[group] = kind(**given)
            return function(*args, **keywords)

        parameters = []
        for parameter in signature.parameters.values():
            if parameter.name not in groups:
                parameters.append(parameter)
                continue
            parameters += [
                inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=f.default, annotation=f.type)
                for f in fields[parameter.name]
            ]
        call.__signature__ = signature.replace(parameters=parameters)  # type: ignore[attr-defined]
        return call

    return decorate
