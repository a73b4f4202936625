"""clattn.devices() and device specs: the records hold what `clattn devices` prints, and
Context takes every spec form the CLI takes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPOSITORY

import clattn
import clattn.__main__ as clattn_main


def test_device_records() -> None:
    found = clattn.devices()
    assert found, "the tests need an OpenCL device (PoCL on CI)"
    assert [d.index for d in found] == list(range(len(found)))
    assert sum(d.is_default for d in found) == 1
    for d in found:
        assert d.type in ("cpu", "gpu", "accelerator", "other")
        assert d.name and d.platform_name and d.opencl_c_version.startswith("OpenCL C")
        assert d.compute_units >= 1 and d.global_mem_bytes > 0 and d.max_work_group_size >= 1
        assert d.spec == f"{d.platform_index}:{d.device_index}"


@pytest.mark.parametrize("which", ["build", "package"])
def test_same_devices_as_the_cli(which: str) -> None:
    """Each device's name, as `clattn devices` lists it: the program of the build tree, and the
    package's own (`python -m clattn devices`)."""
    if which == "build":
        program = Path(os.environ.get("CLATTN_CLI", REPOSITORY / "build" / "clattn"))
        command = [str(program), "devices"]
    else:
        program = clattn_main.PROGRAM
        command = [sys.executable, "-m", "clattn", "devices"]
    if not program.is_file():
        pytest.skip(f"no clattn program at {program} (set CLATTN_CLI to a build's; the wheel carries one)")
    listing = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    for d in clattn.devices():
        row = next(line for line in listing.splitlines() if line.split()[:2] == [str(d.index), d.spec])
        assert d.name[:44] in row and d.type in row.split()[2]
        assert (d.is_default) == row.rstrip().endswith("(default)")


def test_a_platform_without_devices_is_named(tmp_path: Path) -> None:
    """PoCL loads but refuses its devices (POCL_DEVICES names none it has): the error names the
    platform and the cause, and does not advise installing a driver. In a fresh interpreter,
    since discovery runs once per process."""
    pocl = "Portable Computing Language"
    if not any(pocl in d.platform_name for d in clattn.devices()):
        pytest.skip("no PoCL platform here")
    if any(pocl not in d.platform_name and "rusticl" not in d.platform_name for d in clattn.devices()):
        pytest.skip("another platform offers devices here, so a refusing PoCL leaves some")
    env = dict(os.environ, POCL_DEVICES="bogus", RUSTICL_ENABLE="")
    code = "import clattn\ntry:\n    clattn.Context()\nexcept clattn.Error as e:\n    print(e)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert "platform 'Portable Computing Language' loaded but offered no device" in done.stdout, done
    assert "POCL_DEVICES=bogus" in done.stdout and "pocl-opencl-icd" not in done.stdout, done


def test_every_spec_form() -> None:
    first = clattn.devices()[0]
    for spec in (first.index, str(first.index), first.spec, first.name.upper(), first.type):
        with clattn.Context(spec) as ctx:
            assert ctx.device.index == first.index, spec
    default = next(d for d in clattn.devices() if d.is_default)
    with clattn.Context() as ctx:
        assert ctx.device == default


def test_environment_chooses_the_default(monkeypatch) -> None:
    last = clattn.devices()[-1]
    monkeypatch.setenv("CLATTN_DEVICE", last.spec)
    with clattn.Context() as ctx:
        assert ctx.device.index == last.index
    monkeypatch.setenv("CLATTN_DEVICE", "nothing-is-called-this")
    with pytest.raises(clattn.Error, match="CLATTN_DEVICE"):
        clattn.Context()


def test_variants_and_stats(context) -> None:
    rows = {v.name: v for v in context.variants()}
    assert list(rows)[:4] == ["lanes", "rowwise", "gemm", "reference"]
    assert any(v.used_by_auto for v in rows.values())
    assert rows["lanes"].old_name == "cpu" and rows["gemm"].old_name is None
    assert rows["flash"].tuning_axes["stages"] == (1, 2)
    assert rows["split"].tuning_axes == {}
    fresh = clattn.Context(context.device.index)
    with pytest.raises(clattn.Error, match="no attention call"):
        fresh.last_stats()
    fresh.close()


def test_python_m_clattn_without_a_program(monkeypatch, tmp_path: Path, capsys) -> None:
    """A package without the program (python/ of the source tree) says so, and runs nothing."""
    monkeypatch.setattr(clattn_main, "PROGRAM", tmp_path / "bin" / "clattn")
    assert clattn_main.main(["devices"]) == 2
    assert "this installation has no clattn program" in capsys.readouterr().err
