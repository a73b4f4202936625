"""Host arrays as the C API sees them: a pointer, a shape, strides in elements and a storage type.

Zero-copy rules. An input is read where it lies, with no copy, when
  - it is a NumPy array (or anything NumPy takes without copying: the buffer protocol,
    __array_interface__, DLPack) or a CPU torch tensor (read through its data pointer and
    strides, so torch.bfloat16 works too);
  - its storage type is float32, float16 or bfloat16 (NumPy has no bfloat16: a uint16 array of
    bit patterns with storage="bf16", or an ml_dtypes bfloat16 array);
  - its last dimension has stride 1 and every other stride is >= 0 (any permutation of the
    dimensions, slices, and broadcasting with stride 0 are fine).
Other strides (a negative stride, a strided last dimension) cannot be described to the library;
`attention` refuses them, `scaled_dot_product_attention` copies, as PyTorch does.

torch is never imported here: a program that passes tensors has imported it, and every torch
call below runs only once is_torch_tensor has seen a tensor.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any, Mapping, Optional, Sequence, Tuple

import numpy as np

from . import _capi
from .errors import Error, invalid

DTYPE_NAMES = {_capi.DTYPE_F32: "float32", _capi.DTYPE_F16: "float16", _capi.DTYPE_BF16: "bfloat16"}
# the names a storage type goes by (the dtype= of a KV cache also takes q8_0)
STORAGE_TYPES = {
    "f32": _capi.DTYPE_F32,
    "float32": _capi.DTYPE_F32,
    "f16": _capi.DTYPE_F16,
    "float16": _capi.DTYPE_F16,
    "half": _capi.DTYPE_F16,
    "bf16": _capi.DTYPE_BF16,
    "bfloat16": _capi.DTYPE_BF16,
}


def torch_module() -> Any:
    """The torch module. Call it only once is_torch_tensor has seen a tensor: clattn never
    imports torch, and without a tensor it may not be there."""
    return sys.modules["torch"]


def is_torch_tensor(x: Any) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor)


def parse_dtype(value: Any, name: str, names: Mapping[str, int], hint: str) -> int:
    """A dtype argument as a clattn dtype: one of `names` ("float16", "f16", ...), or a NumPy or
    torch dtype of that name. `hint` lists what is taken, for the message."""
    if isinstance(value, str):
        key = value.lower()
    elif str(value).startswith("torch."):
        key = str(value)[len("torch.") :]
    else:
        try:
            key = np.dtype(value).name
        except (TypeError, ValueError):
            key = ""
    if key not in names:
        raise invalid(f"{name}={value!r}: {hint}")
    return names[key]


def parse_storage(storage: Any) -> Optional[int]:
    """storage= as a clattn dtype: "f32"/"f16"/"bf16" (or the long names, a NumPy or torch
    dtype), None for the inputs' own."""
    if storage is None:
        return None
    return parse_dtype(
        storage, "storage", STORAGE_TYPES, "use 'f32', 'f16' or 'bf16' (or None for the inputs' own)"
    )


@dataclass
class HostTensor:
    """One array as the C API reads it. `owner` keeps the memory alive while it is used."""

    pointer: int
    shape: Tuple[int, ...]
    strides: Tuple[int, ...]  # elements; 0 for broadcast dimensions and for size-1 ones
    dtype: int  # clattn dtype
    owner: Any
    kind: str  # "numpy" or "torch": what outputs are made of
    numpy_dtype: Optional[np.dtype] = None  # the NumPy dtype outputs take (numpy kind)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def describable(self) -> bool:
        """Whether the library can read it in place: last stride 1, the others >= 0."""
        if 0 in self.shape:
            return True  # nothing to read: the size check names the problem
        if any(s < 0 for s in self.strides):
            return False
        return self.ndim == 0 or self.shape[-1] == 1 or self.strides[-1] == 1


def _normalised_strides(shape: Sequence[int], strides: Sequence[int]) -> Tuple[int, ...]:
    """A size-1 dimension's stride is meaningless (NumPy and torch may give any): make it 0."""
    return tuple(0 if n == 1 else s for n, s in zip(shape, strides))


