"""The generated registry index (`_kernels/registry.json`), found through importlib.resources."""
from __future__ import annotations

import functools
import json
import os
import pathlib
import re
import warnings
from importlib import resources

from .codegen import ABI_VERSION, SCHEMA_VERSION, DType, config_from_name
from ._cuda import device_targets
from .errors import TileDispatchError

KERNELS_DIR = "_kernels"


def kernels_dir():
    """A Traversable of the installed `_kernels` folder (works in editable installs), or
    the folder named by TILEDISPATCH_KERNELS_DIR (a build directory: the tile engine's
    workers load the libraries of their scratch build this way)."""
    override = os.environ.get("TILEDISPATCH_KERNELS_DIR")
    if override:
        return pathlib.Path(override)
    return resources.files(__package__) / KERNELS_DIR


REINSTALL = "reinstall tiledispatch (pip install --force-reinstall . from the source tree)"


class Registry:
    """What this installation holds: its libraries and their kernels."""

    def __init__(self, data: dict, source: str):
        if not isinstance(data, dict):
            raise TileDispatchError(f"{source}: the kernel registry is malformed (a JSON {type(data).__name__}, "
                                    f"not an object); {REINSTALL}")
        if data.get("schema_version") != SCHEMA_VERSION:
            raise TileDispatchError(f"{source}: registry schema {data.get('schema_version')}, "
                                    f"this package reads {SCHEMA_VERSION}; reinstall tiledispatch")
        if data.get("abi_version") != ABI_VERSION:
            raise TileDispatchError(f"{source}: kernels built for ABI {data.get('abi_version')}, "
                                    f"this package speaks {ABI_VERSION}; reinstall tiledispatch")
        self.source = source
        try:
            self.libraries = data["libraries"]
            self.kernel_dicts = data["kernels"]
            if not isinstance(self.libraries, list) or not isinstance(self.kernel_dicts, list):
                raise TypeError("'libraries' and 'kernels' must be lists")
            for lib in self.libraries:
                if not isinstance(lib, dict) or not all(isinstance(lib.get(key), str) for key in ("op", "target", "file")):
                    raise TypeError(f"library entry {lib!r} lacks op, target or file")
            self.configs = [config_from_name(k["name"]) for k in self.kernel_dicts]
        except KeyError as err:
            raise TileDispatchError(f"{source}: the kernel registry is malformed (no {err} key); {REINSTALL}") from None
        except (TypeError, ValueError) as err:
            raise TileDispatchError(f"{source}: the kernel registry is malformed ({err}); {REINSTALL}") from None

    @property
    def targets(self) -> list[str]:
        return sorted({lib["target"] for lib in self.libraries})

    def library(self, op: str, target: str) -> dict:
        for lib in self.libraries:
            if lib["op"] == op and lib["target"] == target:
                return lib
        built = ", ".join(f"{lib['op']}/{lib['target']}" for lib in self.libraries) or "nothing"
        raise TileDispatchError(
            f"this installation has no {op} library for target '{target}' (it has: {built}); "
            f"rebuild with -Dgpu_targets={target} and a manifest with {op} kernels for it")

    def kernels(self, op: str | None = None, target: str | None = None) -> list:
        return [c for c in self.configs
                if (op is None or c.op == op) and (target is None or c.target == target)]

    def default_target(self, op: str) -> str:
        """TILEDISPATCH_TARGET if set, else the library of a GPU this process sees, else cpu.
        A GPU without a library here is reported once (warning), not silently ignored."""
        wanted = os.environ.get("TILEDISPATCH_TARGET")
        if wanted:
            return wanted
        have = [lib["target"] for lib in self.libraries if lib["op"] == op]
        if not have:
            raise TileDispatchError(f"this installation has no {op} library at all")
        gpus = device_targets()
        for gpu in gpus:
            if gpu in have:
                return gpu
        if gpus and (op, gpus) not in _warned:
            _warned.add((op, gpus))
            warnings.warn(f"found a {', '.join(gpus)} GPU, but this installation has no {op} library for it "
                          f"(it has: {', '.join(have)}); running on {'cpu' if 'cpu' in have else have[0]}. "
                          f"Rebuild with -Dgpu_targets=cpu,{gpus[0]}", RuntimeWarning, stacklevel=3)
        return "cpu" if "cpu" in have else have[0]


_warned: set = set()


@functools.lru_cache(maxsize=None)
def registry() -> Registry:
    path = kernels_dir() / "registry.json"
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise TileDispatchError(f"the kernel registry {path} is not text ({err}): the installation is damaged; "
                                f"{REINSTALL}") from None
    except (FileNotFoundError, OSError):
        raise TileDispatchError(
            f"no kernel registry at {path}: tiledispatch is not built/installed "
            "(pip install . from the source tree)") from None
    if not text.strip():
        raise TileDispatchError(f"the kernel registry {path} is empty (an interrupted or broken install); {REINSTALL}")
    try:
        data = json.loads(text)
    except ValueError as err:  # json.JSONDecodeError
        raise TileDispatchError(f"the kernel registry {path} is not valid JSON ({err}): the installation is "
                                f"damaged; {REINSTALL}") from None
    return Registry(data, str(path))


def in_order(values, order) -> list:
    """values' keys in the enum's order (fp32, fp16, bf16, ...)."""
    return [m.key for m in order if m in values]

def library_contents(op: str, target: str) -> str:
    """What the (op, target) library builds, for a message that knows no problem:
    'the gfx942 conv library builds fp16, bf16 kernels only' ('' where the registry has none)."""
    try:
        kernels = registry().kernels(op, target)
    except Exception:  # noqa: BLE001 - a hint only: the error it decorates is the one to raise
        return ""
    if not kernels:
        return ""
    return f"the {target} {op} library builds {', '.join(in_order({k.dtype for k in kernels}, DType))} kernels only"


# The library's message where no kernel supports a problem and none said why beyond its dtype
# or layout (bindings/dispatcher.hpp, rank): the problem's kind is not among the library's.
_NO_KERNEL = re.compile(r"^no (gemm|conv) kernel for target (\S+) supports this problem \(\d+ kernels registered\)$")


def with_library_contents(message: str) -> str:
    """A library's no-kernel message with what the library builds appended, where the library
    gave no reason beyond dtypes and layouts (e.g. a gfx942 conv library: fp16, bf16 only)."""
    match = _NO_KERNEL.match(message or "")
    contents = library_contents(match.group(1), match.group(2)) if match else ""
    return f"{message}: {contents}" if contents else message
