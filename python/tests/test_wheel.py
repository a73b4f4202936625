"""The wheel installs into a fresh virtual environment and works from outside the source tree,
with its own copy of the library and its own `clattn` program (`python -m clattn`).

The manylinux wheel (scripts/test-python.sh makes it with auditwheel) must also work on a
machine without CLBlast or an ICD loader, as a pip user's GPU machine with only a vendor's
driver: the test runs it in a private mount namespace where the system's copies of both are
empty files, with an empty ICD vendors folder, so that the OpenCL driver comes from the driver
search, and checks that every library it loaded is the wheel's.

$CLATTN_WHEEL names a built wheel; without it the test builds a plain one from the source tree
with pip (which takes CLBlast and the loader from the system: the hidden-library test then
skips)."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Dict, List

import pytest
from conftest import REPOSITORY

# Run by the fresh environment's Python; argv[1] says whether the system's libraries are hidden.
SCRIPT = textwrap.dedent("""
    import ctypes, os, subprocess, sys
    import numpy as np
    import clattn
    from clattn._library import loaded_files
    prefix = os.path.realpath(sys.prefix)
    assert os.path.realpath(clattn.__file__).startswith(prefix), clattn.__file__
    assert os.path.realpath(clattn.library_path).startswith(prefix), clattn.library_path
    found = clattn.devices()
    assert found, "no OpenCL device"
    q = np.random.default_rng(0).uniform(-1, 1, (1, 2, 5, 8)).astype(np.float32)
    o = clattn.attention(q, q, q)
    s = np.einsum("bhid,bhjd->bhij", q.astype(np.float64), q) / np.sqrt(8)
    p = np.exp(s - s.max(-1, keepdims=True)); p /= p.sum(-1, keepdims=True)
    assert np.abs(o - p @ q).max() < 1e-4
    w = np.eye(8, dtype=np.float32)  # a layer over a KV cache: the package's own OpenCL calls
    with clattn.MultiheadAttention(w, w, w, w, heads=2) as layer, layer.new_cache(2, 8) as cache:
        assert np.abs(layer(q[0], causal=True, kv_cache=cache) - layer(q[0], causal=True)).max() < 1e-5
    if sys.argv[1] == "hidden":
        for name in ("libclblast.so.1", "libOpenCL.so.1"):  # the system's copies cannot load
            try:
                ctypes.CDLL(name)
                raise AssertionError(f"the system's {name} loads: it is not hidden")
            except OSError:
                pass
        for prefix_of_name in ("libclblast", "libOpenCL"):  # what is loaded is the wheel's
            paths = loaded_files(prefix_of_name)
            assert paths and all(os.path.realpath(p).startswith(prefix) for p in paths), paths
    print("clattn", clattn.__version__, "from", clattn.library_path, "on", found[0].name)
    """)


def run(command: List[str], **kwargs) -> str:
    done = subprocess.run(command, capture_output=True, text=True, **kwargs)
    assert done.returncode == 0, f"{' '.join(map(str, command))} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def built_wheel(tmp_path: Path) -> Path:
    given = os.environ.get("CLATTN_WHEEL")
    if given:
        return Path(given)
    if not (REPOSITORY / "python" / "pyproject.toml").is_file():
        pytest.skip("no $CLATTN_WHEEL and no source tree to build a wheel from")
    dist = tmp_path / "dist"
    run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", str(dist), str(REPOSITORY / "python")])
    return next(dist.glob("clattn-*.whl"))


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Dict[str, Path]:
    """A fresh virtual environment with the wheel (and NumPy, its one dependency) installed,
    and an empty folder outside the source tree to run in."""
    root = tmp_path_factory.mktemp("wheel")
    wheel = built_wheel(root)
    venv = root / "venv"
    run([sys.executable, "-m", "venv", str(venv)])
    python = venv / "bin" / "python"
    run([str(python), "-m", "pip", "install", "--quiet", str(wheel)])
    outside = root / "elsewhere"
    outside.mkdir()
    return {"wheel": wheel, "python": python, "outside": outside, "venv": venv}


def bare_environment(**extra: str) -> Dict[str, str]:
    """The caller's environment without what would point the package elsewhere."""
    dropped = ("PYTHONPATH", "CLATTN_LIBRARY", "LD_LIBRARY_PATH", "LD_PRELOAD", "CLATTN_NO_DRIVER_SEARCH")
    environment = {k: v for k, v in os.environ.items() if k not in dropped}
    environment.update(extra)
    return environment


