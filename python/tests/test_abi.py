"""The ctypes structs of clattn/_capi.py have the layout of include/clattn.h: a C program built
against the header prints every field's offset and every struct's size."""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import REPOSITORY

from clattn import _capi

STRUCTS = {
    "clattn_device_info": _capi.DeviceInfo,
    "clattn_tensor": _capi.Tensor,
    "clattn_attention_desc": _capi.AttentionDesc,
    "clattn_attention_extents": _capi.AttentionExtents,
    "clattn_stats": _capi.Stats,
    "clattn_tuning_axis": _capi.TuningAxis,
    "clattn_transfers": _capi.Transfers,
    "clattn_variant_info": _capi.VariantInfo,
    "clattn_pattern_desc": _capi.PatternDesc,
    "clattn_kv_cache_desc": _capi.KvCacheDesc,
    "clattn_mha_param": _capi.MhaParam,
    "clattn_mha_desc": _capi.MhaDesc,
    "clattn_mha_info": _capi.MhaInfo,
    "clattn_mha_stats": _capi.MhaStats,
}


def c_field_name(name: str) -> str:
    return "global" if name == "global_" else name


def test_struct_layouts_match_the_header(tmp_path: Path) -> None:
    header = REPOSITORY / "include" / "clattn.h"
    compiler = shutil.which("cc") or shutil.which("gcc")
    if not header.is_file() or compiler is None:
        pytest.skip("needs the source tree's include/clattn.h and a C compiler")
    lines = ["#include <stdio.h>", "#include <stddef.h>", '#include "clattn.h"', "int main(void) {"]
    for c_name, struct in STRUCTS.items():
        lines.append(f'    printf("{c_name} size %zu\\n", sizeof({c_name}));')
        for field, _ in struct._fields_:
            lines.append(f'    printf("{c_name} {field} %zu\\n", offsetof({c_name}, {c_field_name(field)}));')
    lines += ["    return 0;", "}"]
    source = tmp_path / "layout.c"
    source.write_text("\n".join(lines) + "\n")
    program = tmp_path / "layout"
    subprocess.run([compiler, "-I", str(header.parent), str(source), "-o", str(program)], check=True)
    printed = subprocess.run([str(program)], capture_output=True, text=True, check=True).stdout.split("\n")
    for line in filter(None, printed):
        c_name, field, value = line.split()
        struct = STRUCTS[c_name]
        python_value = ctypes.sizeof(struct) if field == "size" else getattr(struct, field).offset
        assert python_value == int(value), f"{c_name}.{field}: ctypes {python_value}, C {value}"
