"""Kernel families are the unit of extension: a family written outside the package (here a toy
cpu GEMM family in a temporary directory) registers with one line and is then expanded from a
manifest, named, parsed back, checked and emitted like the built-in ones, without changing
what the default manifest builds. docs/extending.md walks through the same steps."""
import importlib.util
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from string import Template

import pytest

from tiledispatch.codegen import (
    KNOWN_TARGETS, GemmKernelConfig, ManifestError, config_from_name, expand, families, load_manifest,
)
from tiledispatch.codegen import abi
from tiledispatch.codegen.emit import emit_source
from tiledispatch.codegen.families import Blocked, Family
from tiledispatch.codegen.model import Backend

ROOT = Path(__file__).resolve().parents[1]

# The family module, as its author would write it outside the package: the blocked cpu GEMM
# template with its micro tile's rows unrolled 1 or 2 times (4 x unroll rows by 16 columns).
TOY_MODULE = Template('''\
"""toy (cpu, GEMM): the blocked template with 4 x `unroll` micro-tile rows."""
from __future__ import annotations

import re
from dataclasses import dataclass
from string import Template

from tiledispatch.codegen.families.base import Family
from tiledispatch.codegen.model import FNUZ, Backend, GemmVariant

INSTANCE = Template("""\\
cpu::GemmKernelImpl<$${elem}, $${dtype_code}, $${layout_code}, false, -1,
                        $${tile_m}, $${tile_n}, $${tile_k}, $${micro_m}, 16>""")


@dataclass(frozen=True)
class Toy(Family):
    unroll: int = 1

    FAMILY = "toy"
    CODE = ${code}
    BACKEND = Backend.CPU
    OPS = ("gemm",)
    YAML_KEYS = ("unroll",)
    KEY_SHAPES = {"unroll": "int"}
    HEADER = "cpu/gemm_kernel.hpp"
    COST = {"gemm": "blocked_gemm_cost"}

    @classmethod
    def from_yaml(cls, values: dict) -> "Toy":
        cls.reject_keys(values)
        unroll = values.get("unroll", 1)
        if unroll not in (1, 2):
            raise ValueError(f"unroll {unroll!r} not one of 1, 2")
        return cls(unroll)

    @property
    def micro_m(self) -> int:
        return 4 * self.unroll

    @property
    def token(self) -> str:
        return f"toy_u{self.unroll}"

    @classmethod
    def from_token(cls, token: str):
        match = re.fullmatch(r"toy_u([12])", token)
        return cls(int(match.group(1))) if match else None

    def problems(self, op, dtype, layout, variant, tile, target) -> list[str]:
        tm, tn, tk = tile
        out = []
        if variant is not GemmVariant.STANDARD:
            out.append("the toy GEMM builds variant standard only (stream-K: algorithm blocked)")
        if dtype in FNUZ:
            out.append(f"{dtype.key} (FNUZ) is built for gfx942 only")
        if tm % self.micro_m:
            out.append(f"tile M {tm} is not a multiple of the toy's {self.micro_m} micro-tile rows")
        if tn % 16:
            out.append(f"tile N {tn} is not a multiple of 16")
        return out

    def instance(self, config) -> str:
        tm, tn, tk = config.tile
        return INSTANCE.substitute(elem=config.dtype.cpp, dtype_code=config.dtype.code,
                                   layout_code=config.layout.code, tile_m=tm, tile_n=tn, tile_k=tk,
                                   micro_m=self.micro_m)

    def info(self, config) -> dict:
        return {"micro_m": self.micro_m, "micro_n": 16}

    def to_dict(self) -> dict:
        return {"algorithm": self.FAMILY, "unroll": self.unroll}
''')

TOY_GROUP = """\
schema_version: 1
gemm:
  - dtype: [fp32, bf16]
    layout: rcr
    tile: [48, 64, 128]
    targets: [cpu]
    cpu: {algorithm: toy, unroll: [1, 2]}
"""


def next_code() -> int:
    return max(f.CODE for f in families.FAMILIES) + 1


def import_toy(directory, monkeypatch):
    """The Toy class of a family module written into `directory` and imported from there."""
    path = directory / "toy_family.py"
    path.write_text(TOY_MODULE.substitute(code=next_code()))
    spec = importlib.util.spec_from_file_location("toy_family", path)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "toy_family", module)  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module.Toy


