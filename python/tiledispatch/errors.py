"""Exceptions carrying the C ABI's status code and the library's message."""
from __future__ import annotations


OK, ERROR, UNSUPPORTED, REJECTED = 0, -1, -2, -3


class TileDispatchError(RuntimeError):
    """A failed call. `status` is the ABI code (-1, -2 or -3), `message` the reason."""

    status = ERROR

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.message = message
        if status is not None:
            self.status = status

    def __str__(self) -> str:
        return f"{self.message} (status {self.status})"


class InvalidArgumentError(TileDispatchError, ValueError):
    """Status -1: a bad argument, a device error or an exception caught at the boundary."""

    status = ERROR


class UnsupportedProblemError(TileDispatchError):
    """Status -2: no kernel supports the problem."""

    status = UNSUPPORTED


class KernelRejectedError(TileDispatchError):
    """Status -3: the chosen kernel rejected the arguments."""

    status = REJECTED


_BY_STATUS = {ERROR: InvalidArgumentError, UNSUPPORTED: UnsupportedProblemError,
              REJECTED: KernelRejectedError}


def raise_for(status: int, message: str) -> None:
    """Raises the exception for a non-zero status."""
    if status == OK:
        return
    raise _BY_STATUS.get(status, TileDispatchError)(message or f"call failed with status {status}", status)


def library_load_message(path, err: BaseException, abi_version: int) -> str:
    """The message for a kernel library that cannot be loaded or lacks the package's functions:
    names the file, says what is wrong and what to do. A symbol missing (dlopen's "undefined
    symbol", or ctypes' AttributeError for a function this package declares) means the library
    and the package come from different builds (another ABI version, or libraries swapped)."""
    detail = str(err)
    reinstall = "reinstall tiledispatch (pip install --force-reinstall . from the source tree)"
    if isinstance(err, AttributeError) or "undefined symbol" in detail or "symbol not found" in detail:
        return (f"cannot load kernel library {path}: {detail}. The library does not match this tiledispatch "
                f"package (ABI version {abi_version}): it comes from another build or version, or the installed "
                f"libraries were swapped or mixed, so a symbol is missing; {reinstall} so that the package "
                "and its libraries come from one build")
    if any(s in detail for s in ("invalid ELF header", "wrong ELF class", "file too short", "not a dynamic")):
        return (f"cannot load kernel library {path}: {detail}. The file is not a shared library for this "
                f"machine (damaged, or built for another platform); {reinstall}")
    return f"cannot load kernel library {path}: {detail}"
