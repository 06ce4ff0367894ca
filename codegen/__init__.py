"""The generator's entry point for Meson (`python -m codegen ...`).

The generator itself is the package's own `tiledispatch.codegen` (python/tiledispatch/codegen/),
so the source tree imports as it installs; this folder only makes it runnable from the source
root, as the product's layout names it.
"""
