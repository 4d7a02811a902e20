"""The documentation: the site builds with warnings as errors (a broken link or anchor, a page outside the nav, a
docstring that does not parse fail it), and every fenced code block of README.md and docs/ runs as written.

A block that cannot run here (it needs a GPU, the Hub, hours) carries a marker on the line right before its fence,
with the reason: `<!-- not run: needs a GPU -->`. Every other Python or shell block is run, page by page, in order:

- each block is its own process; the blocks of one page share one working directory, a stand-in for the
  repository root (the repository's files and folders linked into a temporary one, in the folder that `DOCS_TMP`
  in their environment names), so that a block reads as run from a clone (`python training/pretrain.py ... --output_dir
  outputs/x`), a later block can use what an earlier one saved (`from_pretrained("outputs/x")`), and nothing is
  written into the checkout;
- a Python block (`python`, `py`) runs with this interpreter; a shell block (`bash`, `sh`, `shell`) with
  `bash -euo pipefail`; a `console` block runs its `$ ` lines the same way (the other lines are the output it
  shows);
- every block gets `HF_HUB_OFFLINE=1`, `HF_DATASETS_OFFLINE=1`, `OMP_NUM_THREADS=1`, `TOKENIZERS_PARALLELISM=false`,
  `MPLBACKEND=Agg`, a code cache for `trust_remote_code` (`HF_MODULES_CACHE`), and a PATH that starts with this
  interpreter's folder (`python` is the virtual environment's; the console scripts are found);
- the pages' Python programs (their Python blocks, and the `python` and console-script commands of their shell
  blocks) start warm: forked, as a fresh interpreter would run them, from one that imported torch, transformers,
  datasets and accelerate once for all the pages a test process runs (tests/repository/warm_python.py;
  `DOCS_FRESH_PYTHON=1` starts each fresh). The environment is the same for every page, as the warm one's must be.

A block for a program that pins other libraries than the package's (Infinity and Optimum pin transformers 4.x)
names the environment it runs in on the line before its fence, a folder of the checkout that a setup script makes:
`<!-- runs in: .venv-serving -->` (scripts/setup_test_environments.sh). It runs like the others, but with that
environment's interpreter, and its `bin/` first on PATH; without that environment the page's test skips at the
block.

Other languages (`text`, `yaml`, `json`, `toml`, ...) are shown, not run; but every fence names its language.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import warm_python

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
PYTHON_LANGUAGES = {"python", "py"}
SHELL_LANGUAGES = {"bash", "sh", "shell"}
CONSOLE_LANGUAGES = {"console"}
RUNNABLE = PYTHON_LANGUAGES | SHELL_LANGUAGES | CONSOLE_LANGUAGES
BLOCK_TIMEOUT_S = 900

FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^`\n]*?)[ \t]*$")
MARKER = re.compile(r"^[ \t]*<!--[ \t]*not run:(?P<reason>.*?)-->[ \t]*$")
MARKER_LIKE = re.compile(r"<!--\s*not[\s_-]*run", re.IGNORECASE)
RUNS_IN = re.compile(r"^[ \t]*<!--[ \t]*runs in:[ \t]*(?P<environment>\S+)[ \t]*-->[ \t]*$")


@dataclasses.dataclass
class Block:
    page: str  # the path from the repository root
    line: int  # of the opening fence, from 1
    language: str  # the fence's first word, lowercased ("" when it names none)
    code: str
    marker: str | None  # the line before the fence, if it is a marker (see `skip_reason`)
    closed: bool = True  # False: the fence is left open (to the end of the page)
    environment: str | None = None  # `<!-- runs in: FOLDER -->`: the environment's folder, from the repository root

    @property
    def skip_reason(self) -> str | None:
        """The marker's reason, stripped ("" for a marker without one); None when the block has no marker."""
        if self.marker is None:
            return None
        return MARKER.match(self.marker)["reason"].strip()

    @property
    def runs(self) -> bool:
        return self.language in RUNNABLE and self.marker is None

    def where(self) -> str:
        return f"{self.page}:{self.line}"


def pages() -> list[Path]:
    """README.md and every Markdown page under docs/, the hooks' folder aside."""
    found = sorted(path for path in DOCS.rglob("*.md") if "hooks" not in path.relative_to(DOCS).parts)
    return [REPO / "README.md", *found]


