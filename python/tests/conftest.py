"""Shared fixtures. The tests use the clattn that Python imports (in CI, the wheel installed
into a fresh virtual environment; in development, CLATTN_LIBRARY=build/libclattn.so with
python/ on PYTHONPATH). $CLATTN_DEVICE picks the device, as everywhere."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Iterator

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))  # reference.py

import clattn  # noqa: E402

REPOSITORY = Path(__file__).resolve().parents[2]


def pytest_report_header(config: pytest.Config) -> str:
    torch = "absent"
    try:
        import torch as torch_module

        torch = torch_module.__version__
    except ImportError:
        pass
    return (
        f"clattn {clattn.__version__} from {Path(clattn.__file__).parent}, library {clattn.library_path}; "
        f"default device {clattn.default_context().device.name}; torch {torch}"
    )


@pytest.fixture(scope="session")
def context() -> Iterator[clattn.Context]:
    """One context for the session (kernels are compiled once per context)."""
    with clattn.Context() as ctx:
        yield ctx


@pytest.fixture(scope="session")
def torch():
    """The torch module. A test that takes it is skipped, saying why, where torch is not
    installed: torch is optional, and scripts/test-python.sh runs the suite without it too."""
    return pytest.importorskip(
        "torch", reason="torch is not installed (optional; the suite also runs without it)"
    )


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(1234)


def uniform(rng: np.random.Generator, *shape: int) -> np.ndarray:
    """the contract's test inputs: uniform in [-1, 1], float32."""
    return rng.uniform(-1, 1, size=shape).astype(np.float32)
