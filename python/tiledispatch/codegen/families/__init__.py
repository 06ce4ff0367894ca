"""The kernel families, registered in one place.

A family (see base.py) owns its manifest keys, name token, validity rules, source template
and cost-model entry. Adding one is a new module here plus one line in FAMILIES (or, from
outside the package, `register(cls)`). A backend's first family is its default: the one a
manifest group gets when it names no `algorithm`.
"""
from __future__ import annotations

from ..model import Backend, GemmVariant
from .base import Family
from .blocked import Blocked
from .cublaslt import CublasLt
from .cudnn import Cudnn
from .cutlass import Cutlass
from .cutlass_blockwise import CutlassBlockwise
from .cutlass_grouped import CutlassGrouped
from .depthwise import Depthwise
from .depthwise_mma import DepthwiseMma
from .direct import Direct
from .grouped_mma import GroupedMma
from .im2col import Im2col
from .implicit import Implicit
from .mfma import Mfma
from .mma import Mma
from .pointwise import Pointwise
from .skinny import Skinny
from .tiled_mma import TiledMma
from .toeplitz_mma import ToeplitzMma

FAMILIES = [
    Blocked,       # cpu
    Mfma,          # hip
    Cutlass, Skinny, Direct, Depthwise, DepthwiseMma, ToeplitzMma, Mma, TiledMma, Im2col, Implicit, GroupedMma,
    Pointwise,  # cuda
    CutlassGrouped,  # cuda, grouped GEMM (the variant `grouped`)
    Cudnn, CublasLt,  # cuda, vendor libraries
    CutlassBlockwise,  # cuda, fp8 with block-wise scales
]

OP_WORDS = {"gemm": "GEMM", "conv": "convolution"}


def register(family: type) -> type:
    """Adds a family (a Family dataclass) to the registry; its FAMILY and CODE must be new."""
    for known in FAMILIES:
        if known.FAMILY == family.FAMILY or known.CODE == family.CODE:
            raise ValueError(f"family {family.FAMILY} (code {family.CODE}) clashes with {known.FAMILY} "
                             f"(code {known.CODE})")
    FAMILIES.append(family)
    return family


def unregister(family: type) -> None:
    FAMILIES.remove(family)


def of_backend(backend: Backend) -> list:
    return [f for f in FAMILIES if f.BACKEND is backend]


def by_code(code: int):
    for family in FAMILIES:
        if family.CODE == code:
            return family
    raise ValueError(f"unknown family code {code}")


def _or_list(words) -> str:
    words = list(words)
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} or {words[-1]}"


def manifest_keys(backend: Backend) -> tuple:
    """The keys of a group's backend sub-map: `algorithm` where the backend has several
    families, then every family's keys in registration order."""
    families = of_backend(backend)
    keys = ["algorithm"] if len(families) > 1 else []
    for family in families:
        keys += [k for k in family.YAML_KEYS if k not in keys]
    return tuple(keys)


def key_shape(backend: Backend, key: str) -> str:
    """The value shape of a backend sub-map key (base.Family.KEY_SHAPES; "word" when none says)."""
    for family in of_backend(backend):
        if key in family.KEY_SHAPES:
            return family.KEY_SHAPES[key]
    return "word"


def knobs_from_yaml(backend: Backend, values: dict):
    """One combination of a backend sub-map's values -> its family's knobs (ValueError: why not)."""
    families = of_backend(backend)
    name = values.get("algorithm", families[0].FAMILY)
    for family in families:
        if family.FAMILY == name:
            return family.from_yaml(values)
    raise ValueError(f"unknown algorithm '{name}' (expected {_or_list(f.FAMILY for f in families)})")


def default_knobs(backend: Backend, op: str):
    """The knobs of a group that names none for this backend: its first family's defaults."""
    return of_backend(backend)[0].default(op)


def knobs_from_token(backend: Backend, token: str):
    for family in of_backend(backend):
        knobs = family.from_token(token)
        if knobs is not None:
            return knobs
    raise ValueError(f"bad {backend.key} knob token '{token}'")


def problems(knobs, op: str, dtype, layout, variant, tile, target) -> list[str]:
    """Why a variant cannot be built ([]: it can): the family's op, then its rules."""
    if op not in knobs.OPS:
        users = [f.FAMILY for f in of_backend(knobs.BACKEND) if op in f.OPS]
        return [f"{OP_WORDS[op]} on the {knobs.BACKEND.key} backend uses algorithm {_or_list(users)}"]
    if op == "gemm" and (variant is GemmVariant.GROUPED) != knobs.GROUPED:
        builders = [f.FAMILY for f in of_backend(knobs.BACKEND) if f.GROUPED]
        if knobs.GROUPED:
            return [f"algorithm {knobs.FAMILY} builds the variant grouped only, not {variant.key}"]
        if not builders:
            return [f"the variant grouped is not built on the {knobs.BACKEND.key} backend"]
        return [f"the variant grouped is built by algorithm {_or_list(builders)}"]
    return knobs.problems(op, dtype, layout, variant, tile, target)


__all__ = ["FAMILIES", "Backend", "Family", "by_code", "default_knobs", "key_shape", "knobs_from_token", "knobs_from_yaml",
           "manifest_keys", "of_backend", "problems", "register", "unregister"] + [f.__name__ for f in FAMILIES]