def _torch_dtype(tensor: Any, name: str, bits_are_bf16: bool) -> int:
    torch = torch_module()
    table = {torch.float32: _capi.DTYPE_F32, torch.float16: _capi.DTYPE_F16, torch.bfloat16: _capi.DTYPE_BF16}
    if tensor.dtype in table:
        return table[tensor.dtype]
    if tensor.dtype in (torch.uint16, torch.int16) and bits_are_bf16:
        return _capi.DTYPE_BF16
    raise invalid(f"{name}: dtype {tensor.dtype} is not a storage type (float32, float16 or bfloat16)")


def _check_torch_memory(tensor: Any, name: str) -> None:
    """A tensor clattn can read: dense values in host memory (not CUDA, not meta, not sparse;
    not a lazily negated view, whose memory holds the values unnegated)."""
    torch = torch_module()
    if tensor.device.type != "cpu":
        raise invalid(
            f"{name} is on {tensor.device}: clattn reads host memory; move it with .cpu() "
            "(clattn runs on OpenCL devices, not through torch's devices)"
        )
    if tensor.layout != torch.strided:
        raise invalid(f"{name} is a {tensor.layout} tensor: clattn reads dense ones (.to_dense())")
    if tensor.is_neg() or tensor.is_conj():
        lazy = "negated" if tensor.is_neg() else "conjugated"
        fix = ".resolve_neg()" if tensor.is_neg() else ".resolve_conj()"
        raise invalid(f"{name} is a lazily {lazy} view: call {fix} first")


def host_values(tensor: Any, name: str) -> Any:
    """A torch tensor's values, detached, for the small inputs clattn copies anyway (masks,
    biases, slopes, sinks, layouts, index lists): what host_tensor refuses is refused here too."""
    _check_torch_memory(tensor, name)
    return tensor.detach()


def _from_torch(tensor: Any, name: str, bits_are_bf16: bool) -> HostTensor:
    _check_torch_memory(tensor, name)
    torch = torch_module()
    if tensor.requires_grad and torch.is_grad_enabled():
        raise invalid(
            f"{name} requires grad: clattn computes no gradients; call it under torch.no_grad() "
            "or torch.inference_mode(), or pass detached tensors"
        )
    dtype = _torch_dtype(tensor, name, bits_are_bf16)
    shape = tuple(tensor.shape)
    return HostTensor(
        pointer=tensor.data_ptr(),
        shape=shape,
        strides=_normalised_strides(shape, tensor.stride()),
        dtype=dtype,
        owner=tensor,
        kind="torch",
    )


def _numpy_dtype(array: np.ndarray, name: str, bits_are_bf16: bool) -> int:
    if array.dtype == np.float32:
        return _capi.DTYPE_F32
    if array.dtype == np.float16:
        return _capi.DTYPE_F16
    if array.dtype.name == "bfloat16" and array.dtype.itemsize == 2:  # ml_dtypes.bfloat16
        return _capi.DTYPE_BF16
    if array.dtype in (np.uint16, np.int16) and bits_are_bf16:
        return _capi.DTYPE_BF16
    hint = " (a uint16 array of bfloat16 bits needs storage='bf16')" if array.dtype == np.uint16 else ""
    raise invalid(
        f"{name}: dtype {array.dtype} is not a storage type: use float32 or float16, or "
        f"bfloat16 bit patterns as uint16 with storage='bf16'{hint}"
    )


def as_numpy(x: Any, name: str) -> np.ndarray:
    """x as a NumPy array without copying when NumPy can (buffer protocol, DLPack)."""
    if isinstance(x, np.ndarray):
        return x
    if hasattr(x, "__dlpack__") and hasattr(np, "from_dlpack"):
        try:
            return np.from_dlpack(x)
        except (TypeError, RuntimeError, BufferError):
            pass
    try:
        return np.asarray(x)
    except Exception as error:  # noqa: BLE001 - anything NumPy cannot take is not an array
        raise invalid(f"{name}: a {type(x).__name__} is not an array ({error})") from None


