"""The checks every public function applies to its plain arguments before anything reaches C,
as the CLI checks its options. Each problem raises clattn.Error (CLATTN_ERR_INVALID_ARGUMENT)
naming the argument:

- An integer is a Python int or a NumPy integer. A float is refused, 2.7 (never truncated) as
  much as 2.0 (as range() refuses it), and so are a bool and every other type, and a value
  outside the range of the C field it goes to: ctypes would wrap 2**64 to 0 in silence. Arrays
  of integers (block tables, lengths, global tokens) follow the same rules: an integer dtype,
  or a list of ints.
- A real number is an int or a float (NumPy's too), finite. A scale must also stay finite and
  non-zero in float32, the desc's type, where 0 means the default.
- A flag is a bool (or the integer 0 or 1); a choice is one of the names it lists.
"""

from __future__ import annotations

import ctypes
import math
import numbers
from typing import Any, Mapping, Optional, Tuple, TypeVar

import numpy as np

from .errors import invalid

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
UINT64_MAX = 2**64 - 1
SIZE_MAX = 2 ** (8 * ctypes.sizeof(ctypes.c_size_t)) - 1  # size_t: sizes, counts, indices
_FLOAT32_MAX = float(np.finfo(np.float32).max)

_Choice = TypeVar("_Choice")


def _bound(n: int) -> str:
    """A range bound as people write the C limits: 2^63-1 rather than its 19 digits."""
    named = {INT32_MIN: "-2^31", INT32_MAX: "2^31-1", INT64_MIN: "-2^63", INT64_MAX: "2^63-1"}
    named[UINT64_MAX] = "2^64-1"
    return named.get(n, str(n))


def _range_text(minimum: int, maximum: int) -> str:
    return f"must be an integer in [{_bound(minimum)}, {_bound(maximum)}]"


def _integral(value: Any, name: str) -> int:
    """value as a Python int, if it is one (see the module's rules), else Error."""
    if isinstance(value, (bool, np.bool_)):
        raise invalid(f"{name}={value!r}: an integer is needed, not a bool")
    if isinstance(value, numbers.Integral):
        return int(value)
    raise invalid(f"{name}={value!r}: an integer is needed, not a {type(value).__name__}")


def integer(value: Any, name: str, minimum: int = INT64_MIN, maximum: int = INT64_MAX) -> int:
    """An integer argument in [minimum, maximum] (default: int64's range), as a Python int."""
    number = _integral(value, name)
    if not minimum <= number <= maximum:
        raise invalid(f"{name}={value!r}: {_range_text(minimum, maximum)}")
    return number


def size(value: Any, name: str, minimum: int = 1) -> int:
    """A size_t argument: an integer in [minimum, SIZE_MAX]."""
    return integer(value, name, minimum, SIZE_MAX)


def _as_array(values: Any, name: str) -> np.ndarray:
    """values as a NumPy array: a torch tensor through the host, a list as it is (object
    dtype for ints beyond int64, checked one by one)."""
    from ._tensors import host_values, is_torch_tensor  # _tensors imports this module

    if is_torch_tensor(values):
        return host_values(values, name).numpy()
    if isinstance(values, (str, bytes)):
        raise invalid(f"{name}={values!r}: integers are needed, not a {type(values).__name__}")
    try:
        return np.asarray(values)
    except (TypeError, ValueError, OverflowError) as error:
        raise invalid(f"{name}: integers are needed ({error})") from None


