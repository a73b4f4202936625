"""clattn.Context: one OpenCL device with its queue and program cache, and the default context
that calls without `context=` use."""

from __future__ import annotations

import contextlib
import contextvars
import ctypes
import threading
import weakref
from dataclasses import dataclass, field
from typing import Any, Dict, Iterator, List, Optional, Tuple, Union

from . import _capi, _checks
from ._common import fetch, new_struct, record
from ._owned import _Handle
from .devices import Device, DeviceSpec, default_index, device_record, select
from .errors import Error, check, invalid


_VERDICT_NAMES = {0: "none", 1: "passed", 2: "failed", 3: "timed out"}


@dataclass(frozen=True)
class Stats:
    """What the last attention call on a context did (clattn_stats)."""

    path: str  # "fused", "gemm" or "reference"
    variant: str  # the row of the variant table that ran: "lanes", "rowwise", "flash", "nv_mma", "split", "gemm", ...
    pairs: int  # allowed (b, h, i, j) pairs of the mask (the bias not counted)
    density: float  # pairs / (B * Hq * Nq * Nk)
    tiles_visited: int  # key tiles the fused kernel walked, summed over query tiles
    tiles_total: int  # key tiles a dense walk would take
    device_bytes: int  # device memory the call allocated (peak)
    block_m: int
    block_n: int
    chunks: int  # gemm path: query chunks
    kernel_ms: float  # summed kernel time, when timing is on (Context.set_timing), else 0
    kernel: str  # the kernel and its specialisation
    # host-device traffic of the call (Context.transfers() sums every call's)
    host_to_device_bytes: int  # host arrays and tables copied to the device
    device_to_host_bytes: int  # results copied back
    mapped_bytes: int  # host memory the device used in place (devices that share host memory)
    # verified dispatch (docs/verification.md): the verdict of clattn check on the variant that
    # ran ("passed", "failed", "timed out", "none"), and why auto did not run one it prefers
    verdict: str = "none"
    fallback: str = ""


@dataclass(frozen=True)
class Transfers:
    """Bytes moved between host memory and a context's device by every clattn call on it since
    the context was opened (clattn_context_transfers): attention calls, KV cache appends and
    lengths, layers. The difference of two readings (`after - before`) is the traffic of the
    calls between them, a decoding step for instance."""

    host_to_device_bytes: int  # host memory copied to the device
    device_to_host_bytes: int  # device memory copied back to the host
    mapped_bytes: int  # host memory the device used in place instead of a copy (CPUs, iGPUs)
    copies: int  # copy commands, either way

    def __sub__(self, other: "Transfers") -> "Transfers":
        return Transfers(
            self.host_to_device_bytes - other.host_to_device_bytes,
            self.device_to_host_bytes - other.device_to_host_bytes,
            self.mapped_bytes - other.mapped_bytes,
            self.copies - other.copies,
        )


@dataclass(frozen=True)
class Variant:
    """One row of the variant table as it stands on a context's device."""

    name: str
    path: str
    summary: str
    supported: bool  # it can run on this device
    used_by_auto: bool  # path="auto" tries it on this device
    reason: str  # why not supported, or why auto passes it over; or ""
    tuning: str  # where its parameters come from
    old_name: Optional[str] = None  # the name of 0.2 still read until 0.4 ("cpu", "gpu")
    tuning_axes: Dict[str, Tuple[int, ...]] = field(default_factory=dict)  # what `clattn tune` searches


_PATH_NAMES = {0: "auto", 1: "fused", 2: "gemm", 3: "reference"}