def test_wheel_in_a_fresh_virtual_environment(installed) -> None:
    python, outside = str(installed["python"]), installed["outside"]
    environment = bare_environment()
    printed = run([python, "-c", SCRIPT, "system"], cwd=outside, env=environment)
    assert printed.startswith("clattn 0.2")
    # the package's own library comes first, before $CLATTN_LIBRARY
    environment["CLATTN_LIBRARY"] = str(outside / "no-such-library.so")
    run([python, "-c", SCRIPT, "system"], cwd=outside, env=environment)


def assert_checked_where_run(checked: str) -> None:
    """Every variant the CPU device runs passed; the one it cannot run is nv_mma (tensor cores)."""
    assert "passed where run: 0 failing runs, not run: 1 (required: 0)" in checked, checked
    assert re.search(r"nv_mma +not run: tensor cores through NVIDIA's OpenCL only", checked), checked


def test_python_m_clattn_runs_the_packaged_program(installed) -> None:
    """`python -m clattn` is the C program the wheel carries: devices, check and bench."""
    python, outside = str(installed["python"]), installed["outside"]
    environment = bare_environment()
    assert run([python, "-m", "clattn", "--version"], cwd=outside, env=environment).startswith("clattn 0.2")
    listing = run([python, "-m", "clattn", "devices"], cwd=outside, env=environment)
    assert "(default)" in listing
    checked = run([python, "-m", "clattn", "check", "--quick", "--device", "0"], cwd=outside, env=environment)
    assert_checked_where_run(checked)
    csv = outside / "bench.csv"
    bench = ["bench", "--path", "fused", "--b", "1", "--hq", "2", "--nq", "64", "--d", "32"]
    bench += ["--warmup", "1", "--repeat", "2", "--device", "0", "--csv", str(csv)]
    run([python, "-m", "clattn", *bench], cwd=outside, env=environment)
    assert ",fused," in csv.read_text()
    done = subprocess.run(
        [python, "-m", "clattn"], capture_output=True, text=True, cwd=outside, env=environment
    )
    assert done.returncode != 0 and "usage: clattn COMMAND" in done.stderr


def system_copies(*sonames: str) -> List[str]:
    """The files the dynamic linker's cache gives for each soname (ldconfig -p), resolved."""
    listing = subprocess.run(["/sbin/ldconfig", "-p"], capture_output=True, text=True).stdout
    found: List[str] = []
    for line in listing.splitlines():
        name, _, path = line.strip().partition(" => ")
        if name.split(" ")[0] in sonames:
            real = os.path.realpath(path)
            if real not in found:
                found.append(real)
    return found


def hidden(command: List[str], paths: List[str]) -> List[str]:
    """`command` run in a private mount namespace where each of `paths` is an empty file."""
    mounts = "".join(f"mount --bind /dev/null {shlex.quote(p)} && " for p in paths)
    return [
        "unshare",
        "--mount",
        "--propagation",
        "private",
        "sh",
        "-c",
        mounts + 'exec "$@"',
        "sh",
        *command,
    ]


def test_manylinux_wheel_without_the_system_libraries(installed, tmp_path: Path) -> None:
    """Issue 26: CLBlast and the ICD loader come from the wheel (clattn.libs), the driver from
    the driver search, and nothing from the build machine's libraries."""
    libs = installed["venv"] / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"
    if not (libs / "clattn.libs").is_dir():
        pytest.skip(f"{installed['wheel'].name} is not a repaired manylinux wheel (it has no clattn.libs)")
    if os.geteuid() != 0 or not shutil.which("unshare"):
        pytest.skip("hiding the system's libraries needs root and unshare (a private mount namespace)")
    probe = subprocess.run(hidden(["true"], []), capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip(f"this machine refuses a private mount namespace: {probe.stderr.strip()}")
    paths = system_copies("libclblast.so.1", "libOpenCL.so.1")
    python, outside = str(installed["python"]), installed["outside"]
    (tmp_path / "vendors").mkdir()
    environment = bare_environment(OCL_ICD_VENDORS=str(tmp_path / "vendors"))
    run(hidden([python, "-c", SCRIPT, "hidden"], paths), cwd=outside, env=environment)
    listing = run(hidden([python, "-m", "clattn", "devices"], paths), cwd=outside, env=environment)
    assert "found by search: " in listing, listing
    program = libs / "clattn" / "bin" / "clattn"
    linked = run(hidden(["ldd", str(program)], paths), cwd=outside, env=environment)
    for name in ("libclattn", "libOpenCL", "libclblast"):
        line = next((line for line in linked.splitlines() if name in line), "")
        assert f"=> {os.path.realpath(libs)}/" in line or f"=> {libs}/" in line, linked
    checked = run(
        hidden([python, "-m", "clattn", "check", "--quick", "--device", "0"], paths),
        cwd=outside,
        env=environment,
    )
    assert_checked_where_run(checked)
