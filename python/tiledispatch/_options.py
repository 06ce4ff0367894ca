"""Run-time options of the kernel libraries (the ABI's TdOptions), for the whole process.

    td.set_options(tma=False)   # the conv kernels that move tiles by TMA copy them in software
    td.options()                # {'tma': False, 'pdl': True, 'multi_row': True}

- tma: the convolution kernels that can move their tiles by TMA do (False: software copies;
  the tensor-core depthwise bwd_weight, which moves its tiles by TMA only, then declines);
- pdl: kernels that support it are launched as programmatic dependents (False: the usual way);
- multi_row: the tiled_mma forward reuses each input fragment over several output rows
  (False: its one-row loop);
- vendor: selection weighs the vendor-library kernels (the cudnn and cublaslt families) with
  ours (False: our own kernels alone, as bench/zoo.py's "ours alone" column; a vendor kernel
  still runs when named).

Every option is on by default. set_options applies to every library loaded now and to each
one loaded later; the kernels read the options at each call.
"""
from __future__ import annotations

from . import _ffi
from .errors import InvalidArgumentError

FIELDS = tuple(field for field, _ in _ffi.TdOptions._fields_)
DEFAULTS = {field: True for field in FIELDS}


def options() -> dict:
    """The current options: {'tma': bool, 'pdl': bool, 'multi_row': bool, 'vendor': bool}."""
    current = _ffi.options()
    if current is None:
        return dict(DEFAULTS)
    return {field: bool(getattr(current, field)) for field in FIELDS}


def set_options(tma: bool | None = None, pdl: bool | None = None, multi_row: bool | None = None,
                vendor: bool | None = None) -> dict:
    """Sets the options given (None leaves one as it is); returns the previous options, so
    `td.set_options(**previous)` restores them. Each value is True / False (or 1 / 0);
    anything else raises InvalidArgumentError and changes nothing."""
    previous = options()
    wanted = dict(previous)
    for field, value in (("tma", tma), ("pdl", pdl), ("multi_row", multi_row), ("vendor", vendor)):
        if value is None:
            continue
        if not isinstance(value, int) or value not in (0, 1):
            raise InvalidArgumentError(f"option {field} is {value!r}; each option is True or False (1 or 0)")
        wanted[field] = bool(value)
    _ffi.set_options(_ffi.TdOptions(*(int(wanted[field]) for field in FIELDS)))
    return previous
