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
