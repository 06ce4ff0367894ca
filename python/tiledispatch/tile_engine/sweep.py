"""Phase 1: a sweep file (a kernels.yaml fragment with ranges) -> kernel configs.

Ranges, as in the reference system's default_config.json, where kernels.yaml takes
literal lists: `tile: {m: R, n: R, k: R}` and `cpu: {micro_tile: {m: R, n: R}}`, each R
an integer, a list, `{values: [...]}` or `{min: a, max: b, step: s}`.

A sweep is capped like a manifest (codegen.manifest.DEFAULT_MAX_VARIANTS, 20,000 by default):
a range's length and the product of a tile's ranges are computed before any list is built;
`expand_sweep(..., max_variants=N)` or the environment variable TILEDISPATCH_MAX_VARIANTS
raises the cap.
"""
from __future__ import annotations

import itertools
import math
import os
from dataclasses import dataclass

import yaml

from ..codegen.manifest import DEFAULT_MAX_VARIANTS, cap_error, expand, parse_manifest_data
from ..codegen.yamlsrc import LineDict, LineList, ManifestError, load_yaml, read_source, show

ENV_MAX_VARIANTS = "TILEDISPATCH_MAX_VARIANTS"


def max_variants_default() -> int:
    """The sweep cap: $TILEDISPATCH_MAX_VARIANTS where set (a positive integer), else 20,000."""
    text = os.environ.get(ENV_MAX_VARIANTS, "").strip()
    if not text:
        return DEFAULT_MAX_VARIANTS
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value <= 0:
        raise ValueError(f"{ENV_MAX_VARIANTS}={text!r}: expected a positive integer")
    return value


@dataclass(frozen=True)
class SweepExpansion:
    configs: tuple
    rejected: tuple   # (description, reasons)
    duplicates: tuple


def _values(spec, line: int, path: str, what: str, cap: int | None = DEFAULT_MAX_VARIANTS) -> list:
    if isinstance(spec, bool):
        raise ManifestError(f"{what}: expected integers, got {show(spec)}", line, path)
    if isinstance(spec, int):
        return [spec]
    if isinstance(spec, LineList):
        if not spec or not all(isinstance(v, int) and not isinstance(v, bool) for v in spec):
            raise ManifestError(f"{what}: a list of integers, got {show(list(spec))}", line, path)
        return list(spec)
    if isinstance(spec, LineDict):
        keys = set(spec)
        if keys == {"values"}:
            return _values(spec["values"], spec.line_of("values"), path, what, cap)
        if keys <= {"min", "max", "step"} and {"min", "max"} <= keys:
            lo, hi, step = spec["min"], spec["max"], spec.get("step", 1)
            if not all(isinstance(v, int) and not isinstance(v, bool) for v in (lo, hi, step)) or step <= 0 or lo > hi:
                raise ManifestError(f"{what}: min <= max and a positive step, all integers", spec.line, path)
            count = (hi - lo) // step + 1
            if cap is not None and count > cap:
                raise cap_error(f"{what}: the range {lo}..{hi} step {step} alone makes", count, cap, spec.line, path)
            return list(range(lo, hi + 1, step))
        raise ManifestError(f"{what}: a range is {{min, max, step}} or {{values: [...]}}, got keys "
                            f"{show(sorted(keys))}", spec.line, path)
    raise ManifestError(f"{what}: expected an integer, a list or a range, got {show(spec)}", line, path)


def _expand_product(container, key, axes, path, cap=DEFAULT_MAX_VARIANTS):
    """Replaces container[key] = {m: R, n: R, ...} by the list of its products."""
    spec = container[key]
    if not isinstance(spec, LineDict):
        return
    line = container.line_of(key)
    unknown = set(spec) - set(axes)
    if unknown:
        raise ManifestError(f"'{key}' ranges take the keys {', '.join(axes)}, not {show(', '.join(sorted(unknown)))}",
                            line, path)
    missing = [a for a in axes if a not in spec]
    if missing:
        raise ManifestError(f"'{key}' ranges need {', '.join(missing)}", line, path)
    lists = [_values(spec[a], spec.line_of(a), path, f"{key}.{a}", cap) for a in axes]
    count = math.prod(len(values) for values in lists)
    if cap is not None and count > cap:
        raise cap_error(f"'{key}' ranges alone make", count, cap, line, path)
    items = LineList([list(p) for p in itertools.product(*lists)])
    items.line = line
    items.item_lines = [line] * len(items)
    container[key] = items


def parse_sweep(text: str, path: str, max_variants: int | None = DEFAULT_MAX_VARIANTS):
    """A sweep's text -> its Manifest (ranges expanded, each bounded by the cap)."""
    path = str(path)
    data = load_yaml(text, path)
    if isinstance(data, LineDict):
        for op in ("gemm", "conv"):
            groups = data.get(op)
            if not isinstance(groups, LineList):
                continue
            for group in groups:
                if not isinstance(group, LineDict):
                    continue
                if "tile" in group:
                    _expand_product(group, "tile", ("m", "n", "k"), path, max_variants)
                cpu = group.get("cpu")
                if isinstance(cpu, LineDict) and "micro_tile" in cpu:
                    _expand_product(cpu, "micro_tile", ("m", "n"), path, max_variants)
    return parse_manifest_data(data, path, max_variants)


def load_sweep(path, max_variants: int | None = None):
    """max_variants None: $TILEDISPATCH_MAX_VARIANTS, else 20,000."""
    if max_variants is None:
        max_variants = max_variants_default()
    return parse_sweep(read_source(str(path), "sweep"), str(path), max_variants)


def expand_sweep(path, target: str, kernel_filter: str = "", max_variants: int | None = None) -> SweepExpansion:
    """The sweep's variants for one target. More than `max_variants` (None:
    $TILEDISPATCH_MAX_VARIANTS, else 20,000) is a ManifestError raised before any product
    is built."""
    if max_variants is None:
        max_variants = max_variants_default()
    rejected = []
    result = expand(load_sweep(path, max_variants), [target], kernel_filter or None,
                    reject=lambda what, why: rejected.append((what, tuple(why))), max_variants=max_variants)
    return SweepExpansion(result.configs, tuple(rejected), result.duplicates)


def manifest_text(configs) -> str:
    """A kernels.yaml listing exactly these variants (one group each)."""
    groups = {"gemm": [], "conv": []}
    for c in configs:
        entry = {"dtype": c.dtype.key, "tile": list(c.tile), "targets": [c.target]}
        knobs = c.to_dict()["knobs"]
        if c.op == "gemm":
            entry.update(layout=c.layout.key, variant=c.variant.key)
            if c.reduction is not None:
                entry["reduction"] = c.reduction.key
        else:
            entry.update(direction=c.direction.key, layout=c.layout.input_layout)
        entry[c.backend.key] = knobs
        groups[c.op].append(entry)
    data = {"schema_version": 1}
    data.update({op: items for op, items in groups.items() if items})
    return "# Written by the tiledispatch tile engine for one sweep; do not edit.\n" + yaml.safe_dump(
        data, sort_keys=False)