def fenced_blocks(path: Path, root: Path = REPO) -> list[Block]:
    """The fenced code blocks of a Markdown page, in order. A fence may be indented (in a list item or an admonition):
    the block's lines lose that indent. A fence left open runs to the end of the page (`closed` is False)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    page = path.relative_to(root).as_posix()
    blocks, index = [], 0
    while index < len(lines):
        opening = FENCE.match(lines[index])
        if not opening:
            index += 1
            continue
        indent, fence, info = opening["indent"], opening["fence"], opening["info"]
        language = info.lstrip("{ .").split()[0].rstrip("}").lower() if info.strip("{} .") else ""
        before = lines[index - 1] if index > 0 else ""
        block = Block(page, index + 1, language, "", before if MARKER_LIKE.search(before) else None)
        if runs_in := RUNS_IN.match(before):
            block.environment = runs_in["environment"]
        body, index = [], index + 1
        while index < len(lines):
            closing = FENCE.match(lines[index])
            if closing and closing["fence"][0] == fence[0] and len(closing["fence"]) >= len(fence):
                if not closing["info"]:
                    break
            line = lines[index]
            body.append(line[len(indent) :] if line.startswith(indent) else line.lstrip())
            index += 1
        else:
            block.closed = False
        block.code = "\n".join(body) + "\n"
        blocks.append(block)
        index += 1
    return blocks


def console_commands(code: str) -> str:
    """The commands of a `console` block: its `$ ` lines and the lines that continue them (a trailing backslash)."""
    commands, continuing = [], False
    for line in code.splitlines():
        if continuing:
            commands.append(line)
        elif line.startswith("$ "):
            commands.append(line[2:])
        else:
            continue
        continuing = line.rstrip().endswith("\\")
    return "\n".join(commands) + "\n"


def block_environment(pages: Path, modules_cache: Path) -> dict[str, str]:
    """The blocks' environment, for every page: `pages` holds the pages' working directories."""
    environment = dict(os.environ)
    environment.update(
        DOCS_TMP=str(pages),
        HF_HUB_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        OMP_NUM_THREADS="1",
        TOKENIZERS_PARALLELISM="false",
        MPLBACKEND="Agg",
        HF_MODULES_CACHE=str(modules_cache),
        PATH=os.pathsep.join([str(Path(sys.executable).parent), environment.get("PATH", "")]),
    )
    return environment


def run_block(block: Block, work: Path, environment: dict[str, str]) -> subprocess.CompletedProcess:
    python = Path(shutil.which("python", path=environment["PATH"]))  # this interpreter, or the warm one's client
    if block.environment is not None:  # its own interpreter, and its programs first on PATH
        python = REPO / block.environment / "bin" / "python"
        environment = {**environment, "PATH": os.pathsep.join([str(python.parent), environment["PATH"]])}
    if block.language in PYTHON_LANGUAGES:
        script = work.parent / f"block_{block.line}.py"
        script.write_text(block.code, encoding="utf-8")
        command, cwd = [str(python), str(script)], work
    else:
        code = console_commands(block.code) if block.language in CONSOLE_LANGUAGES else block.code
        script = work.parent / f"block_{block.line}.sh"
        script.write_text(code, encoding="utf-8")
        command, cwd = ["bash", "-euo", "pipefail", str(script)], work
    return subprocess.run(
        command,
        cwd=cwd,
        env=environment,
        capture_output=True,
        text=True,
        timeout=BLOCK_TIMEOUT_S,
        stdin=subprocess.DEVNULL,
    )


# environments, and the folders that runs write
NOT_LINKED = {".git", ".venv", ".venv-tf4", ".venv-serving", "outputs", "site", "build", "dist"}


def stand_in_for_the_repository(work: Path) -> None:
    """`work` as the blocks' repository root: a link to each file and folder of the checkout, but for environments
    and the folders that runs write (a block's `outputs/` is its page's own)."""
    for entry in REPO.iterdir():
        if entry.name not in NOT_LINKED and not entry.name.startswith((".pytest", ".ruff")):
            (work / entry.name).symlink_to(entry, target_is_directory=entry.is_dir())


def pages_with_runnable_blocks() -> list[str]:
    return [path.relative_to(REPO).as_posix() for path in pages() if any(block.runs for block in fenced_blocks(path))]


# ----------------------------------------------------------------------------------------------------------------
# fast: the form of the pages


def test_every_fence_names_its_language_and_every_marker_its_reason():
    problems = []
    for path in pages():
        blocks = fenced_blocks(path)
        for block in blocks:
            if not block.closed:
                problems.append(f"{block.where()}: a fence left open")
                continue
            if not block.language:
                problems.append(f"{block.where()}: a fence without a language (```python, ```bash, ```text, ...)")
            if block.marker is not None:
                if not MARKER.match(block.marker):
                    problems.append(f"{block.where()}: a malformed marker {block.marker.strip()!r}")
                elif not block.skip_reason:
                    problems.append(f"{block.where()}: a marker without a reason: `<!-- not run: needs a GPU -->`")
        # a marker that is not right before a fence marks nothing
        lines = path.read_text(encoding="utf-8").splitlines()
        for number, line in enumerate(lines, start=1):
            if MARKER_LIKE.search(line) and (number == len(lines) or not FENCE.match(lines[number])):
                problems.append(f"{path.relative_to(REPO).as_posix()}:{number}: a marker not right before a fence")
    if problems:
        pytest.fail("\n".join(problems), pytrace=False)


def nav_pages(nav) -> list[str]:
    """The page paths of mkdocs.yml's nav (nested sections included; external links left out)."""
    found = []
    for entry in nav:
        values = entry.values() if isinstance(entry, dict) else [entry]
        for value in values:
            if isinstance(value, list):
                found += nav_pages(value)
            elif isinstance(value, str) and "://" not in value:
                found.append(value)
    return found