class Context(_Handle):
    """An OpenCL device opened for attention: a context, an in-order queue and a program cache
    (compiled kernels are kept for the context's life, and on disk).

    `device` takes the CLI's device specs: an index (0 or "0"), "P:D", a type ("gpu", "cpu",
    "accelerator"; the first such device), or a case-insensitive substring of the device or
    platform name. None: $CLATTN_DEVICE when set, else the first GPU, else the first device.

    A context serialises its own calls (one at a time, from any thread). Close it with close()
    or a `with` block; it is also closed when garbage-collected.
    """

    _c_type = "clattn_context"
    _what = "context"

    def __init__(self, device: DeviceSpec = None) -> None:
        self._lock = threading.RLock()
        self._dependents: "weakref.WeakSet[Any]" = weakref.WeakSet()  # KV caches, layers made on it
        index = select(device)[0]
        handle = _capi.Context_p()
        status = _capi.lib.clattn_context_create(ctypes.byref(handle), index)
        if status != _capi.SUCCESS:
            raise Error(status, f"cannot open device {index}: {_capi.status_string(status)}")
        self._handle = handle.value
        self.device: Device = self._device_info()

    # ------------------------------------------------------------ life

    def close(self) -> None:
        """Releases the context and everything it owns (idempotent). KV caches made on it are
        closed first."""
        with self._lock:
            for dependent in list(self._dependents):
                dependent.close()
            self._destroy()

    def __repr__(self) -> str:
        return self._repr(f"{self.device.index}: {self.device.name!r}")

    def _adopt(self, dependent: Any) -> None:
        """Registers an object whose C handle uses this context (a KVCache, a MultiheadAttention):
        close() closes it first. A weak reference: the dependent keeps the context alive, not the
        reverse."""
        self._dependents.add(dependent)

    @contextlib.contextmanager
    def locked(self) -> Iterator[int]:
        """Holds the context for one call (a context serves one thread at a time)."""
        with self._lock:
            yield self.handle

    # ------------------------------------------------------------ what it knows

    def _device_info(self) -> Device:
        info = fetch(_capi.DeviceInfo, "clattn_device_info_init_sized", "clattn_context_device_info", self.handle)
        return device_record(info, default_index())

    @property
    def last_error(self) -> str:
        """The library's description of the last failing call on this context, or ""."""
        return _capi.text(_capi.lib.clattn_context_last_error(self.handle))

    @property
    def build_log(self) -> str:
        """The build log of the last kernel build that failed, or ""."""
        return _capi.text(_capi.lib.clattn_context_build_log(self.handle))

    def set_timing(self, enabled: bool) -> None:
        """Turns kernel timing on or off (Stats.kernel_ms); while on, each call waits for its
        kernels."""
        enabled = _checks.flag(enabled, "enabled")
        with self.locked() as handle:
            check(_capi.lib.clattn_context_set_timing(handle, int(enabled)), context_handle=handle)

    def last_stats(self) -> Stats:
        """@return what the last successful attention call on this context did."""
        with self.locked() as handle:
            stats = fetch(
                _capi.Stats, "clattn_stats_init_sized", "clattn_context_last_stats", handle, context_handle=handle
            )
        return record(
            Stats,
            stats,
            path=_PATH_NAMES.get(stats.path, str(stats.path)),
            variant=_capi.text(_capi.lib.clattn_variant_name(stats.variant)),
            verdict=_VERDICT_NAMES.get(stats.verdict, str(stats.verdict)),
        )

    def transfers(self) -> Transfers:
        """@return the host-device traffic of every call on this context so far."""
        with self.locked() as handle:
            totals = fetch(
                _capi.Transfers, "clattn_transfers_init_sized", "clattn_context_transfers", handle, context_handle=handle
            )
        return record(Transfers, totals)

    def variants(self) -> List[Variant]:
        """@return every row of the variant table as it stands on this device."""
        rows = []
        with self.locked() as handle:
            for number in range(1, 64):
                info = new_struct(_capi.VariantInfo, "clattn_variant_info_init_sized")
                if _capi.lib.clattn_variant_describe(handle, number, ctypes.byref(info)) != _capi.SUCCESS:
                    break
                axes = info.axes[: info.num_axes]
                rows.append(
                    record(
                        Variant,
                        info,
                        path=_PATH_NAMES.get(info.path, str(info.path)),
                        old_name=_capi.text(info.old_name) if info.old_name else None,
                        tuning_axes={_capi.text(axis.field): tuple(axis.values[: axis.count]) for axis in axes},
                    )
                )
        return rows


# ---------------------------------------------------------------- the default context

_default_lock = threading.Lock()
_default_context: Optional[Context] = None
_current: contextvars.ContextVar[Optional[Context]] = contextvars.ContextVar(
    "clattn_current_context", default=None
)


def default_context() -> Context:
    """@return the context that calls without `context=` use: the one a `with clattn.using(...)`
    block set, else a process-wide context on the default device ($CLATTN_DEVICE, else the first
    GPU, else the first device), opened on first use, and again after it was closed (`with
    clattn.default_context():` closes it at the block's end)."""
    current = _current.get()
    if current is not None:
        return current
    global _default_context
    with _default_lock:
        if _default_context is None or not _default_context._handle:
            _default_context = Context()
        return _default_context


def resolve_context(context: Any) -> Context:
    """A `context=` argument as the Context to run on: itself, or for None the default."""
    if context is None:
        return default_context()
    if not isinstance(context, Context):
        hint = (
            f" (clattn.Context({context!r}) opens a device by its spec)"
            if isinstance(context, (int, str))
            else ""
        )
        raise invalid(f"context={context!r}: a clattn.Context is needed, or None for the default{hint}")
    return context


@contextlib.contextmanager
def using(context: Union[Context, DeviceSpec]) -> Iterator[Context]:
    """Makes `context` (a Context, or a device spec to open one for the block) the default for
    calls without `context=` inside the block, in this thread or task:

        with clattn.using("1"):
            out = clattn.scaled_dot_product_attention(q, k, v)
    """
    if isinstance(context, Context):
        chosen, owned = context, False
    else:
        chosen, owned = Context(context), True
    token = _current.set(chosen)
    try:
        yield chosen
    finally:
        _current.reset(token)
        if owned:
            chosen.close()


class _OwnedHandle(_Handle):
    """A C object made on a Context (a KV cache, a layer). It keeps the context alive, and the
    context closes it first when closed itself. Its calls hold the context's lock: _locked().

    A subclass sets _context, creates the C object holding the context (its locked()), and
    hands the new handle to _own() before letting go of it.
    """

    _context: Context

    def _own(self, handle: int) -> None:
        """Takes the handle of the C object just created on the context and registers with the
        context, whose close() then closes this first. Call it holding the context."""
        self._handle = handle
        self._context._adopt(self)

    def close(self) -> None:
        """Releases the C object (idempotent), holding the context."""
        context = getattr(self, "_context", None)
        with context._lock if context is not None else contextlib.nullcontext():
            self._destroy()

    @contextlib.contextmanager
    def _locked(self) -> Iterator[Tuple[int, int]]:
        """(context handle, own handle) for one call, holding the context. Raises Error when
        closed."""
        with self._context.locked() as ctx:
            yield ctx, self.handle

    @property
    def context(self) -> Context:
        """The Context it was made on, whose device holds it."""
        return self._context
