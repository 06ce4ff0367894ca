"""ctypes layer: the C ABI's structs and functions, declared once, libraries loaded lazily.

Every exported function's argtypes/restype are declared here beside the wrapper that
uses them; non-zero statuses become exceptions carrying the library's message.
"""
from __future__ import annotations

import ctypes
import functools
import json
import sys
import threading
from importlib import resources

from .codegen import ABI_VERSION, abi
from .errors import UNSUPPORTED, TileDispatchError, library_load_message, raise_for
from ._fingerprint import identity
from ._registry import kernels_dir, registry, with_library_contents

c_i64, c_i32, c_int, c_char_p, c_void_p, c_size_t, c_float, c_double = (
    ctypes.c_int64, ctypes.c_int32, ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p,
    ctypes.c_size_t, ctypes.c_float, ctypes.c_double)


# The ABI's structs, from the one table the C header is rendered from (codegen/abi.py).
TdGemmProblem = abi.ctypes_struct("TdGemmProblem")
ConvProblemC = abi.ctypes_struct("ConvProblemC")
TdConvProblem = abi.ctypes_struct("TdConvProblem", {"ConvProblemC": ConvProblemC})
TdOptions = abi.ctypes_struct("TdOptions")
TdGemmEpilogue = abi.ctypes_struct("TdGemmEpilogue")
TdGemmGroup = abi.ctypes_struct("TdGemmGroup", {"TdGemmEpilogue": TdGemmEpilogue})


_P = ctypes.POINTER
_COMMON = {
    "td_abi_version": ([], c_int),
    "td_library_target": ([], c_char_p),
    "td_library_op": ([], c_char_p),
    "td_last_error": ([], c_char_p),
    "td_tuning_messages": ([], c_char_p),
    "td_tuning_set_device": ([c_char_p], c_int),
    "td_get_options": ([_P(TdOptions)], c_int),
    "td_set_options": ([_P(TdOptions)], c_int),
}
_GEMM = {
    "dispatcher_init": ([], c_int),
    "dispatcher_is_supported": ([c_i64, c_i64, c_i64], c_int),
    "dispatcher_select_kernel": ([c_i64, c_i64, c_i64, c_char_p, c_int], c_int),
    "dispatcher_run_gemm": ([c_void_p, c_void_p, c_void_p, c_i64, c_i64, c_i64, _P(c_float)], c_int),
    "dispatcher_get_kernel_count": ([], c_int),
    "td_legacy_dtype": ([], c_int),
    "dispatcher_export_registry_json": ([], c_char_p),
    "dispatcher_cleanup": ([], None),
    "td_gemm_is_supported": ([_P(TdGemmProblem), c_char_p], c_int),
    "td_gemm_select": ([_P(TdGemmProblem), c_char_p, c_size_t], c_int),
    "td_gemm_tuned": ([_P(TdGemmProblem), c_char_p, c_size_t], c_int),
    "td_gemm_model_select": ([_P(TdGemmProblem), c_char_p, c_size_t], c_int),
    "td_gemm_cost": ([_P(TdGemmProblem), c_char_p, _P(c_double)], c_int),
    "td_gemm_workspace_size": ([_P(TdGemmProblem), c_char_p, _P(c_size_t)], c_int),
    "td_gemm_run": ([_P(TdGemmProblem), c_char_p, c_void_p, c_void_p, c_void_p, c_void_p, c_size_t,
                     c_void_p, _P(c_float)], c_int),
    # the problem as a plain address (c_void_p converts an int faster than a pointer type)
    "td_gemm_launch": ([c_void_p, c_char_p, c_void_p, c_void_p, c_void_p, c_void_p], c_int),
    "td_gemm_run_host": ([_P(TdGemmProblem), c_char_p, c_void_p, c_void_p, c_void_p, _P(c_float)], c_int),
    "td_gemm_run_ex": ([_P(TdGemmProblem), c_char_p, c_void_p, c_void_p, c_void_p, _P(TdGemmEpilogue), c_void_p,
                        c_size_t, c_void_p, _P(c_float)], c_int),
    "td_gemm_grouped_run": ([_P(TdGemmProblem), c_char_p, _P(TdGemmGroup), c_i64, c_void_p, _P(c_float)], c_int),
    "td_gemm_grouped_run_ex": ([_P(TdGemmProblem), c_char_p, _P(TdGemmGroup), c_i64, c_void_p, c_size_t, c_void_p,
                                _P(c_float)], c_int),
    "td_gemm_grouped_select": ([_P(TdGemmProblem), _P(TdGemmGroup), c_i64, c_char_p, c_size_t], c_int),
    "td_gemm_grouped_workspace_size": ([_P(TdGemmProblem), c_char_p, _P(TdGemmGroup), c_i64, _P(c_size_t)], c_int),
}
_CONV = {
    "conv_dispatcher_init": ([], c_int),
    "conv_dispatcher_is_supported": ([_P(ConvProblemC)], c_int),
    "conv_dispatcher_select_kernel": ([_P(ConvProblemC), c_char_p, c_int], c_int),
    "conv_dispatcher_run": ([c_void_p, c_void_p, c_void_p, _P(ConvProblemC), _P(c_float)], c_int),
    "conv_dispatcher_get_kernel_count": ([], c_int),
    "conv_dispatcher_export_registry_json": ([], c_char_p),
    "conv_dispatcher_cleanup": ([], None),
    "td_conv_is_supported": ([_P(TdConvProblem), c_char_p], c_int),
    "td_conv_select": ([_P(TdConvProblem), c_char_p, c_size_t], c_int),
    "td_conv_tuned": ([_P(TdConvProblem), c_char_p, c_size_t], c_int),
    "td_conv_model_select": ([_P(TdConvProblem), c_char_p, c_size_t], c_int),
    "td_conv_cost": ([_P(TdConvProblem), c_char_p, _P(c_double)], c_int),
    "td_conv_workspace_size": ([_P(TdConvProblem), c_char_p, _P(c_size_t)], c_int),
    "td_conv_run": ([_P(TdConvProblem), c_char_p, c_void_p, c_void_p, c_void_p, c_void_p, c_size_t,
                     c_void_p, _P(c_float)], c_int),
    "td_conv_run_host": ([_P(TdConvProblem), c_char_p, c_void_p, c_void_p, c_void_p, _P(c_float)], c_int),
}
SIGNATURES = {"gemm": {**_COMMON, **_GEMM}, "conv": {**_COMMON, **_CONV}}
NAME_BUFFER = 256


