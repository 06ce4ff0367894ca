"""Command line of the generator, run by Meson:

  python -m codegen targets  --requested auto,cpu
  python -m codegen list     --manifest kernels.yaml --targets cpu [--filter GLOB] [--format meson]
                             [--max-variants N]  (also table, registry; default 20000)
  python -m codegen emit     --variant NAME -o OUT
  python -m codegen table    --manifest ... --targets ... --op gemm --target cpu -o OUT
  python -m codegen registry --manifest ... --targets ... -o registry.json
  python -m codegen abi      [--write | --check]   (the ABI headers rendered from abi.py)
  python -m codegen sources  --kind python|cost    (files Meson tracks / compiles, one a line)
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

from . import abi, families
from .emit import emit_source, write_if_changed
from .manifest import DEFAULT_MAX_VARIANTS, expand, load_manifest
from .configs import config_from_name
from .model import backend_of
from .registry import libraries, registry_json, table_source
from .targets import resolve
from .toolchain import VENDORS, cutlass_include_dirs, hip_toolchain, vendor_paths
from .yamlsrc import ManifestError


def _warn(message: str) -> None:
    print(f"tiledispatch: warning: {message}", file=sys.stderr)


def _expansion(args, warn=False):
    """The manifest's variants for the targets and filter, less those of the vendor families
    named by --without (their headers were not found: `vendors`), said once where warn."""
    manifest = load_manifest(args.manifest, args.max_variants)
    targets = [t for t in args.targets.split(",") if t]
    result = expand(manifest, targets, args.filter, max_variants=args.max_variants)
    without = {w for w in getattr(args, "without", "").split(",") if w}
    if without:
        kept = tuple(c for c in result.configs if c.family not in without)
        if warn:
            for family in sorted(without):
                dropped = sum(1 for c in result.configs if c.family == family)
                if dropped:
                    _warn(f"{dropped} {family} variants not built: the {family} headers were not found")
        result = dataclasses.replace(result, configs=kept)
    return result


def _selection_args(parser):
    parser.add_argument("--manifest", required=True, help="path of kernels.yaml")
    parser.add_argument("--targets", required=True, help="comma-separated build targets")
    parser.add_argument("--filter", default="", help="comma-separated globs over kernel names")
    parser.add_argument("--without", default="", help="comma-separated vendor families not to build "
                                                      "(their headers are missing)")
    parser.add_argument("--max-variants", type=_positive, default=DEFAULT_MAX_VARIANTS, metavar="N",
                        help="the most variants the manifest may expand to, over every target its groups "
                             f"name, before the filter (default {DEFAULT_MAX_VARIANTS}; Meson: -Dmax_variants=N)")


def _positive(text):
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


SHOWN_DUPLICATES = 5


def _warn_duplicates(names) -> None:
    """One warning for every name declared more than once (a few named, the rest counted)."""
    if not names:
        return
    shown = ", ".join(names[:SHOWN_DUPLICATES])
    more = f" and {len(names) - SHOWN_DUPLICATES} more" if len(names) > SHOWN_DUPLICATES else ""
    _warn(f"{len(names)} variant name{'s are' if len(names) > 1 else ' is'} declared more than once; "
          f"each built once: {shown}{more}")


ABI_HEADERS = {"abi_types.h": lambda: abi.render_c_types(families.FAMILIES),
               "kernel_info.hpp": abi.render_kernel_info}


def abi_header_dir() -> Path:
    """bindings/include/tiledispatch of the source tree this package was imported from."""
    return SOURCE_ROOT / "bindings" / "include" / "tiledispatch"


SOURCE_ROOT = Path(__file__).resolve().parents[3]


def _sources(kind: str) -> list:
    """python: the generator's modules (this package, its families, and the entry point the
    source root runs); cost: bindings/cost/models.cpp and each registered family's cost file."""
    if kind == "cost":
        named = {f"bindings/{family.COST_SOURCE}" for family in families.FAMILIES if family.COST_SOURCE}
        return ["bindings/cost/models.cpp"] + sorted(named)
    package = Path(__file__).resolve().parent
    modules = sorted(package.glob("*.py")) + sorted((package / "families").glob("*.py"))
    entry = [SOURCE_ROOT / "codegen" / "__init__.py", SOURCE_ROOT / "codegen" / "__main__.py",
             package.parent / "__init__.py"]
    return [str(p.relative_to(SOURCE_ROOT)) for p in entry + modules]