def test_every_page_is_in_the_nav_and_every_nav_entry_is_a_page():
    yaml = pytest.importorskip("yaml")
    config = yaml.safe_load((REPO / "mkdocs.yml").read_text(encoding="utf-8"))
    assert config["docs_dir"] == "docs"
    listed = nav_pages(config["nav"])
    assert len(listed) == len(set(listed)), "a page is listed twice in the nav"
    on_disk = {path.relative_to(DOCS).as_posix() for path in pages() if path.is_relative_to(DOCS)}
    problems = [f"in the nav of mkdocs.yml, but not in docs/: {page}" for page in sorted(set(listed) - on_disk)]
    problems += [f"in docs/, but not in the nav of mkdocs.yml: {page}" for page in sorted(on_disk - set(listed))]
    if problems:
        pytest.fail("\n".join(problems), pytrace=False)


def test_the_block_reader(tmp_path):
    """`fenced_blocks` on a page of every case: languages, an indented fence, a longer fence holding a shorter one,
    markers, console prompts, an environment named, a fence left open."""
    page = tmp_path / "page.md"
    page.write_text(
        "Text.\n\n```python\nprint(1)\n```\n\n<!-- not run: needs a GPU -->\n```bash\nnvidia-smi\n```\n\n"
        '!!! note\n    ```py title="x.py"\n    x = 1\n        y = 2\n    ```\n\n'
        "````text\n```python\nnot a block\n```\n````\n\n<!-- not run: -->\n```sh\nexit 1\n```\n"
        "```console\n$ echo a \\\n  b\na b\n$ true\n```\n\n<!-- runs in: .venv-x -->\n```python\nimport x\n```\n\n"
        "```\nno language, left open\n",
        encoding="utf-8",
    )
    blocks = fenced_blocks(page, root=tmp_path)
    assert [(block.line, block.language, block.runs, block.skip_reason, block.closed) for block in blocks] == [
        (3, "python", True, None, True),
        (8, "bash", False, "needs a GPU", True),
        (13, "py", True, None, True),
        (18, "text", False, None, True),
        (25, "sh", False, "", True),
        (28, "console", True, None, True),
        (36, "python", True, None, True),
        (40, "", False, None, False),
    ]
    assert [block.environment for block in blocks] == [None] * 6 + [".venv-x", None]
    assert blocks[2].code == "x = 1\n    y = 2\n"
    assert blocks[3].code == "```python\nnot a block\n```\n"
    assert console_commands(blocks[5].code) == "echo a \\\n  b\ntrue\n"