@pytest.fixture
def toy(tmp_path, monkeypatch):
    """The toy family, registered with one line; unregistered afterwards."""
    before = list(families.FAMILIES)
    Toy = import_toy(tmp_path, monkeypatch)
    families.register(Toy)
    yield Toy
    families.unregister(Toy)
    assert families.FAMILIES == before


def manifest(tmp_path, text):
    path = tmp_path / "kernels.yaml"
    path.write_text(text)
    return load_manifest(path)


def test_a_manifest_group_names_the_toy_family(toy, tmp_path):
    names = [c.name for c in expand(manifest(tmp_path, TOY_GROUP), ["cpu"]).configs]
    assert names == [
        "gemm_bf16_rcr_standard_48x64x128_toy_u1_cpu",
        "gemm_bf16_rcr_standard_48x64x128_toy_u2_cpu",
        "gemm_fp32_rcr_standard_48x64x128_toy_u1_cpu",
        "gemm_fp32_rcr_standard_48x64x128_toy_u2_cpu",
    ]
    # the cpu sub-map now takes `algorithm`; a group naming none keeps the backend's default
    assert families.manifest_keys(Backend.CPU) == ("algorithm", "micro_tile", "fusion", "unroll")
    plain = expand(manifest(tmp_path, TOY_GROUP.replace("    cpu: {algorithm: toy, unroll: [1, 2]}\n", "")),
                   ["cpu"]).configs
    assert {type(c.knobs) for c in plain} == {Blocked}


def test_toy_names_round_trip(toy, tmp_path):
    for config in expand(manifest(tmp_path, TOY_GROUP), ["cpu"]).configs:
        assert isinstance(config.knobs, toy)
        assert config.family == "toy"
        assert config_from_name(config.name) == config
        assert config.to_dict()["knobs"] == {"algorithm": "toy", "unroll": config.knobs.unroll}
    made = GemmKernelConfig("fp16", "rrr", tile=(64, 32, 64), knobs=toy(2))
    assert made.name == "gemm_fp16_rrr_standard_64x32x64_toy_u2_cpu"
    assert config_from_name(made.name) == made
    with pytest.raises(ValueError, match="bad cpu knob token 'toy_u3'"):
        config_from_name("gemm_fp32_rcr_standard_48x64x128_toy_u3_cpu")


@pytest.mark.parametrize("cpu, line, message", [
    ("{algorithm: toy, unroll: [1, 3]}", 7, "unroll 3 not one of 1, 2"),
    ("{algorithm: toy, unroll: two}", 7, "unroll 'two' not one of 1, 2"),
    ("{algorithm: toy, micro_tile: [6, 16]}", 7, "the toy algorithm takes no micro_tile"),
    ("{algorithm: tiny}", 7, "unknown algorithm 'tiny' (expected blocked or toy)"),
    ("{algorithm: toy, unrol: 2}", 7, "unknown cpu knob 'unrol' (expected algorithm, micro_tile, fusion, unroll)"),
])
def test_a_bad_toy_knob_names_file_and_line(toy, tmp_path, cpu, line, message):
    with pytest.raises(ManifestError) as info:
        expand(manifest(tmp_path, TOY_GROUP.replace("{algorithm: toy, unroll: [1, 2]}", cpu)), ["cpu"])
    assert str(info.value).startswith(f"{tmp_path / 'kernels.yaml'}:{line}: "), str(info.value)
    assert message in str(info.value)


@pytest.mark.parametrize("change, message", [
    (("tile: [48, 64, 128]", "tile: [44, 64, 128]"), "tile M 44 is not a multiple of the toy's 8 micro-tile rows"),
    (("layout: rcr", "layout: rcr\n    variant: stream_k\n    reduction: atomic"),
     "the toy GEMM builds variant standard only"),
])
def test_the_toy_rules_name_file_and_line(toy, tmp_path, change, message):
    with pytest.raises(ManifestError) as info:
        expand(manifest(tmp_path, TOY_GROUP.replace(*change)), ["cpu"])
    rendered = str(info.value)
    assert re.match(rf"{re.escape(str(tmp_path / 'kernels.yaml'))}:\d+: cpu backend cannot build ", rendered), rendered
    assert message in rendered


