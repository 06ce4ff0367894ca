"""What the vendor-library families (cudnn, cublaslt) share: no knobs (the vendor picks its
own algorithm per problem), tile 1x1x1 in the name, built only where the build found the
vendor's headers (toolchain.vendor_paths), and KernelInfo.vendor = 1 so that
`td.set_options(vendor=False)` leaves them out of selection ("ours alone")."""
from __future__ import annotations

from .base import Fixed
from .sm90 import target_problems


class Vendor(Fixed):
    """A family whose kernels call a vendor library. Set VENDOR_LIBRARY (the key
    toolchain.vendor_paths knows: cudnn, cublaslt) and TOKEN."""

    VENDOR_LIBRARY = ""
    NO_KNOBS_WHY = " (the vendor library picks its own algorithm for each problem)"

    def problems(self, op, dtype, layout, variant, tile, target) -> list[str]:
        out = list(target_problems(target))
        if tuple(tile) != (1, 1, 1):
            out.append(f"a {self.FAMILY} kernel has no tile of its own: write tile [1, 1, 1]")
        return out + self.vendor_problems(op, dtype, layout, variant)

    def vendor_problems(self, op, dtype, layout, variant) -> list[str]:
        return []

    def info(self, config) -> dict:
        return {"vendor": 1}
