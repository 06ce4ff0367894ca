"""`Dispatcher(op, target)`: the registry's kernels for one library, selection and runs."""
from __future__ import annotations

import ctypes

import numpy as np

from . import _ffi, selection
from ._registry import registry
from .arrays import DeviceArray, is_device_array, numpy_dtype, pointer
from .codegen import Direction
from .errors import InvalidArgumentError, UnsupportedProblemError
from .problems import ConvProblem, GemmProblem

PROBLEM_TYPE = {"gemm": GemmProblem, "conv": ConvProblem}


def _span(array: np.ndarray) -> int:
    """Whole elements from an array's first element to the end of its last, strides (in
    bytes, whatever the element size) included."""
    if array.size == 0:
        return 0
    return (array.itemsize + sum((n - 1) * st for n, st in zip(array.shape, array.strides))) // array.itemsize


def _written(problem) -> int:
    """The index (of a, b, c) of the tensor a run writes: C for gemm; by direction for conv."""
    if isinstance(problem, GemmProblem):
        return 2
    return {Direction.FWD: 2, Direction.BWD_DATA: 0, Direction.BWD_WEIGHT: 1}[problem.direction]


def _check_gemm_layout(problem: GemmProblem, arrays, names) -> None:
    """A 2-D numpy operand of its logical shape ((M, K), (K, N), (M, N)) must be laid out as the
    problem says (row- or column-major) with the problem's leading dimension. Other shapes (flat
    buffers, the transposed storage of a column-major operand) are checked by their span only;
    a square operand is ambiguous and not checked."""
    M, N, K, lay = problem.M, problem.N, problem.K, problem.layout
    specs = ((M, K, lay.a_row, problem.lda or (K if lay.a_row else M)),
             (K, N, lay.b_row, problem.ldb or (N if lay.b_row else K)),
             (M, N, True, problem.ldc or N))
    for array, name, (rows, cols, row_major, ld) in zip(arrays, names, specs):
        if not isinstance(array, np.ndarray) or array.ndim != 2 or array.shape != (rows, cols) or rows == cols:
            continue
        item = array.itemsize
        s0, s1 = array.strides
        want0, want1 = (ld * item, item) if row_major else (item, ld * item)
        if (rows > 1 and s0 != want0) or (cols > 1 and s1 != want1):
            order = "row" if row_major else "column"
            raise InvalidArgumentError(
                f"{name} ({rows}x{cols}, strides {array.strides}) is not {order}-major with leading dimension "
                f"{ld} as the problem's layout {lay.key} says")


def _address(value, what: str) -> int | None:
    """A pointer from a numpy array (host) or an int (raw address)."""
    if value is None:
        return None
    if isinstance(value, np.ndarray):
        if any(st < 0 and n > 1 for st, n in zip(value.strides, value.shape)):  # size 1: never stepped
            raise InvalidArgumentError(f"{what} has a negative stride (copy it first)")
        return pointer(value)
    if isinstance(value, int):
        return value
    raise TypeError(f"{what}: expected a numpy array or an integer address, got {type(value).__name__}")


