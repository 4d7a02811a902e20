"""Claims that stay true (issue 42): what README, the docs, help texts and docstrings name must exist. A path of
this repository (`benchmarks/gpu.py`, `docs/model.md`), a README section cited by name (`README, "Install"`), a
module run with `python -m`: each is looked up. (Flags documented for a command are checked against its `--help`
in tests/test_run_config.py; links between pages by `mkdocs build --strict` in tests/test_docs.py.)"""

from __future__ import annotations

import importlib.util
import re
import sys

import pytest
from conftest import REPO

ROOTS = ("tests", "training", "modeling", "benchmarks", "scripts", "docs", "tokenizer_config", ".ci")
# a path of the repository: a root folder, then path characters (placeholders such as <size>, {md,png} or NAME kept
# in the match so that they can be told apart)
PATH = re.compile(r"(?<![\w/.-])((?:" + "|".join(map(re.escape, ROOTS)) + r")/[\w./<>{},*-]*[\w/>}*])")
SECTION = re.compile(r"README(?:'s)?,? \"([^\"]+)\"")
MODULE = re.compile(r"python -m ([A-Za-z_][\w.]*\w)")
NOT_OURS = ("pip", "pytest", "venv", "mkdocs", "accelerate", "torch")  # modules of other projects


def sources() -> list:
    files = [REPO / "README.md", REPO / "CHANGELOG.md", REPO / "model_card.md", *sorted((REPO / "docs").rglob("*.md"))]
    for root in ("modeling", "training", "benchmarks", "scripts", "tests"):
        files += sorted((REPO / root).rglob("*.py"))
    files += sorted((REPO / "scripts").glob("*.sh"))
    return [file for file in files if file.name != "test_claims.py"]  # whose examples name what does not exist


def named_paths(text: str) -> list[tuple[int, str]]:
    """(line, path) of every path of this repository that `text` names, but placeholders (`training/NAME.py`,
    `benchmarks/results-<size>.md`) and files of transformers' own repository."""
    found = []
    for match in PATH.finditer(text):
        path = match.group(1).rstrip("/.")
        if any(mark in path for mark in "<>{}*,") or re.search(r"/[A-Z]+(\.\w+)?$", path):
            continue
        if "transformers'" in text[max(0, match.start() - 80) : match.start()]:
            continue
        found.append((text.count("\n", 0, match.start()) + 1, path))
    return found


def test_every_path_section_and_module_named_exists():
    sys.path.insert(0, str(REPO))  # `python -m benchmarks.x` runs from the repository's root
    headings = {m.group(1).strip() for m in re.finditer(r"^#+ (.+)$", (REPO / "README.md").read_text(), re.M)}
    problems = []
    for file in sources():
        text = file.read_text(encoding="utf-8")
        where = file.relative_to(REPO)
        for line, path in named_paths(text):
            if not (REPO / path).exists():
                problems.append(f"{where}:{line}: {path} does not exist")
        for match in SECTION.finditer(text):
            if match.group(1) not in headings:
                problems.append(f'{where}: README has no section "{match.group(1)}"')
        for match in MODULE.finditer(text):
            module = match.group(1)
            if module.split(".")[0] in NOT_OURS:
                continue
            try:
                found = importlib.util.find_spec(module) is not None
            except ModuleNotFoundError:
                found = False
            if not found:
                problems.append(f"{where}: `python -m {module}`: no such module")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("see `benchmarks/gpu.py` and docs/model.md.", [(1, "benchmarks/gpu.py"), (1, "docs/model.md")]),
        ("goes to `benchmarks/results-<size>.md`", []),
        ("python training/NAME.py", []),
        ("transformers' common model tests (tests/test_modeling_common.py)", []),
        ("\n\nwritten to tests/nothing_here.py", [(3, "tests/nothing_here.py")]),
    ],
)
def test_named_paths_are_found_and_placeholders_left_out(text, expected):
    assert named_paths(text) == expected