def integers(values: Any, name: str, minimum: int = INT64_MIN, maximum: int = INT64_MAX) -> np.ndarray:
    """An array (or a scalar) of integers, each in [minimum, maximum], as a C-contiguous int64
    array (uint64 where maximum passes int64) of the same shape."""
    array = _as_array(values, name)
    if array.dtype.kind == "O":
        flat = [_integral(v, f"{name}[{i}]") for i, v in enumerate(array.reshape(-1))]
        array = np.array(flat, dtype=object).reshape(array.shape)
    elif array.dtype.kind not in "iu":
        raise invalid(f"{name}: integers are needed, not dtype {array.dtype}")
    if array.size:
        low, high = int(array.min()), int(array.max())
        if low < minimum or high > maximum:
            shown = low if low < minimum else high
            raise invalid(f"{name}: {shown} is out of range: each value {_range_text(minimum, maximum)}")
    dtype = np.uint64 if maximum > INT64_MAX else np.int64
    return np.array(array, dtype=dtype, order="C")  # (ascontiguousarray would make a 0-d array 1-d)


def block_size(value: Any, name: str = "block_size") -> Tuple[int, int]:
    """A block size (BQ, BK): one size for both, or a pair; each >= 1."""
    if isinstance(value, (numbers.Real, str, bytes)):
        both = size(value, name)
        return both, both
    bq, bk = pair(value, name)
    return size(bq, f"{name}[0]"), size(bk, f"{name}[1]")


def int32_array(values: Any, name: str, shape: Tuple[int, ...], what: str, allow_scalar: bool) -> np.ndarray:
    """Integers as a C-contiguous int32 array of `shape`, `what` saying what they are (one int
    broadcasts when allow_scalar). Each must fit in int32; what it means is the library's to
    check."""
    array = integers(values, name, INT32_MIN, INT32_MAX)
    if array.ndim == 0 and allow_scalar:
        array = np.broadcast_to(array, shape)
    if array.shape != shape:
        raise invalid(f"{name} has shape {array.shape}; it must be {list(shape)}: {what}")
    return np.ascontiguousarray(array, dtype=np.int32)


def real(value: Any, name: str) -> float:
    """A finite real number (an int or a float, NumPy's too; not a bool)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise invalid(f"{name}={value!r}: a number is needed, not a {type(value).__name__}")
    number = float(value)
    if not math.isfinite(number):
        raise invalid(f"{name}={value!r}: must be finite")
    return number


def scale(value: Any, name: str = "scale", zero_allowed: bool = False) -> Optional[float]:
    """A softmax scale: None (the default 1/sqrt(Dqk)), or a finite number whose float32 is
    finite and non-zero; or 0 itself where zero_allowed (PyTorch's SDPA: uniform weights). In
    the desc 0 means the default, so a value that rounds to 0 is never passed on."""
    if value is None:
        return None
    number = real(value, name)
    if number == 0:
        if zero_allowed:
            return 0.0
        raise invalid(f"{name}=0: must be non-zero (None selects the default 1/sqrt(Dqk))")
    if abs(number) > _FLOAT32_MAX:
        raise invalid(f"{name}={value!r}: beyond float32's range (up to 3.4e38)")
    if float(np.float32(number)) == 0.0:
        raise invalid(
            f"{name}={value!r} rounds to 0 in float32 (the smallest positive float32 is 1.4e-45); "
            "None selects the default 1/sqrt(Dqk)"
        )
    return number


def flag(value: Any, name: str) -> bool:
    """A bool argument: True, False, NumPy's bools, or the integers 0 and 1."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, numbers.Integral) and int(value) in (0, 1):
        return bool(value)
    raise invalid(f"{name}={value!r}: True or False")


def choice(value: Any, name: str, options: Mapping[str, _Choice]) -> _Choice:
    """One of the names of `options` (a str), as its value."""
    if isinstance(value, str) and value in options:
        return options[value]
    raise invalid(f"{name}={value!r}: one of {', '.join(map(repr, options))}")


def pair(value: Any, name: str) -> Tuple[Any, Any]:
    """Two values, from a tuple, a list or any other pair (not a str)."""
    if isinstance(value, (str, bytes)):
        raise invalid(f"{name}={value!r}: a pair is needed, not a {type(value).__name__}")
    try:
        first, second = value
    except (TypeError, ValueError):
        raise invalid(f"{name}={value!r}: a pair is needed") from None
    return first, second
