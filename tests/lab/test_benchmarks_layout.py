"""The lab's layout (benchmarks/README.md): every study is a folder of its own, a package with a docstring, its
command (`run.py`, run as `python -m benchmarks.<study>.run`), a README that shows that command, and its results
files; at the top of benchmarks/ lie only the helpers that several studies share and the index, and the helpers
import no study (studies import them, never the reverse)."""

from __future__ import annotations

import ast

import pytest
from conftest import REPO

BENCHMARKS = REPO / "benchmarks"
SHARED = {"timing.py", "batches.py", "machine.py", "bert_reference.py"}  # what several studies use
INDEX = "README.md"


def studies() -> list[str]:
    return sorted(
        entry.name
        for entry in BENCHMARKS.iterdir()
        if entry.is_dir() and entry.name != "__pycache__" and not entry.name.startswith(".")
    )


def test_the_top_of_benchmarks_holds_the_shared_helpers_the_index_and_the_study_folders_only():
    loose = sorted(
        entry.name for entry in BENCHMARKS.iterdir() if entry.is_file() and entry.name not in SHARED | {INDEX}
    )
    assert not loose, f"loose at benchmarks/ (a study's module or results belong in its folder): {loose}"
    assert SHARED | {INDEX} <= {entry.name for entry in BENCHMARKS.iterdir()}


@pytest.mark.parametrize("study", studies())
def test_every_study_is_a_package_with_its_command_and_readme(study):
    folder = BENCHMARKS / study
    missing = [name for name in ("__init__.py", "run.py", "README.md") if not (folder / name).is_file()]
    assert not missing, f"benchmarks/{study}/ lacks {missing}"
    assert study.isidentifier() and study == study.lower(), f"benchmarks/{study}/: not a snake_case package name"
    assert ast.get_docstring(ast.parse((folder / "__init__.py").read_text(encoding="utf-8"))), (
        f"benchmarks/{study}/__init__.py has no docstring saying what the study measures"
    )
    readme = (folder / "README.md").read_text(encoding="utf-8")
    assert f"python -m benchmarks.{study}.run" in readme, f"benchmarks/{study}/README.md does not show its command"


def test_the_index_lists_every_study():
    index = (BENCHMARKS / INDEX).read_text(encoding="utf-8")
    unlisted = [study for study in studies() if f"({study}/README.md)" not in index]
    assert not unlisted, f"benchmarks/README.md does not list {unlisted}"


@pytest.mark.parametrize("helper", sorted(SHARED))
def test_the_shared_helpers_import_no_study(helper):
    tree = ast.parse((BENCHMARKS / helper).read_text(encoding="utf-8"))
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "benchmarks":
            parts = node.module.split(".")
            imported |= {parts[1]} if len(parts) > 1 else {alias.name for alias in node.names}
        elif isinstance(node, ast.Import):
            imported |= {alias.name.split(".")[1] for alias in node.names if alias.name.startswith("benchmarks.")}
    studies_imported = sorted(name for name in imported if f"{name}.py" not in SHARED)
    assert not studies_imported, f"benchmarks/{helper} imports the studies {studies_imported}"