class Dispatcher:
    """The kernels of one (op, target) library.

    >>> d = Dispatcher("gemm")
    >>> d.select(GemmProblem(512, 512, 512))
    """

    def __init__(self, op: str = "gemm", target: str | None = None):
        if op not in PROBLEM_TYPE:
            raise ValueError(f"unknown op '{op}' (expected gemm or conv)")
        reg = registry()
        self.op = op
        self.target = target or reg.default_target(op)
        reg.library(op, self.target)  # fails now, with the list of what is built, if absent

    def __repr__(self) -> str:
        return f"Dispatcher(op={self.op!r}, target={self.target!r}, kernels={len(self.kernels)})"

    @property
    def lib(self) -> _ffi.Library:
        return _ffi.library(self.op, self.target)

    @property
    def kernels(self) -> list:
        """The registered kernel configs (GemmKernelConfig / ConvKernelConfig), by name."""
        return registry().kernels(self.op, self.target)

    def _problem(self, problem):
        expected = PROBLEM_TYPE[self.op]
        if not isinstance(problem, expected):
            raise TypeError(f"a {self.op} dispatcher takes a {expected.__name__}, got {type(problem).__name__}")
        return ctypes.byref(problem.to_c())

    @staticmethod
    def _kernel(kernel) -> bytes | None:
        if kernel is None:
            return None
        name = kernel if isinstance(kernel, str) else getattr(kernel, "name", None)
        if not isinstance(name, str):
            raise InvalidArgumentError(f"kernel must be a kernel name (a str) or a kernel config, got {kernel!r}")
        return name.encode()

    def is_supported(self, problem, kernel=None) -> bool:
        fn = self.lib.td_gemm_is_supported if self.op == "gemm" else self.lib.td_conv_is_supported
        supported = self.lib.check(fn(self._problem(problem), self._kernel(kernel))) == 1
        if kernel is None:
            selection.warn_messages(self.lib)
        return supported

    def select(self, problem) -> str:
        """The kernel the library picks (the C ABI's td_gemm_select / td_conv_select): the
        tuning tables' pick where they give one (bindings/tuning.hpp: the measured best where a
        table holds the problem, else the cost model calibrated by the nearest entries'
        measurements), else the cost model's; UnsupportedProblemError if no kernel supports
        the problem. Messages about the tables come as RuntimeWarnings."""
        fn = self.lib.td_gemm_select if self.op == "gemm" else self.lib.td_conv_select
        try:
            return self.lib.name_call(fn, self._problem(problem))
        finally:
            selection.warn_messages(self.lib)

    def tuned(self, problem) -> str | None:
        """The tuning tables' pick alone; None without tables, entries of the problem's kind
        or a kernel of theirs that applies."""
        fn = self.lib.td_gemm_tuned if self.op == "gemm" else self.lib.td_conv_tuned
        try:
            return self.lib.name_call(fn, self._problem(problem)) or None
        finally:
            selection.warn_messages(self.lib)

    def model_select(self, problem) -> str:
        """The cost model's pick alone, the tuning tables not read."""
        fn = self.lib.td_gemm_model_select if self.op == "gemm" else self.lib.td_conv_model_select
        return self.lib.name_call(fn, self._problem(problem))

    def cost(self, problem, kernel) -> float | None:
        """The library's cost-model prediction for a kernel on a problem (arbitrary units,
        lower is faster); None when the kernel rejects the problem."""
        fn = self.lib.td_gemm_cost if self.op == "gemm" else self.lib.td_conv_cost
        value = ctypes.c_double(0.0)
        status = fn(self._problem(problem), self._kernel(kernel), ctypes.byref(value))
        if status == -3:  # TD_REJECTED: the kernel refuses the problem (an unknown name raises)
            return None
        self.lib.check(status)
        return value.value

    def workspace_size(self, problem, kernel=None) -> int:
        fn = self.lib.td_gemm_workspace_size if self.op == "gemm" else self.lib.td_conv_workspace_size
        size = ctypes.c_size_t(0)
        self.lib.check(fn(self._problem(problem), self._kernel(kernel), ctypes.byref(size)))
        return size.value

    @property
    def on_host(self) -> bool:
        """True when the kernels read host memory (the cpu target)."""
        return self.target == "cpu"

    def run(self, problem, a, b, c, *, kernel=None, workspace=None, workspace_bytes=None,
            stream=None, timed: bool = True, epilogue: dict | None = None) -> float:
        """Runs one problem; returns the kernel time in ms (0.0 with timed=False, which
        does not wait for a GPU kernel to finish).

        gemm: (A, B, C); conv: (input, weight, output) by role: fwd writes output,
        bwd_data writes input, bwd_weight writes weight. numpy arrays (on a GPU target:
        copied to the device and back), CUDA arrays of torch/cupy/numba, or integer
        addresses (device memory on a GPU target). stream: a CUDA stream handle (int);
        None takes the current stream of a torch/cupy argument, else the default stream.
        epilogue (gemm): the operands the problem's epilogue fields ask for, by the names of
        TdGemmEpilogue (c, bias, aux, row_scale, col_scale, scale_a, scale_b): arrays or
        addresses, run through td_gemm_run_ex (td.gemm checks their shapes; here they are
        passed as they are).
        """
        names = ("A", "B", "C") if self.op == "gemm" else ("input", "weight", "output")
        c_problem = self._problem(problem)
        values = (a, b, c)
        written = _written(problem)
        in_type = numpy_dtype(problem.dtype)
        out_type = numpy_dtype(problem.out if isinstance(problem, GemmProblem) else problem.dtype.out)
        for i, (value, name, need) in enumerate(zip(values, names, problem.required_elements())):
            if not isinstance(value, np.ndarray):
                continue
            want = out_type if i == written else in_type
            if value.dtype != want:
                raise InvalidArgumentError(f"{name} holds {value.dtype}, the {problem.dtype.key} problem needs {want}")
            if _span(value) < need:
                raise InvalidArgumentError(f"{name} spans {_span(value)} elements, the problem needs {need}")
        if isinstance(problem, GemmProblem):
            _check_gemm_layout(problem, values, names)
        out, out_name = values[written], names[written]
        if isinstance(out, np.ndarray):
            if not out.flags.writeable:
                raise InvalidArgumentError(f"out is read-only: {out_name} is written and must be a writeable array")
            for i, (value, name) in enumerate(zip(values, names)):
                if i != written and isinstance(value, np.ndarray) and np.may_share_memory(out, value) \
                        and np.shares_memory(out, value):
                    raise InvalidArgumentError(f"{out_name} (written) overlaps {name}: in-place is not supported")
        if is_device_array(out):
            written_range = DeviceArray(out)
            for i, (value, name) in enumerate(zip(values, names)):
                if i != written and is_device_array(value) and written_range.overlaps(DeviceArray(value)):
                    raise InvalidArgumentError(f"{out_name} (written) overlaps {name}: in-place is not supported")
        if isinstance(workspace, np.ndarray) and workspace_bytes is not None and workspace.nbytes < workspace_bytes:
            raise InvalidArgumentError(f"workspace holds {workspace.nbytes} bytes, workspace_bytes says {workspace_bytes}")
        hosted = [isinstance(v, np.ndarray) for v in values]
        time_ms = ctypes.c_float(0.0)
        time_ref = ctypes.byref(time_ms) if timed else None
        if any(hosted) and not self.on_host:
            if not all(hosted):
                raise InvalidArgumentError("mixing host (numpy) and device arrays in one call")
            if epilogue and any(v is not None for v in epilogue.values()):
                raise UnsupportedProblemError(f"target {self.target}: epilogue operands on numpy arrays run on the "
                                              "cpu target only (target='cpu')")
            fn = self.lib.td_gemm_run_host if self.op == "gemm" else self.lib.td_conv_run_host
            status = fn(c_problem, self._kernel(kernel), *(_address(v, n) for v, n in zip(values, names)), time_ref)
            return self._ran(status, kernel, time_ms)
        ptrs = []
        for value, name in zip(values, names):
            if is_device_array(value):
                if self.on_host:
                    raise InvalidArgumentError(f"{name} is a CUDA array but target {self.target} runs on the host")
                array = DeviceArray(value)
                if stream is None:
                    stream = array.stream()
                ptrs.append(array.ptr)
            else:
                ptrs.append(_address(value, name))
        ws_ptr = _address(workspace, "workspace")
        if workspace_bytes is None:
            workspace_bytes = workspace.nbytes if isinstance(workspace, np.ndarray) else 0
        if epilogue is not None and self.op == "gemm":
            unknown = set(epilogue) - {f for f, _ in _ffi.TdGemmEpilogue._fields_}
            if unknown:
                raise InvalidArgumentError(f"unknown epilogue operands: {', '.join(sorted(unknown))}")
            ep = _ffi.TdGemmEpilogue(**{name: _address(value, name) for name, value in epilogue.items()})
            status = self.lib.td_gemm_run_ex(c_problem, self._kernel(kernel), *ptrs, ctypes.byref(ep), ws_ptr,
                                             workspace_bytes, stream, time_ref)
            return self._ran(status, kernel, time_ms)
        fn = self.lib.td_gemm_run if self.op == "gemm" else self.lib.td_conv_run
        status = fn(c_problem, self._kernel(kernel), *ptrs, ws_ptr, workspace_bytes, stream, time_ref)
        return self._ran(status, kernel, time_ms)

    def _ran(self, status: int, kernel, time_ms) -> float:
        """After a run: the tables' messages where the library chose the kernel, then the status."""
        if kernel is None:
            selection.warn_messages(self.lib, stacklevel=4)
        self.lib.check(status)
        return time_ms.value

    def export_registry_json(self) -> str:
        fn = (self.lib.dispatcher_export_registry_json if self.op == "gemm"
              else self.lib.conv_dispatcher_export_registry_json)
        return fn().decode()


_CACHED: dict = {}


def cached_dispatcher(op: str, target: str | None = None) -> "Dispatcher":
    """A Dispatcher per (op, target), made once; target None: this machine's default for op."""
    key = (op, target)
    d = _CACHED.get(key)
    if d is None:
        d = _CACHED[key] = Dispatcher(op, target or registry().default_target(op))
    return d
