"""Phase 1: a sweep file (a kernels.yaml fragment with ranges) -> kernel configs.

Ranges, as in the reference system's default_config.json, where kernels.yaml takes
literal lists: `tile: {m: R, n: R, k: R}` and `cpu: {micro_tile: {m: R, n: R}}`, each R
an integer, a list, `{values: [...]}` or `{min: a, max: b, step: s}`.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass

import yaml

from ..codegen.manifest import expand, parse_manifest_data
from ..codegen.yamlsrc import LineDict, LineList, ManifestError, load_yaml, read_source


@dataclass(frozen=True)
class SweepExpansion:
    configs: tuple
    rejected: tuple   # (description, reasons)
    duplicates: tuple


def _values(spec, line: int, path: str, what: str) -> list:
    if isinstance(spec, bool):
        raise ManifestError(f"{what}: expected integers, got {spec!r}", line, path)
    if isinstance(spec, int):
        return [spec]
    if isinstance(spec, LineList):
        if not spec or not all(isinstance(v, int) and not isinstance(v, bool) for v in spec):
            raise ManifestError(f"{what}: a list of integers, got {list(spec)!r}", line, path)
        return list(spec)
    if isinstance(spec, LineDict):
        keys = set(spec)
        if keys == {"values"}:
            return _values(spec["values"], spec.line_of("values"), path, what)
        if keys <= {"min", "max", "step"} and {"min", "max"} <= keys:
            lo, hi, step = spec["min"], spec["max"], spec.get("step", 1)
            if not all(isinstance(v, int) and not isinstance(v, bool) for v in (lo, hi, step)) or step <= 0 or lo > hi:
                raise ManifestError(f"{what}: min <= max and a positive step, all integers", spec.line, path)
            return list(range(lo, hi + 1, step))
        raise ManifestError(f"{what}: a range is {{min, max, step}} or {{values: [...]}}, got keys "
                            f"{sorted(keys)}", spec.line, path)
    raise ManifestError(f"{what}: expected an integer, a list or a range, got {spec!r}", line, path)


def _expand_product(container, key, axes, path):
    """Replaces container[key] = {m: R, n: R, ...} by the list of its products."""
    spec = container[key]
    if not isinstance(spec, LineDict):
        return
    line = container.line_of(key)
    unknown = set(spec) - set(axes)
    if unknown:
        raise ManifestError(f"'{key}' ranges take the keys {', '.join(axes)}, not {', '.join(sorted(unknown))}",
                            line, path)
    missing = [a for a in axes if a not in spec]
    if missing:
        raise ManifestError(f"'{key}' ranges need {', '.join(missing)}", line, path)
    lists = [_values(spec[a], spec.line_of(a), path, f"{key}.{a}") for a in axes]
    items = LineList([list(p) for p in itertools.product(*lists)])
    items.line = line
    items.item_lines = [line] * len(items)
    container[key] = items


def load_sweep(path):
    path = str(path)
    data = load_yaml(read_source(path, "sweep"), path)
    if isinstance(data, LineDict):
        for op in ("gemm", "conv"):
            for group in data.get(op) or []:
                if not isinstance(group, LineDict):
                    continue
                if "tile" in group:
                    _expand_product(group, "tile", ("m", "n", "k"), path)
                cpu = group.get("cpu")
                if isinstance(cpu, LineDict) and "micro_tile" in cpu:
                    _expand_product(cpu, "micro_tile", ("m", "n"), path)
    return parse_manifest_data(data, path)


def expand_sweep(path, target: str, kernel_filter: str = "") -> SweepExpansion:
    rejected = []
    result = expand(load_sweep(path), [target], kernel_filter or None,
                    reject=lambda what, why: rejected.append((what, tuple(why))))
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
