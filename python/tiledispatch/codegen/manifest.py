"""kernels.yaml (schema version 1) → validated groups → expanded kernel configs.

Every key is checked; unknown keys, duplicate keys, wrong types, unknown values
and tiles a backend cannot build raise ManifestError naming `file:line`.

Expansion is capped: a manifest may expand to at most `max_variants` variants (default
DEFAULT_MAX_VARIANTS, counted over every target its groups name, before the filter), checked
from the lengths of its lists before any product is built.
"""
from __future__ import annotations

import fnmatch
import itertools
import math
import re
from dataclasses import dataclass

from . import families
from .configs import ConvKernelConfig, GemmKernelConfig
from .model import (
    SCHEMA_VERSION, Backend, ConvLayout, Direction, DType, GemmVariant, Layout, Reduction, backend_of,
    check_target,
)
from .yamlsrc import LineDict, LineList, ManifestError, load_yaml, read_source, show

DEFAULT_MAX_VARIANTS = 20_000
CAP_HINT = ("raise the cap with the Meson option -Dmax_variants=N (python -m codegen list/table/registry "
            "--max-variants N; tile-engine sweeps: expand_sweep(..., max_variants=N) or the environment "
            "variable TILEDISPATCH_MAX_VARIANTS=N)")


def cap_error(what: str, count: int, cap: int, line, path) -> ManifestError:
    """The error for an expansion over the cap: the count, the cap and how to raise it."""
    return ManifestError(f"{what} {count:,} variants, more than the cap of {cap:,}; "
                         f"narrow it, or {CAP_HINT}", line, path)

TOP_KEYS = ("schema_version", "gemm", "conv")
COMMON_KEYS = ("name", "dtype", "tile", "targets")
GEMM_KEYS = COMMON_KEYS + ("layout", "variant", "reduction")
CONV_KEYS = COMMON_KEYS + ("direction", "layout")
BACKEND_KEYS = tuple(b.key for b in Backend)


@dataclass(frozen=True)
class Group:
    """One validated manifest group: the lists its product is taken over."""

    op: str
    label: str
    line: int
    axes: tuple  # ((axis name, ((value, line), ...)), ...)
    targets: tuple  # ((target, line), ...)
    knobs: tuple  # ((backend, ((knobs, line), ...)), ...)

    def axis(self, name):
        return dict(self.axes)[name]

    def knobs_for(self, backend: Backend):
        for key, values in self.knobs:
            if key is backend:
                return values
        return ((families.default_knobs(backend, self.op), self.line),)


@dataclass(frozen=True)
class Manifest:
    path: str
    groups: tuple


def _error(message, line, path):
    return ManifestError(message, line, path)


def _as_list(container, key, path):
    """The value under `key` as [(item, line)]: a scalar counts as a one-item list."""
    value = container[key]
    if isinstance(value, LineList):
        if not value:
            raise _error(f"'{key}' must not be empty", container.line_of(key), path)
        return [(item, value.line_of(i)) for i, item in enumerate(value)]
    return [(value, container.line_of(key))]


def _parse_values(container, key, parse, path, required=True, default=None):
    if key not in container:
        if required:
            raise _error(f"missing key '{key}'", container.line, path)
        return default
    out = []
    for item, line in _as_list(container, key, path):
        if isinstance(item, (LineDict, LineList)) or item is None or isinstance(item, bool):
            raise _error(f"'{key}' takes strings, got {type(item).__name__} {show(item)}", line, path)
        try:
            out.append((parse(str(item)), line))
        except ValueError as err:
            raise _error(str(err), line, path) from None
    return tuple(out)


def _int_triple(item, line, key, path, size):
    if not isinstance(item, list) or len(item) != size or not all(
            isinstance(v, int) and not isinstance(v, bool) for v in item):
        raise _error(f"'{key}' items must be lists of {size} integers, got {show(item)}", line, path)
    if any(v <= 0 for v in item):
        raise _error(f"'{key}' values must be positive, got {show(list(item))}", line, path)
    return tuple(item)