def host_tensor(x: Any, name: str, bits_are_bf16: bool = False) -> HostTensor:
    """`x` (a NumPy array, a CPU torch tensor, or anything NumPy reads without copying) as the
    library will read it. Raises Error for a type or dtype clattn cannot store."""
    if is_torch_tensor(x):
        return _from_torch(x, name, bits_are_bf16)
    array = as_numpy(x, name)
    dtype = _numpy_dtype(array, name, bits_are_bf16)
    itemsize = array.dtype.itemsize
    if any(s % itemsize for s in array.strides):
        raise invalid(f"{name}: strides {array.strides} are not whole elements of {itemsize} bytes")
    return HostTensor(
        pointer=array.__array_interface__["data"][0],
        shape=tuple(array.shape),
        strides=_normalised_strides(array.shape, tuple(s // itemsize for s in array.strides)),
        dtype=dtype,
        owner=array,
        kind="numpy",
        numpy_dtype=array.dtype,
    )


def contiguous_copy(tensor: HostTensor, name: str) -> HostTensor:
    """A C-contiguous copy of `tensor`, of the same kind and dtype."""
    owner = tensor.owner
    if tensor.kind == "torch":
        torch = torch_module()
        copy = owner.detach().clone(memory_format=torch.contiguous_format)
        return _from_torch(copy, name, tensor.dtype == _capi.DTYPE_BF16)
    return host_tensor(np.array(owner, order="C", copy=True), name, tensor.dtype == _capi.DTYPE_BF16)


def convert(tensor: HostTensor, to_dtype: int, name: str) -> HostTensor:
    """A C-contiguous copy of `tensor` in storage type `to_dtype`, rounded to nearest even by the
    library's clattn_convert."""
    source = tensor if tensor.describable() and _is_dense(tensor) else contiguous_copy(tensor, name)
    count = int(np.prod(source.shape, dtype=np.int64))
    target = empty(source.shape, to_dtype, like=source)
    status = _capi.lib.clattn_convert(source.dtype, source.pointer, to_dtype, target.pointer, count)
    if status != _capi.SUCCESS:
        raise Error(status, f"converting {name} from {DTYPE_NAMES[source.dtype]} to {DTYPE_NAMES[to_dtype]}")
    return target


def dense(tensor: HostTensor, dtype: int, name: str) -> HostTensor:
    """`tensor` as a C-contiguous array of storage type `dtype`: itself when it is one, else a
    copy (converted by the library when the type differs)."""
    if tensor.dtype != dtype:
        return convert(tensor, dtype, name)
    if not (tensor.describable() and _is_dense(tensor)):
        return contiguous_copy(tensor, name)
    return tensor


def _is_dense(tensor: HostTensor) -> bool:
    """Whether it is C-contiguous (size-1 dimensions aside)."""
    expected = 1
    for n, s in zip(reversed(tensor.shape), reversed(tensor.strides)):
        if n != 1 and s != expected:
            return False
        expected *= n
    return True


def empty(shape: Sequence[int], dtype: int, like: HostTensor) -> HostTensor:
    """A new C-contiguous array of `shape` in storage type `dtype`, of the kind of `like`
    (a torch tensor for torch inputs; for NumPy, bfloat16 is ml_dtypes' when `like` was, else
    uint16 bit patterns)."""
    shape = tuple(int(n) for n in shape)
    if like.kind == "torch":
        torch = torch_module()
        torch_dtype = {
            _capi.DTYPE_F32: torch.float32,
            _capi.DTYPE_F16: torch.float16,
            _capi.DTYPE_BF16: torch.bfloat16,
        }[dtype]
        return _from_torch(torch.empty(shape, dtype=torch_dtype), "output", False)
    if dtype == _capi.DTYPE_BF16:
        numpy_dtype = (
            like.numpy_dtype
            if like.numpy_dtype is not None and like.numpy_dtype.name == "bfloat16"
            else np.dtype(np.uint16)
        )
    else:
        numpy_dtype = np.dtype(np.float32 if dtype == _capi.DTYPE_F32 else np.float16)
    return host_tensor(np.empty(shape, dtype=numpy_dtype), "output", True)
