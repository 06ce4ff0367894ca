"""tiledispatch codegen: kernels.yaml → kernel variants → generated sources and the registry.

Meson runs it as `python -m codegen list|emit|table|registry|targets|abi` from the source root
(codegen/ there is its entry point); the runtime imports it to build and parse the same names.
Kernel families (families/) are the unit of extension: see docs/extending.md.
"""
from . import families
from .configs import ConvKernelConfig, GemmKernelConfig, config_from_name
from .families import Blocked as CpuKnobs  # the cpu family's knobs: the register micro tile
from .manifest import Expansion, Manifest, expand, load_manifest, matches, parse_manifest
from .model import (
    ABI_VERSION, KNOWN_TARGETS, SCHEMA_VERSION, Activation, Backend, Bias, ConvLayout, Direction, DType, Feature,
    GemmVariant, Layout, OutDType, Reduction, backend_of,
)
from .yamlsrc import ManifestError

__all__ = [
    "ABI_VERSION", "KNOWN_TARGETS", "SCHEMA_VERSION", "Activation", "Backend", "Bias", "Feature", "OutDType", "ConvKernelConfig", "ConvLayout",
    "CpuKnobs", "DType", "Direction", "Expansion", "GemmKernelConfig", "GemmVariant", "Layout",
    "Manifest", "ManifestError", "Reduction", "backend_of", "config_from_name", "expand", "families",
    "load_manifest", "matches", "parse_manifest",
]