def _parse_tiles(container, path):
    if "tile" not in container:
        raise _error("missing key 'tile' (a list of [M, N, K] block tiles)", container.line, path)
    value = container["tile"]
    if isinstance(value, LineList) and value and not isinstance(value[0], list):
        items = [(value, container.line_of("tile"))]  # a single [M, N, K]
    else:
        items = _as_list(container, "tile", path)
    return tuple((_int_triple(item, line, "tile", path, 3), line) for item, line in items)


def _parse_knobs(group, path, max_variants=DEFAULT_MAX_VARIANTS):
    """Per-backend knob sub-maps: each key a list, their product a list of knob objects."""
    out = []
    for backend in Backend:
        if backend.key not in group:
            continue
        sub = group[backend.key]
        line = group.line_of(backend.key)
        if not isinstance(sub, LineDict):
            raise _error(f"'{backend.key}' must be a mapping of backend knobs", line, path)
        keys = families.manifest_keys(backend)
        for key in sub:
            if key not in keys:
                raise _error(f"unknown {backend.key} knob '{key}' (expected {', '.join(keys)})",
                             sub.line_of(key), path)
        axes = []
        for key in keys:
            if key not in sub:
                continue
            raw = sub[key]
            shape = families.key_shape(backend, key)
            if shape in ("pair", "triple"):
                size = 2 if shape == "pair" else 3
                items = ([(raw, sub.line_of(key))] if isinstance(raw, LineList) and raw
                         and not isinstance(raw[0], list) else _as_list(sub, key, path))
                axes.append([(key, _int_triple(item, item_line, key, path, size), item_line)
                             for item, item_line in items])
            else:
                items = _as_list(sub, key, path)
                for item, item_line in items:
                    if shape == "int" and isinstance(item, int) and not isinstance(item, bool):
                        continue
                    if not isinstance(item, str):
                        raise _error(f"'{key}' takes strings, got {show(item)}", item_line, path)
                axes.append([(key, item, item_line) for item, item_line in items])
        count = math.prod(len(axis) for axis in axes)
        if max_variants is not None and count > max_variants:
            raise cap_error(f"the '{backend.key}' knobs of this group alone make", count, max_variants, line, path)
        values = []
        for combo in itertools.product(*axes):
            try:
                knobs = families.knobs_from_yaml(backend, {key: value for key, value, _ in combo})
            except (ValueError, TypeError, ArithmeticError) as err:
                bad_line = max((item_line for _, _, item_line in combo), default=line)
                raise _error(str(err), bad_line, path) from None
            values.append((knobs, max((item_line for _, _, item_line in combo), default=line)))
        out.append((backend, tuple(values)))
    return tuple(out)


def _parse_group(op, group, index, path, line=None, max_variants=DEFAULT_MAX_VARIANTS):
    if not isinstance(group, LineDict):
        raise _error(f"each '{op}' entry must be a mapping, got {type(group).__name__} {show(group)}", line, path)
    allowed = (GEMM_KEYS if op == "gemm" else CONV_KEYS) + BACKEND_KEYS
    for key in group:
        if key not in allowed:
            hint = ""
            raise _error(f"unknown key '{key}' in {op} group{hint}; allowed: {', '.join(allowed)}",
                         group.line_of(key), path)
    label = group.get("name", f"{op}[{index}]")
    if not isinstance(label, str):
        raise _error("'name' must be a string", group.line_of("name"), path)

    def check_target_value(text):
        return check_target(text)

    targets = _parse_values(group, "targets", check_target_value, path)
    axes = [("dtype", _parse_values(group, "dtype", DType.parse, path))]
    if op == "gemm":
        variants = _parse_values(group, "variant", GemmVariant.parse, path, required=False,
                                 default=((GemmVariant.STANDARD, group.line),))
        reductions = _parse_values(group, "reduction", Reduction.parse, path, required=False)
        has_streamk = any(v is GemmVariant.STREAM_K for v, _ in variants)
        if reductions and not has_streamk:
            raise _error("'reduction' applies only to variant stream_k", group.line_of("reduction"), path)
        if has_streamk and not reductions:
            raise _error("variant stream_k needs 'reduction' (atomic and/or deterministic)",
                         group.line_of("variant"), path)
        axes += [("layout", _parse_values(group, "layout", Layout.parse, path)),
                 ("variant", variants), ("reduction", reductions or ((None, group.line),))]
    else:
        axes += [("direction", _parse_values(group, "direction", Direction.parse, path)),
                 ("layout", _parse_values(group, "layout", ConvLayout.parse, path))]
    axes.append(("tile", _parse_tiles(group, path)))
    return Group(op, label, group.line, tuple(axes), targets, _parse_knobs(group, path, max_variants))