@functools.cache
def tables_module():
    """docs/tables.py, which writes the tables of results of the pages from the committed result files."""
    spec = importlib.util.spec_from_file_location("docs_tables", DOCS / "tables.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_every_table_of_results_agrees_with_its_source_files():
    """What `python docs/tables.py --check` checks: each table region of the pages holds what the script writes
    from the result files now."""
    stale = tables_module().stale_tables()
    if stale:
        pytest.fail(
            "\n".join(stale) + "\n(`python docs/tables.py` rewrites the tables from the committed result files)",
            pytrace=False,
        )


def test_readme_results_figures_are_those_of_their_source_files():
    """Each headline figure of README's "Results" is its source's value, formatted as the bullet writes it."""
    problems = tables_module().readme_problems()
    if problems:
        pytest.fail("\n".join(problems), pytrace=False)


def test_table_regions_are_rewritten_and_nothing_else():
    tables = tables_module()
    start = "<!-- table: x (python docs/tables.py) -->"
    text = f"Before.\n\n{start}\n\n| old |\n|---|\n\n{tables.END}\n\nAfter.\n"
    assert tables.rewritten(text, "page.md", {"x": "| new |\n|---|"}) == text.replace("| old |", "| new |")
    assert tables.rewritten(text, "page.md", {}) == text
    with pytest.raises(ValueError, match=re.escape("page.md:1: the region of table 'x' has no")):
        tables.regions(f"{start}\n| old |\n", "page.md")
    rows = tables.report_rows("r.md", "b", text="# R\n\n| a | b |\n|---|---|\n| one | 1 |\n| two, 2 | 2 |\n")
    assert rows.cell("two, 2", "b") == "2"
    with pytest.raises(ValueError, match=re.escape("r.md: no row 'three'")):
        rows.cell("three", "b")


# ----------------------------------------------------------------------------------------------------------------
# slow: the site builds; the blocks run


@pytest.mark.slow
def test_site_builds_with_warnings_as_errors(tmp_path):
    for module in ("mkdocs", "material", "mkdocstrings", "mkdocstrings_handlers.python", "latex2mathml"):
        pytest.importorskip(module, reason="the docs extra is not installed: pip install -e '.[docs]'")
    environment = dict(os.environ, NO_MKDOCS_2_WARNING="1")  # material's notice about its successor
    # not --quiet: it drops the warnings before --strict counts them
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=REPO,
        env=environment,
        capture_output=True,
        text=True,
        timeout=600,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-10000:]
    assert (tmp_path / "site" / "index.html").is_file()
    assert (tmp_path / "site" / "api" / "model" / "index.html").is_file()


@pytest.fixture(scope="session")
def blocks_environment(tmp_path_factory):
    """(The folder of the pages' working directories, the environment their blocks run in), with a warm Python for
    it: one for all the pages of this process, whose start (its imports) is paid once, not once a page."""
    pages = tmp_path_factory.mktemp("pages")
    with warm_python.server(block_environment(pages, pages / "hf_modules"), pages, pages / "warm") as environment:
        yield pages, environment


@pytest.mark.slow
@pytest.mark.parametrize("page", pages_with_runnable_blocks())
def test_code_blocks_run(page, request):
    if "DOCS_TMP" in os.environ:  # a block that runs the test suite (`bash scripts/test.sh`) would run itself
        pytest.skip("inside a documentation block (DOCS_TMP is set): the blocks are not run again")
    blocks = [block for block in fenced_blocks(REPO / page) if block.runs]
    for block in blocks:
        if block.environment is not None and not (REPO / block.environment / "bin" / "python").exists():
            pytest.skip(f"{block.where()} runs in {block.environment}, which is not here (see its setup script)")
    pages, environment = request.getfixturevalue("blocks_environment")  # started once a page is to run
    work = pages / page.replace("/", "-").removesuffix(".md") / "work"
    work.mkdir(parents=True)
    stand_in_for_the_repository(work)
    for block in blocks:
        proc = run_block(block, work, environment)
        if proc.returncode != 0:
            shown = "".join(f"    {line}\n" for line in block.code.splitlines())
            pytest.fail(
                f"the {block.language} block at {block.where()} exits with status {proc.returncode}:\n{shown}"
                f"--- stdout (end)\n{proc.stdout[-3000:]}\n--- stderr (end)\n{proc.stderr[-6000:]}\n"
                "(a block that cannot run here gets `<!-- not run: REASON -->` on the line before its fence; "
                f"its page's folder: {shlex.quote(str(work))}; DOCS_FRESH_PYTHON=1 starts each "
                "program fresh, tests/repository/warm_python.py)",
                pytrace=False,
            )