class Library:
    """One loaded kernel library, with every function declared."""

    def __init__(self, op: str, target: str, path: str, handle: ctypes.CDLL):
        self.op, self.target, self.path, self._lib = op, target, path, handle
        for name, (argtypes, restype) in SIGNATURES[op].items():
            fn = getattr(handle, name)
            fn.argtypes, fn.restype = argtypes, restype
        version = handle.td_abi_version()
        if version != ABI_VERSION:
            raise TileDispatchError(f"{path} speaks ABI {version}, this package {ABI_VERSION}; reinstall")
        got = (handle.td_library_op().decode(), handle.td_library_target().decode())
        if got != (op, target):
            raise TileDispatchError(f"{path} holds {got[0]}/{got[1]}, expected {op}/{target}")

    def __getattr__(self, name):
        return getattr(self._lib, name)

    def last_error(self) -> str:
        return (self._lib.td_last_error() or b"").decode(errors="replace")

    def check(self, status: int) -> int:
        """Raises for a negative status (with this thread's message); returns it otherwise."""
        if status < 0:
            message = self.last_error()
            raise_for(status, with_library_contents(message) if status == UNSUPPORTED else message)
        return status

    def name_call(self, fn, *args) -> str:
        buf = ctypes.create_string_buffer(NAME_BUFFER)
        self.check(fn(*args, buf, NAME_BUFFER))
        return buf.value.decode()


_lock = threading.Lock()
_loaded: list = []  # every Library loaded in this process
_options = None  # the TdOptions set_options gave every library (None: the libraries' defaults)


def _torch_vendor_libraries_first() -> None:
    """Where the process imported torch, has it load its own cuDNN before a vendor kernel
    opens one (torch loads it lazily): the vendor kernels then take torch's copy, and a
    system cuDNN of another version cannot shadow the one torch was built against."""
    torch = sys.modules.get("torch")
    if torch is None:
        return
    try:
        torch.backends.cudnn.version()
    except Exception:  # a torch without CUDA, a broken install: the kernels find their own
        pass


@functools.lru_cache(maxsize=None)
def _load(op: str, target: str) -> Library:
    info = registry().library(op, target)
    entry = kernels_dir() / info["file"]
    if target != "cpu":
        _torch_vendor_libraries_first()
    with _lock:
        # as_file keeps a real path for a library inside a zip; a plain install returns it as is.
        with resources.as_file(entry) as path:
            if not path.exists():
                raise TileDispatchError(f"kernel library {path} is listed in the registry but missing")
            try:
                handle = ctypes.CDLL(str(path))
                lib = Library(op, target, str(path), handle)  # AttributeError: a function missing
            except (OSError, AttributeError) as err:
                raise TileDispatchError(library_load_message(path, err, ABI_VERSION)) from None
            if _options is not None:
                lib.check(lib.td_set_options(ctypes.byref(_options)))
            # the tuning tables' header check: a table measured on another device is ignored
            lib.check(lib.td_tuning_set_device(json.dumps(identity(target)).encode()))
            _loaded.append(lib)
            return lib


def library(op: str, target: str) -> Library:
    """The loaded library for (op, target); loaded on first use."""
    return _load(op, target)


def set_options(options: TdOptions) -> None:
    """Gives every library loaded now, and each one loaded later, these run-time options."""
    global _options
    with _lock:
        for lib in _loaded:
            lib.check(lib.td_set_options(ctypes.byref(options)))
        _options = TdOptions(*(getattr(options, field) for field, _ in TdOptions._fields_))


def options() -> TdOptions | None:
    """The options set_options gave the libraries (a copy), or None where it was never called."""
    with _lock:
        return None if _options is None else TdOptions(*(getattr(_options, f) for f, _ in TdOptions._fields_))
