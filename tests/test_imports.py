"""The package's import graph: acyclic, no import of the package's own modules hidden inside a
function, and the runtime (selection, dispatch, the API) never imports the tile engine."""
import ast
from pathlib import Path

from conftest import ROOT

PACKAGE = ROOT / "python" / "tiledispatch"
# Imports a function may make: optional dependencies that are heavy or absent, loaded on use.
OPTIONAL = {"torch", "cupy", "numba", "matplotlib", "ray"}
# The package's modules that import torch at the top: a function may load them on use (the
# API, for a caller that passed torch tensors), so that `import tiledispatch` never imports torch.
TORCH_MODULES = {"tiledispatch._torch_ops"}
RUNTIME = {"tiledispatch", "tiledispatch._cuda", "tiledispatch._ffi", "tiledispatch._registry", "tiledispatch.api",
           "tiledispatch.arrays", "tiledispatch.dispatcher", "tiledispatch.errors", "tiledispatch.gemm_ex",
           "tiledispatch.problems", "tiledispatch.reference", "tiledispatch.selection", "tiledispatch._options",
           "tiledispatch._autotune", "tiledispatch._fingerprint", "tiledispatch._picklog", "tiledispatch._tunecache"}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def resolve(module: str, is_package: bool, node: ast.ImportFrom, modules) -> list:
    """The package modules an ImportFrom depends on: the submodules it names, else the module
    it names; never a package enclosing the importer (Python imports those first anyway)."""
    if node.level:
        base = module.split(".") if is_package else module.split(".")[:-1]
        base = base[:len(base) - node.level + 1]
        target = ".".join(base + ([node.module] if node.module else []))
    else:
        target = node.module or ""
    submodules = [f"{target}.{alias.name}" for alias in node.names if f"{target}.{alias.name}" in modules]
    found = submodules or [target]
    return [m for m in found if not (module + ".").startswith(m + ".")]


def package_imports():
    """module -> (top-level package imports, package imports inside functions)."""
    modules = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        top, hidden = set(), set()
        functions = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
        inner = {id(n) for f in functions for n in ast.walk(f) if n is not f}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                found = [m for m in resolve(name, path.name == "__init__.py", node, modules) if m in modules]
            elif isinstance(node, ast.Import):
                found = [a.name for a in node.names if a.name in modules]
            else:
                continue
            (hidden if id(node) in inner else top).update(m for m in found if m != name)
        graph[name] = (top, hidden)
    return graph


def test_no_package_import_is_hidden_in_a_function():
    hidden = {name: sorted(h - TORCH_MODULES) for name, (_, h) in package_imports().items() if h - TORCH_MODULES}
    assert hidden == {}


def test_only_the_api_loads_the_torch_modules_in_a_function():
    loaders = {name: sorted(h & TORCH_MODULES) for name, (_, h) in package_imports().items() if h & TORCH_MODULES}
    assert loaders == {"tiledispatch.api": ["tiledispatch._torch_ops"]}


def test_the_import_graph_is_acyclic():
    graph = {name: top for name, (top, _) in package_imports().items()}
    state = {}

    def visit(node, path):
        if state.get(node) == "done":
            return
        assert state.get(node) != "open", " -> ".join(path + [node])
        state[node] = "open"
        for dep in sorted(graph.get(node, ())):
            visit(dep, path + [node])
        state[node] = "done"
    for name in sorted(graph):
        visit(name, [])


def test_the_runtime_never_imports_the_tile_engine():
    graph = {name: top | hidden for name, (top, hidden) in package_imports().items()}
    for name in RUNTIME & set(graph):
        seen, todo = set(), [name]
        while todo:
            for dep in graph.get(todo.pop(), ()):
                if dep not in seen:
                    seen.add(dep)
                    todo.append(dep)
        assert not [m for m in seen if m.startswith("tiledispatch.tile_engine")], name


def test_import_tiledispatch_never_imports_torch():
    """The API on numpy arrays, codegen and the CLI's modules leave torch unimported (only
    tiledispatch.torch, tiledispatch.nn and a call with torch tensors import it)."""
    import subprocess
    import sys
    code = ("import sys, numpy as np, tiledispatch as td\n"
            "td.gemm(np.ones((4, 4), np.float32), np.ones((4, 4), np.float32))\n"
            "td.conv(np.ones((1, 5, 5, 4), np.float32), np.ones((4, 3, 3, 1), np.float32), groups=4)\n"
            "import tiledispatch.cli, tiledispatch.dispatcher, tiledispatch.codegen\n"
            "assert 'torch' not in sys.modules, sorted(m for m in sys.modules if m.startswith('torch'))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT / "tests")
    assert proc.returncode == 0, proc.stderr
