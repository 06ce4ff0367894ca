"""`python -m codegen COMMAND ...` from the source root: runs tiledispatch.codegen.cli."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "python"))

from tiledispatch.codegen.cli import main  # noqa: E402  (the path above makes it importable)

sys.exit(main())
