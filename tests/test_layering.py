"""The layers of the Python code, read statically from the imports (docs/design.md §1, "Code layout").

PACKAGES lists the packages bottom to top: ``wtconv_core`` (errors, paths, inputs: imports no other project
package), ``wtconv_libs`` (the compiled libraries and their contract), ``wtconv_torch`` (the PyTorch side: model,
op, kernel loader), ``wtconv_export`` (ONNX export and the one reader of an exported file), ``wtconv_ort`` (ONNX
Runtime sessions), ``trt_engine`` (TensorRT engines), ``wtconv_validate`` (runtimes against PyTorch),
``wtconv_serving`` (Triton), ``wtconv_bench`` (benchmarks and profiles), ``wtconv_trt`` (the Python API and, on it,
the command line). A package imports only packages below it. Every ``import`` statement counts, at module level or
inside a function, so a lazy import cannot hide a dependency that runs back up.

The command modules are a thin shell: they reach the libraries only through ``wtconv_trt.api`` (and the option
groups of ``wtconv_core.options``, which they build their parsers from) and hold no decision of their own — no
``raise`` statement (every refusal comes from a job, so a Python caller gets it too).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = (
    "wtconv_core",
    "wtconv_libs",
    "wtconv_torch",
    "wtconv_export",
    "wtconv_ort",
    "trt_engine",
    "wtconv_validate",
    "wtconv_serving",
    "wtconv_bench",
    "wtconv_trt",
)


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def project_modules() -> dict[str, Path]:
    return {module_name(path): path for package in PACKAGES for path in sorted((ROOT / package).rglob("*.py"))}


def resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The project module that ``import name`` loads last: the longest known prefix of the dotted name."""
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        candidate = ".".join(parts[:end])
        if candidate in modules:
            return candidate
    return None


def imports_of(module: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """Project modules imported anywhere in ``path`` (relative imports resolved, ``from pkg import submodule``
    counted as the submodule)."""
    is_package = path.name == "__init__.py"
    package = module if is_package else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                prefix = ".".join(base + ([node.module] if node.module else []))
            else:
                prefix = node.module or ""
            targets = [f"{prefix}.{alias.name}" for alias in node.names] or [prefix]
        else:
            continue
        for target in targets:
            resolved = resolve(target, modules)
            if resolved is not None and resolved != module:
                found.add(resolved)
    return found


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    modules = project_modules()
    return {name: imports_of(name, path, modules) for name, path in modules.items()}


def layer(module: str) -> str:
    return module.split(".")[0]


def test_the_reader_sees_the_imports(graph):
    """The graph is not empty by accident: a few imports that must be there are found."""
    assert "wtconv_core.errors" in graph["wtconv_core.inputs"]
    assert "wtconv_trt.api.onnx_validation" in graph["wtconv_trt.commands.validate"]  # inside a function
    assert any(layer(target) == "wtconv_export" for target in graph["trt_engine.build"])
    assert len(graph) > 30


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """Every import of a package above the importing module's own (PACKAGES order)."""
    rank = {package: i for i, package in enumerate(PACKAGES)}
    return sorted(f"{m} -> {t}" for m, targets in graph.items() for t in targets if rank[layer(t)] > rank[layer(m)])


def test_every_package_is_in_the_order(graph):
    assert {layer(m) for m in graph} == set(PACKAGES)
    assert all(any(layer(m) == package for m in graph) for package in PACKAGES)


def test_no_import_runs_up_the_layers(graph):
    upward = upward_imports(graph)
    assert upward == [], "an import runs up the layers (PACKAGES order):\n" + "\n".join(upward)


def test_the_order_check_finds_an_upward_import():
    """The check is not blind: a core module importing the command line, or the PyTorch side importing TensorRT
    engines, is found."""
    assert upward_imports({"wtconv_core.errors": {"wtconv_trt.cli"}}) == ["wtconv_core.errors -> wtconv_trt.cli"]
    assert upward_imports({"wtconv_torch.models": {"trt_engine.build"}, "trt_engine.build": {"wtconv_core.paths"}}) == [
        "wtconv_torch.models -> trt_engine.build"
    ]


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle as [a, b, ..., a], or None (depth-first search, colours white/grey/black)."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for target in sorted(graph.get(node, ())):
            if state.get(target) == 1:
                return stack[stack.index(target) :] + [target]
            if target not in state:
                cycle = visit(target)
                if cycle:
                    return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            cycle = visit(node)
            if cycle:
                return cycle
    return None


def test_find_cycle_finds_one():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_no_import_circles(graph):
    cycle = find_cycle(graph)
    assert cycle is None, "import circle: " + " -> ".join(cycle)


COMMAND_LINE = ("wtconv_trt.cli", "wtconv_trt.arguments", "wtconv_trt.commands", "wtconv_trt.__main__")


def is_command_line(module: str) -> bool:
    return any(module == m or module.startswith(m + ".") for m in COMMAND_LINE)


def test_the_api_never_imports_the_command_line(graph):
    api = [m for m in graph if m == "wtconv_trt" or m.startswith("wtconv_trt.api")]
    assert "wtconv_trt.api.engine" in api and len(api) > 5
    upward = sorted(f"{m} -> {t}" for m in api for t in graph[m] if is_command_line(t))
    assert upward == [], "the API imports the command line:\n" + "\n".join(upward)


def command_modules() -> dict[str, Path]:
    return {name: path for name, path in project_modules().items() if name.startswith("wtconv_trt.commands.")}


def test_commands_reach_the_libraries_only_through_the_api(graph):
    commands = command_modules()
    assert "wtconv_trt.commands.build" in commands and len(commands) >= 10
    # wtconv_core.options: the option groups the API functions take, declared once; the command line builds its
    # argument groups from them (docs/design.md §1).
    allowed = ("wtconv_trt.api", "wtconv_trt.arguments", "wtconv_trt.commands", "wtconv_core.options")
    direct = sorted(
        f"{m} -> {t}" for m in commands for t in graph[m] if not any(t == a or t.startswith(a + ".") for a in allowed)
    )
    assert direct == [], "a command module imports a library around the API:\n" + "\n".join(direct)


def test_commands_make_no_decisions():
    """No command module raises: every check is a job's, so the command line and a Python caller refuse the same
    input with the same message (the bad-input table and its API twin, tests/test_api_bad_input.py)."""
    found = []
    for name, path in command_modules().items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        found += [f"{name}:{node.lineno}" for node in ast.walk(tree) if isinstance(node, ast.Raise)]
    assert found == [], "raise statements in command modules (move the check into the job):\n" + "\n".join(found)


def test_the_check_finds_a_raise():
    """The reader above is not blind: a raise inside a nested function is found."""
    tree = ast.parse("def run(args):\n    def inner():\n        raise ValueError('x')\n    return inner\n")
    assert any(isinstance(node, ast.Raise) for node in ast.walk(tree))


def test_nothing_installed_imports_the_research_benchmarks():
    """benchmarks/ is outside the wheel (docs/design.md §1): no package imports it, or an install would break."""
    found = []
    for module, path in project_modules().items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            found += [f"{module} -> {n}" for n in names if n == "benchmarks" or n.startswith("benchmarks.")]
    assert found == [], "an installed package imports benchmarks/:\n" + "\n".join(found)
    assert (ROOT / "benchmarks" / "__init__.py").is_file() and not any(p.startswith("benchmarks") for p in PACKAGES)
