"""The ABI's one source: the C headers are the ones python/tiledispatch/codegen/abi.py renders,
and the C compiler lays the structs out exactly as the Python package's ctypes structs."""
import ctypes
import shutil
import subprocess
import sys

import pytest

from tiledispatch import _ffi
from tiledispatch.codegen import abi, families
from tiledispatch.codegen.model import DType, Direction, Layout

from conftest import ROOT

INCLUDE = ROOT / "bindings" / "include"


def test_the_abi_headers_in_the_source_tree_are_current():
    """`python -m codegen abi --write` renders them; an edit of abi.py or of the families
    without it fails here."""
    assert (INCLUDE / "tiledispatch" / "abi_types.h").read_text() == abi.render_c_types(families.FAMILIES)
    assert (INCLUDE / "tiledispatch" / "kernel_info.hpp").read_text() == abi.render_kernel_info()


def test_the_codegen_command_checks_the_headers():
    proc = subprocess.run([sys.executable, "-m", "codegen", "abi", "--check"], cwd=ROOT, capture_output=True,
                          text=True)
    assert proc.returncode == 0, proc.stderr


def test_the_enums_carry_the_models_codes():
    header = (INCLUDE / "tiledispatch" / "abi_types.h").read_text()
    for member in DType:
        assert f"    TD_{member.name} = {member.code},\n" in header
    for member in Layout:
        assert f"    TD_{member.name} = {member.code},\n" in header
    for member in Direction:
        assert f"    TD_CONV_{member.name} = {member.code},\n" in header
    for family in families.FAMILIES:
        assert f"    TD_FAMILY_{family.FAMILY.upper()} = {family.CODE},\n" in header
    assert f"#define TD_DTYPE_COUNT {len(DType)}\n" in header
    assert f"#define TD_FAMILY_COUNT {max(f.CODE for f in families.FAMILIES) + 1}\n" in header
    assert f"#define TD_ABI_VERSION {abi.ABI_VERSION}\n" in header


def test_family_codes_are_unique_and_small():
    """Unique, stable codes (registries store them); TD_FAMILY_COUNT is the largest plus one, so
    a code may stay unused."""
    codes = sorted(f.CODE for f in families.FAMILIES)
    assert len(set(codes)) == len(codes) and codes[0] == 0 and codes[-1] < 2 * len(codes)
    assert len({f.FAMILY for f in families.FAMILIES}) == len(codes)


@pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None, reason="no C compiler")
def test_the_c_compiler_lays_out_each_struct_as_ctypes_does(tmp_path):
    """Field by field: offset and size of every field, and each struct's size."""
    structs = {"TdGemmProblem": _ffi.TdGemmProblem, "ConvProblemC": _ffi.ConvProblemC,
               "TdConvProblem": _ffi.TdConvProblem, "TdOptions": _ffi.TdOptions,
               "TdGemmEpilogue": _ffi.TdGemmEpilogue, "TdGemmGroup": _ffi.TdGemmGroup}
    lines = ["#include <stddef.h>", "#include <stdio.h>", '#include "tiledispatch/tiledispatch.h"', "int main(void) {"]
    expected = []
    for name, struct in structs.items():
        lines.append(f'printf("{name} %zu\\n", sizeof({name}));')
        expected.append(f"{name} {ctypes.sizeof(struct)}")
        for field, ctype in struct._fields_:
            lines.append(f'printf("{name}.{field} %zu %zu\\n", offsetof({name}, {field}), sizeof((({name}*)0)->{field}));')
            expected.append(f"{name}.{field} {getattr(struct, field).offset} {ctypes.sizeof(ctype)}")
    lines += ["return 0;", "}"]
    (tmp_path / "layout.c").write_text("\n".join(lines) + "\n")
    cc = shutil.which("cc") or shutil.which("gcc")
    subprocess.run([cc, "-std=c99", "-I", str(INCLUDE), "layout.c", "-o", "layout"], cwd=tmp_path, check=True)
    got = subprocess.run([str(tmp_path / "layout")], capture_output=True, text=True, check=True).stdout.split("\n")
    assert got[:-1] == expected


def test_kernel_info_initializers_follow_the_struct():
    """The frame's KernelInfo initializer has one value per field, in the struct's order."""
    from tiledispatch.codegen import config_from_name
    from tiledispatch.codegen.frame import kernel_info
    config = config_from_name("conv_fwd_nhwgc_bf16_256x32x16_tiledmma_cpg8_sm90a")
    values = abi.kernel_info_values(kernel_info(config))
    fields = [f for f, _ in abi.KERNEL_INFO]
    assert len(values) == len(fields)
    info = dict(zip(fields, values))
    assert info["family"] == families.TiledMma.CODE and info["channels_per_group"] == 8
    assert info["direction"] == Direction.FWD.code and info["ndim"] == 2 and info["layout"] == -1
    with pytest.raises(ValueError, match="not KernelInfo fields: bogus"):
        abi.kernel_info_values({"bogus": 1})
