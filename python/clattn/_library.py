"""Finding and loading libclattn.

The package looks, in this order, for
  1. its own copy, installed inside the package by the wheel (clattn/libclattn.so.0.2, under
     its soname, which the packaged program clattn/bin/clattn links);
  2. the file named by $CLATTN_LIBRARY (a development build: build/libclattn.so);
  3. the system's, by its soname (libclattn.so.0.2, then whatever ctypes.util finds).
The first that loads and reports the version this binding was written for wins. The library
needs the OpenCL ICD loader (libOpenCL.so.1) and CLBlast (libclblast.so.1): the manylinux wheel
carries both (clattn.libs/, beside the package); a wheel built by `pip install ./python` takes
the system's.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys
from pathlib import Path
from typing import Iterator, List, Tuple

# The C API this binding mirrors (include/clattn.h). While the major version is 0, a minor
# version may change the ABI, so both must match.
ABI_VERSION = (0, 2)

if sys.platform == "darwin":
    _PACKAGED_NAME, _SONAME = "libclattn.dylib", "libclattn.0.2.dylib"
elif sys.platform == "win32":
    _PACKAGED_NAME, _SONAME = "clattn.dll", "clattn.dll"
else:
    _PACKAGED_NAME = _SONAME = "libclattn.so.0.2"


def _candidates() -> Iterator[Tuple[str, str]]:
    """Yields (where it came from, path or name to dlopen), in the order of preference."""
    yield "the package", str(Path(__file__).resolve().parent / _PACKAGED_NAME)
    from_environment = os.environ.get("CLATTN_LIBRARY")
    if from_environment:
        yield "$CLATTN_LIBRARY", from_environment
    yield "the system", _SONAME
    found = ctypes.util.find_library("clattn")
    if found and found != _SONAME:
        yield "the system", found


def _library_version(lib: ctypes.CDLL) -> Tuple[int, ...]:
    """The library's version. Raises ValueError for a library that is not clattn's."""
    try:
        lib.clattn_version.restype = ctypes.c_char_p
        lib.clattn_version.argtypes = []
        text = lib.clattn_version().decode()
        return tuple(int(part) for part in text.split("."))
    except (AttributeError, UnicodeDecodeError, ValueError) as error:
        raise ValueError(f"not libclattn (no clattn_version giving a version: {error})") from None


def load() -> Tuple[ctypes.CDLL, str]:
    """Loads the first suitable libclattn. @return (the library, the path it was loaded from).
    Raises ImportError listing every place tried and why each failed."""
    tried: List[str] = []
    for origin, name in _candidates():
        if os.sep in name and not os.path.exists(name):
            tried.append(f"{origin}: {name} does not exist")
            continue
        try:
            lib = ctypes.CDLL(name)
        except OSError as error:
            tried.append(f"{origin}: {name}: {error}")
            continue
        try:
            version = _library_version(lib)
        except ValueError as error:
            tried.append(f"{origin}: {name}: {error}")
            continue
        if version[:2] != ABI_VERSION:
            tried.append(
                f"{origin}: {name} is clattn {'.'.join(map(str, version))}, "
                f"this binding needs {ABI_VERSION[0]}.{ABI_VERSION[1]}"
            )
            continue
        return lib, _loaded_path(lib, name)
    raise ImportError(
        "clattn: no usable libclattn found; tried\n  "
        + "\n  ".join(tried)
        + "\nInstall the wheel (pip install ./python), or point CLATTN_LIBRARY at a build "
        "(build/libclattn.so). The library needs the OpenCL ICD loader and CLBlast "
        "(Debian: apt-get install ocl-icd-libopencl1 libclblast1)."
    )


def _loaded_path(lib: ctypes.CDLL, name: str) -> str:
    """The file the dynamic loader really opened (a soname resolves to a path)."""
    if os.sep in name:
        return str(Path(name).resolve())
    return next(iter(loaded_files(name)), name)


def loaded_files(prefix: str) -> List[str]:
    """The files mapped into this process whose name starts with `prefix` ("libOpenCL"), in
    the order of /proc/self/maps; [] where there is no such file (not Linux)."""
    found: List[str] = []
    try:
        with open("/proc/self/maps", encoding="utf-8") as maps:
            for line in maps:
                fields = line.split(None, 5)
                path = fields[5].strip() if len(fields) == 6 else ""
                if path.startswith("/") and os.path.basename(path).startswith(prefix) and path not in found:
                    found.append(path)
    except OSError:
        pass
    return found
