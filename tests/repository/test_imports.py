"""The training package's imports run one way: no module imports, at its top or inside a function, a module that
imports it back, directly or through others (a circle makes the order of imports matter and hides what depends on
what). The model package imports nothing of the training package. No module of either is longer than 500 lines but
the model file."""

from __future__ import annotations

import ast
from pathlib import Path

from conftest import REPO

PACKAGE = "sinusoidal_encoder_training"
ROOT = REPO / "training" / PACKAGE


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(path: Path, modules: set[str]) -> set[str]:
    """The package's modules that `path` imports, anywhere but under `if TYPE_CHECKING:`."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skipped = {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        for inner in ast.walk(node)
    }
    found = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}" if base else anchor
            found.add(base)
            found |= {f"{base}.{alias.name}" for alias in node.names}  # `from package import module`
    return {module for module in found if module in modules and module != name}


def import_graph() -> dict[str, set[str]]:
    files = sorted(ROOT.rglob("*.py"))
    modules = {module_name(path) for path in files}
    return {module_name(path): imported(path, modules) for path in files}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every module that reaches itself again, with one path that does."""
    found = []
    for start in sorted(graph):
        stack, seen = [(start, [start])], set()
        while stack:
            node, path = stack.pop()
            for following in sorted(graph[node]):
                if following == start:
                    found.append([*path, start])
                    stack.clear()
                    break
                if following not in seen:
                    seen.add(following)
                    stack.append((following, [*path, following]))
    return found


def test_the_training_package_imports_run_one_way():
    graph = import_graph()
    assert len(graph) > 30 and "sinusoidal_encoder_training.configs.finetuning" in graph
    assert circles(graph) == []


def test_the_circle_finder_finds_a_circle():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [
        ["a", "b", "c", "a"],
        ["b", "c", "a", "b"],
        ["c", "a", "b", "c"],
    ]


def test_the_model_package_imports_nothing_of_the_training_package():
    for path in (REPO / "modeling" / "sinusoidal_encoder").glob("*.py"):
        assert PACKAGE not in path.read_text(encoding="utf-8"), path.name


MODULE_LINES = 500  # a module longer than this holds more than one job: split it
MODEL_FILE_LINES = 850  # the architecture top to bottom, read as the paper: about 800 lines
MODEL_FILE = REPO / "modeling" / "sinusoidal_encoder" / "modeling_sinusoidal_encoder.py"


def test_no_module_of_the_library_is_longer_than_500_lines_but_the_model_file():
    """The library's modules (the model package and the training package) stay short enough to read as one job
    each; the model file, the architecture top to bottom, stays about 800 lines."""
    modules = [*ROOT.rglob("*.py"), *(REPO / "modeling" / "sinusoidal_encoder").glob("*.py")]
    lengths = {path: len(path.read_text(encoding="utf-8").splitlines()) for path in modules}
    long = {str(path.relative_to(REPO)): n for path, n in lengths.items() if n > MODULE_LINES and path != MODEL_FILE}
    assert not long, f"modules over {MODULE_LINES} lines: {long}"
    assert lengths[MODEL_FILE] <= MODEL_FILE_LINES
