"""Where the package finds libclattn: its own copy, else $CLATTN_LIBRARY, else the system's; and
an ImportError that lists every place tried when there is none. Each case imports a copy of the
package's Python files (without its library) in a fresh interpreter."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import clattn


def import_copy(tmp_path: Path, **environment: str) -> subprocess.CompletedProcess:
    package = tmp_path / "clattn"
    if not package.exists():
        shutil.copytree(
            Path(clattn.__file__).parent, package, ignore=shutil.ignore_patterns("*.so*", "__pycache__")
        )
    env = {
        k: v for k, v in os.environ.items() if k not in ("CLATTN_LIBRARY", "LD_LIBRARY_PATH", "PYTHONPATH")
    }
    env.update(environment, PYTHONPATH=str(tmp_path))
    code = "import clattn; print(clattn.__file__); print(clattn.library_path)"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path)


def test_clattn_library_names_the_file(tmp_path: Path) -> None:
    done = import_copy(tmp_path, CLATTN_LIBRARY=clattn.library_path)
    assert done.returncode == 0, done.stderr
    module_file, library = done.stdout.split()
    assert module_file.startswith(str(tmp_path))
    assert os.path.realpath(library) == os.path.realpath(clattn.library_path)


def test_no_library_is_an_import_error_listing_what_was_tried(tmp_path: Path) -> None:
    done = import_copy(tmp_path, CLATTN_LIBRARY=str(tmp_path / "missing.so"))
    if done.returncode == 0:  # an installed libclattn.so.0.2 on the system: the last resort works
        assert "libclattn.so.0.2" in done.stdout
        return
    assert "ImportError: clattn: no usable libclattn found; tried" in done.stderr
    for place in ("the package:", "$CLATTN_LIBRARY:", "missing.so does not exist", "the system:"):
        assert place in done.stderr


def test_a_library_that_is_not_clattns_is_skipped_with_a_reason(tmp_path: Path) -> None:
    """A file that loads but has no clattn_version (here Python's own libc) is one more place
    tried, not an AttributeError."""
    import ctypes.util

    libc = ctypes.util.find_library("c") or "libc.so.6"
    done = import_copy(tmp_path, CLATTN_LIBRARY=libc)
    if done.returncode == 0:  # an installed libclattn.so.0.2 on the system: the last resort works
        return
    assert "ImportError: clattn: no usable libclattn found; tried" in done.stderr, done.stderr
    assert "not libclattn" in done.stderr and "AttributeError" not in done.stderr