def parse_manifest(text: str, path: str, max_variants=DEFAULT_MAX_VARIANTS) -> Manifest:
    return parse_manifest_data(load_yaml(text, path), path, max_variants)


def parse_manifest_data(data, path: str, max_variants=DEFAULT_MAX_VARIANTS) -> Manifest:
    """A manifest from already-loaded YAML (LineDict/LineList keep the lines)."""
    if not isinstance(data, LineDict):
        raise _error("the manifest must be a mapping with schema_version, gemm and conv", 1, path)
    for key in data:
        if key not in TOP_KEYS:
            raise _error(f"unknown top-level key '{key}'; allowed: {', '.join(TOP_KEYS)}",
                         data.line_of(key), path)
    if data.get("schema_version") != SCHEMA_VERSION:
        raise _error(f"schema_version must be {SCHEMA_VERSION}, got {show(data.get('schema_version'))}",
                     data.line_of("schema_version") if "schema_version" in data else 1, path)
    groups = []
    for op in ("gemm", "conv"):
        entries = data.get(op, LineList())
        if entries is None:
            continue
        if not isinstance(entries, LineList):
            raise _error(f"'{op}' must be a list of groups", data.line_of(op), path)
        for index, group in enumerate(entries):
            groups.append(_parse_group(op, group, index, path, entries.line_of(index), max_variants))
    return Manifest(path, tuple(groups))


def load_manifest(path, max_variants=DEFAULT_MAX_VARIANTS) -> Manifest:
    return parse_manifest(read_source(path, "manifest"), str(path), max_variants)


def group_size(group: Group) -> int:
    """How many variants the group expands to over all its targets (built or only checked),
    from the lengths of its lists: nothing is materialized."""
    axes = math.prod(len(values) for _, values in group.axes)
    return sum(axes * len(group.knobs_for(backend_of(target))) for target, _ in group.targets
               if backend_of(target).implemented)


def check_size(manifest: Manifest, max_variants=DEFAULT_MAX_VARIANTS) -> int:
    """The manifest's variant count; over `max_variants` a ManifestError naming the largest
    group's line, the count, the cap and how to raise it."""
    sizes = [(group_size(group), group) for group in manifest.groups]
    total = sum(size for size, _ in sizes)
    if max_variants is not None and total > max_variants:
        size, group = max(sizes, key=lambda sg: sg[0])
        where = f"the manifest expands to {total:,} variants (its largest group, {show(group.label)} here, to {size:,});"
        raise ManifestError(f"{where} more than the cap of {max_variants:,}; narrow it, or {CAP_HINT}",
                            group.line, manifest.path)
    return total


def _problems(knobs, op, values, target, lines, path):
    """families.problems for one variant; a family tripping over a hostile value (a huge
    integer, say) is a manifest error at the tile's line, not a traceback."""
    try:
        return families.problems(knobs, op, values["dtype"], values.get("layout"),
                                 values.get("variant", values.get("direction")), values["tile"], target)
    except (ValueError, TypeError, ArithmeticError) as err:
        return [f"cannot check this variant: {show(str(err))}"]


_TILE_WORD = re.compile(r"(?<!micro )\btile\b", re.IGNORECASE)


