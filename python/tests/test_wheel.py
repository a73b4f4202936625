"""The wheel installs into a fresh virtual environment and works from outside the source tree,
with its own copy of the library. $CLATTN_WHEEL names a built wheel (scripts/test-python.sh
builds one); without it the test builds one from the source tree with pip."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import REPOSITORY

SCRIPT = textwrap.dedent(
    """
    import os, sys
    import numpy as np
    import clattn
    prefix = os.path.realpath(sys.prefix)
    assert os.path.realpath(clattn.__file__).startswith(prefix), clattn.__file__
    assert os.path.realpath(clattn.library_path).startswith(prefix), clattn.library_path
    q = np.random.default_rng(0).uniform(-1, 1, (1, 2, 5, 8)).astype(np.float32)
    o = clattn.attention(q, q, q)
    s = np.einsum("bhid,bhjd->bhij", q.astype(np.float64), q) / np.sqrt(8)
    p = np.exp(s - s.max(-1, keepdims=True)); p /= p.sum(-1, keepdims=True)
    assert np.abs(o - p @ q).max() < 1e-4
    print("clattn", clattn.__version__, "from", clattn.library_path, "on", clattn.default_context().device.name)
    """
)


def run(command: list, **kwargs) -> str:
    done = subprocess.run(command, capture_output=True, text=True, **kwargs)
    assert done.returncode == 0, f"{' '.join(map(str, command))} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def built_wheel(tmp_path: Path) -> Path:
    given = os.environ.get("CLATTN_WHEEL")
    if given:
        return Path(given)
    if not (REPOSITORY / "python" / "pyproject.toml").is_file():
        pytest.skip("no $CLATTN_WHEEL and no source tree to build a wheel from")
    run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "-w",
            str(tmp_path / "dist"),
            str(REPOSITORY / "python"),
        ]
    )
    return next((tmp_path / "dist").glob("clattn-*.whl"))


def test_wheel_in_a_fresh_virtual_environment(tmp_path: Path) -> None:
    wheel = built_wheel(tmp_path)
    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", str(venv)])
    python = venv / "bin" / "python"
    run([str(python), "-m", "pip", "install", "--quiet", str(wheel)])
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    environment = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "CLATTN_LIBRARY")}
    printed = run([str(python), "-c", SCRIPT], cwd=outside, env=environment)
    assert printed.startswith("clattn 0.2")
    # the package's own library comes first, before $CLATTN_LIBRARY
    environment["CLATTN_LIBRARY"] = str(tmp_path / "no-such-library.so")
    run([str(python), "-c", SCRIPT], cwd=outside, env=environment)