def _abi(write: bool, check: bool) -> int:
    stale = []
    for name, render in ABI_HEADERS.items():
        path, text = abi_header_dir() / name, render()
        if write:
            write_if_changed(path, text)
        elif check:
            if not path.is_file() or path.read_text(encoding="utf-8") != text:
                stale.append(str(path))
        else:
            print(text)
    for path in stale:
        print(f"tiledispatch codegen: {path} is not current: run python -m codegen abi --write", file=sys.stderr)
    return 1 if stale else 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m codegen", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("targets", help="resolve gpu_targets (auto: cpu plus the GPUs found)")
    p.add_argument("--requested", required=True)
    p.add_argument("--format", choices=("text", "meson"), default="text",
                   help="text: comma-separated; meson: a line 'TARGET BACKEND' per target")
    p = sub.add_parser("cutlass-include", help="print the CUTLASS include folders, one per line")
    p.add_argument("--explicit", default="")
    p = sub.add_parser("hip-toolchain", help="print the HIP compiler, then 'TARGET FLAGS...' per gfx target")
    p.add_argument("--targets", required=True)
    p.add_argument("--explicit", default="")
    p = sub.add_parser("vendors", help="locate the vendor libraries' headers: a tab-separated line 'NAME found "
                                       "INCLUDE LIBDIR' or 'NAME missing WHY' per vendor family (cudnn, cublaslt)")
    p = sub.add_parser("list", help="the variants the manifest expands to")
    _selection_args(p)
    p.add_argument("--format", choices=("text", "meson"), default="text")
    p = sub.add_parser("emit", help="write the source of one variant")
    p.add_argument("--variant", required=True)
    p.add_argument("-o", "--output", required=True)
    p = sub.add_parser("table", help="write the registration table of one library")
    _selection_args(p)
    p.add_argument("--op", required=True, choices=("gemm", "conv"))
    p.add_argument("--target", required=True)
    p.add_argument("-o", "--output", required=True)
    p = sub.add_parser("abi", help="render the ABI headers (bindings/include/tiledispatch/) from abi.py")
    p.add_argument("--write", action="store_true", help="write them into the source tree")
    p.add_argument("--check", action="store_true", help="exit 1 when a file in the source tree is not current")
    p = sub.add_parser("sources", help="print the generator's Python files (python) or the cost-model sources "
                                       "of the registered families (cost), relative to the source root")
    p.add_argument("--kind", required=True, choices=("python", "cost"))
    p = sub.add_parser("registry", help="write registry.json")
    _selection_args(p)
    p.add_argument("-o", "--output", required=True)
    args = parser.parse_args(argv)

    try:
        if args.command == "vendors":
            for name in VENDORS:
                try:
                    include, libdir = vendor_paths(name)
                    print(name, "found", include, libdir or "-", sep="\t")
                except ValueError as err:
                    print(name, "missing", err, sep="\t")
        elif args.command == "cutlass-include":
            print("\n".join(cutlass_include_dirs(args.explicit)))
        elif args.command == "hip-toolchain":
            compiler, flags = hip_toolchain([t for t in args.targets.split(",") if t], args.explicit)
            print(compiler)
            for target, extra in flags.items():
                print(target, *extra)
        elif args.command == "targets":
            resolved = resolve(args.requested.split(","), _warn)
            if args.format == "meson":
                for target in resolved:
                    print(target, backend_of(target).key)
            else:
                print(",".join(resolved))
        elif args.command == "list":
            result = _expansion(args, warn=True)
            if not result.configs:
                raise ManifestError(
                    f"no kernels for targets {args.targets}"
                    + (f" match filter '{args.filter}'" if args.filter else ""), None, args.manifest)
            _warn_duplicates(result.duplicates)
            for config in result.configs:
                if args.format == "meson":
                    print(config.op, config.target, config.backend.key, config.name)
                else:
                    print(config.name)
            if args.format == "text":
                libs = ", ".join(f"{op}/{target}" for op, target in libraries(result.configs))
                print(f"# {len(result.configs)} kernels ({libs}); {result.filtered_out} filtered out",
                      file=sys.stderr)
        elif args.command == "emit":
            config = config_from_name(args.variant)
            write_if_changed(args.output, emit_source(config))
        elif args.command == "table":
            write_if_changed(args.output, table_source(_expansion(args).configs, args.op, args.target))
        elif args.command == "sources":
            print("\n".join(_sources(args.kind)))
        elif args.command == "abi":
            return _abi(args.write, args.check)
        elif args.command == "registry":
            write_if_changed(args.output, registry_json(_expansion(args).configs))
    except ManifestError as err:
        print(f"{err}", file=sys.stderr)
        return 1
    except ValueError as err:
        print(f"tiledispatch codegen: error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