def test_the_emitted_source_instantiates_the_template_with_the_toy_info_and_cost(toy):
    config = config_from_name("gemm_bf16_rcr_standard_48x64x128_toy_u2_cpu")
    text = emit_source(config)
    assert text.startswith("// Generated by tiledispatch codegen")
    assert '#include "cpu/gemm_kernel.hpp"' in text
    assert ("make_kernel<GemmKernel,\n    cpu::GemmKernelImpl<td::bf16_t, 2, 0, false, -1,\n"
            "                        48, 64, 128, 8, 16>>(") in text
    # name, family, dtype, layout, variant, reduction, ndim, direction, tile, micro tile, ...
    info = re.search(r"KernelInfo\{(.*)\}", text).group(1).split(", ")
    assert info[:13] == ['"gemm_bf16_rcr_standard_48x64x128_toy_u2_cpu"', str(toy.CODE), "2", "0", "0", "-1",
                         "0", "-1", "48", "64", "128", "8", "16"]
    assert len(info) == len(abi.KERNEL_INFO)
    assert "double blocked_gemm_cost(const KernelInfo&, const TdGemmProblem&, const CostContext&);" in text
    assert "    &blocked_gemm_cost);" in text


@pytest.mark.skipif(shutil.which("c++") is None, reason="no C++ compiler")
def test_the_emitted_toy_source_compiles(toy, tmp_path):
    source = tmp_path / "toy.cpp"
    source.write_text(emit_source(config_from_name("gemm_fp32_rrr_standard_48x64x128_toy_u1_cpu")))
    proc = subprocess.run(["c++", "-std=c++20", "-fsyntax-only", "-I", str(ROOT / "bindings" / "include"),
                           "-I", str(ROOT / "bindings"), str(source)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_the_abi_enum_gains_the_family(toy):
    """An in-tree family is rendered into td_family by `python -m codegen abi --write`."""
    header = abi.render_c_types(families.FAMILIES)
    assert f"    TD_FAMILY_TOY = {toy.CODE},\n" in header
    assert f"#define TD_FAMILY_COUNT {toy.CODE + 1}\n" in header


def test_the_default_families_are_unaffected(tmp_path, monkeypatch):
    default = load_manifest(ROOT / "kernels.yaml")
    targets = list(KNOWN_TARGETS)
    before = [c.name for c in expand(default, targets).configs]
    cpu_default = GemmKernelConfig().knobs
    Toy = import_toy(tmp_path, monkeypatch)
    families.register(Toy)
    try:
        configs = expand(default, targets).configs
        assert [c.name for c in configs] == before
        assert not any(c.family == "toy" for c in configs)
        assert GemmKernelConfig().knobs == cpu_default
        for config in configs:
            assert config_from_name(config.name) == config
    finally:
        families.unregister(Toy)
    assert [c.name for c in expand(default, targets).configs] == before


def test_a_clashing_family_or_code_is_refused(toy):
    known = list(families.FAMILIES)

    @dataclass(frozen=True)
    class SameName(Family):
        FAMILY = "blocked"
        CODE = toy.CODE + 1
        BACKEND = Backend.CPU

    @dataclass(frozen=True)
    class SameCode(Family):
        FAMILY = "toy2"
        CODE = Blocked.CODE
        BACKEND = Backend.CPU

    with pytest.raises(ValueError, match=r"family blocked \(code \d+\) clashes with blocked"):
        families.register(SameName)
    with pytest.raises(ValueError, match=r"family toy2 \(code 0\) clashes with blocked \(code 0\)"):
        families.register(SameCode)
    with pytest.raises(ValueError, match="family toy .* clashes with toy"):
        families.register(toy)
    assert families.FAMILIES == known


def test_every_registered_family_fills_the_contract():
    """What base.Family asks of a family, checked over the registry (the built-in ones here)."""
    for family in families.FAMILIES:
        assert re.fullmatch(r"[a-z][a-z0-9_]*", family.FAMILY), family
        assert family.BACKEND in Backend and family.OPS and set(family.OPS) <= {"gemm", "conv"}, family
        assert set(family.COST) == set(family.OPS), family
        assert set(family.KEY_SHAPES) <= set(family.YAML_KEYS), family
        for op in family.OPS:
            knobs = family.default(op)
            assert re.fullmatch(r"[a-z0-9_]+", knobs.token), family
            assert family.from_token(knobs.token) == knobs, family
            others = [f for f in families.of_backend(family.BACKEND) if f is not family]
            assert all(f.from_token(knobs.token) is None for f in others), family