def _problem_line(group, backend, knobs, knob_line, values, target, lines, path):
    """The line to blame for a variant the backend cannot build. The `tile:` line where the
    tile itself is at fault: the group names no knobs, or (cpu) a problem about the tile is one
    the default micro tile has with this tile too (`tile M 50 is not a multiple of the micro
    tile rows 6`, `tile M 2000 not in 1..1024`). Otherwise the line of the knobs
    (`micro_tile:`; on cuda and hip always the knobs' line, as the knobs decide what a tile
    means there)."""
    if knob_line == group.line:
        return lines["tile"]
    default = families.default_knobs(backend, group.op)
    if backend is not Backend.CPU or type(default) is not type(knobs):
        return knob_line  # cuda, hip: the knobs (schedule, cluster, algorithm) decide what a tile means
    shared = set(_problems(default, group.op, values, target, lines, path))
    mine = _problems(knobs, group.op, values, target, lines, path)
    if any(p in shared and _TILE_WORD.search(p) for p in mine):
        return lines["tile"]
    return knob_line


def _group_configs(group: Group, targets, path, reject=None):
    """Every variant of the group for the targets being built; the variants of its other
    targets are checked too (a manifest error is an error on every machine). With
    `reject(description, reasons)` given (tile-engine sweeps), a variant a backend cannot
    build is reported there instead of raising."""
    for target, target_line in group.targets:
        backend = backend_of(target)
        if not backend.implemented:
            if target in targets:
                raise _error(f"target '{target}': the {backend.key} backend is not part of this version",
                             target_line, path)
            continue
        names = [name for name, _ in group.axes]
        for combo in itertools.product(*(values for _, values in group.axes),
                                       group.knobs_for(backend)):
            values = {name: v for name, (v, _) in zip(names, combo)}
            lines = {name: line for name, (_, line) in zip(names, combo)}
            knobs, knob_line = combo[-1]
            problems = _problems(knobs, group.op, values, target, lines, path)
            if problems and reject is not None:
                if target in targets:
                    what = " ".join(str(getattr(v, "key", "")) for k, v in values.items() if k != "tile").split()
                    reject(f"{' '.join(what)} tile {list(values['tile'])} {knobs.token} {target}", problems)
                continue
            if problems:
                line = _problem_line(group, backend, knobs, knob_line, values, target, lines, path)
                what = " ".join(str(getattr(v, "key", "")) for k, v in values.items() if k != "tile").split()
                raise _error(f"{backend.key} backend cannot build {' '.join(what)} tile {list(values['tile'])} "
                             f"with {knobs.token} for {target}: {'; '.join(problems)}", line, path)
            if target not in targets:
                continue
            if group.op == "gemm":
                variant = values["variant"]
                reduction = values["reduction"] if variant is GemmVariant.STREAM_K else None
                yield GemmKernelConfig(values["dtype"], values["layout"], variant, reduction,
                                       values["tile"], knobs, target)
            else:
                yield ConvKernelConfig(values["direction"], values["layout"], values["dtype"],
                                       values["tile"], knobs, target)


def matches(name: str, kernel_filter: str | None) -> bool:
    """True when the name matches the comma-separated glob list (empty: everything)."""
    if not kernel_filter:
        return True
    return any(fnmatch.fnmatchcase(name, pattern.strip())
               for pattern in kernel_filter.split(",") if pattern.strip())


@dataclass(frozen=True)
class Expansion:
    configs: tuple  # sorted by name, unique
    duplicates: tuple  # names produced more than once (kept once)
    filtered_out: int


def expand(manifest: Manifest, targets, kernel_filter: str | None = None, reject=None,
           max_variants=DEFAULT_MAX_VARIANTS) -> Expansion:
    """The cartesian product of every group, for the given targets, filtered, sorted, unique.
    More than `max_variants` variants (None: no cap) is a ManifestError, raised before any
    product is taken."""
    targets = tuple(targets)
    check_size(manifest, max_variants)
    seen, duplicates, filtered = {}, [], 0
    for group in manifest.groups:
        for config in _group_configs(group, targets, manifest.path, reject):
            if not matches(config.name, kernel_filter):
                filtered += 1
                continue
            if config.name in seen:
                duplicates.append(config.name)
                continue
            seen[config.name] = config
    configs = tuple(seen[name] for name in sorted(seen))
    return Expansion(configs, tuple(sorted(set(duplicates))), filtered)
