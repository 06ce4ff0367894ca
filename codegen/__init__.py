"""tiledispatch codegen: kernels.yaml → kernel variants → generated sources and the registry.

Run as `python -m codegen list|emit|table|registry|targets` (Meson does); installed as
`tiledispatch.codegen` so the runtime builds names with the same code.
"""
from .manifest import Expansion, Manifest, expand, load_manifest, matches, parse_manifest
from .model import (
    ABI_VERSION, KNOWN_TARGETS, SCHEMA_VERSION, Backend, ConvKernelConfig, ConvLayout, CpuKnobs,
    Direction, DType, GemmKernelConfig, GemmVariant, Layout, Reduction, backend_of,
    config_from_name,
)
from .yamlsrc import ManifestError

__all__ = [
    "ABI_VERSION", "KNOWN_TARGETS", "SCHEMA_VERSION", "Backend", "ConvKernelConfig", "ConvLayout",
    "CpuKnobs", "DType", "Direction", "Expansion", "GemmKernelConfig", "GemmVariant", "Layout",
    "Manifest", "ManifestError", "Reduction", "backend_of", "config_from_name", "expand",
    "load_manifest", "matches", "parse_manifest",
]
