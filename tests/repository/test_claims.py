"""Claims that stay true: what README, the docs, help texts and docstrings name must exist. A path of
this repository (`benchmarks/gpu.py`, `docs/model.md`), a README section cited by name (`README, "Install"`), a
module run with `python -m`: each is looked up. A measured figure in the prose of the pages (a time, a speed, a loss,
a share) carries the date of its measurement, and for a time or a speed its machine, unless docs/tables.py writes or
checks it from a committed result file. (Flags documented for a command are checked against its `--help` in
tests/training/configs/test_run_config.py; links between pages by `mkdocs build --strict` in
tests/repository/test_docs.py.)"""

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


# ----------------------------------------------------------------------------------------------------------------
# measured figures in prose (they come from the committed result files, as the tables do, or carry their date and
# machine)
#
# The convention. A measured figure in the prose of README.md, model_card.md and docs/*.md stands in a paragraph, list
# item or hand-written table that names the date of its measurement (2026-11-27, or 2026-11), and for a time or a speed
# the machine too (2 CPU cores, an NVIDIA H200), or it is one that docs/tables.py writes or checks: inside a table
# region, or one of README's "Results" figures (`readme_figures`, checked against their source files by
# tests/repository/test_docs.py). A list or a hand-written table also takes the date and machine of the paragraph that
# leads in to it ("**Findings** (runs of 2026-11-26 on 2 CPU cores)"), with nothing but code blocks or a table region
# between. Code blocks (commands, printed output) and HTML comments (the reasons of `<!-- not run: ... -->`) are not
# prose; CHANGELOG.md is dated by its releases.

FIGURE_PAGES = ("README.md", "model_card.md", "docs/*.md")  # not docs/api (docstrings) nor docs/changelog.md
NUMBER = r"(?<![\w.])\d[\d,]*(?:\.\d+)?"  # 9, 9,000, 2.71; not the 10 of 1e-10 or of v1.10
FIGURE = re.compile(
    # a time or a speed: it needs its machine
    rf"(?P<speed>{NUMBER}(?:\s(?:ms|s|min)|\s?(?:minutes?|seconds?|hours?|tokens/s|[GT]FLOP/s|x faster))(?![\w/])"
    # a ratio with decimals (2.80×, 1.75 times); an integer one is a setting (4× the training length, 32 × 128)
    r"|(?<![\w.])\d+\.\d+(?:\s?×|\stimes\b)(?!\s?\d))"
    # a loss, a share, a size; a figure named as what it measures
    rf"|{NUMBER}\s?(?:nats?|%|[KMGT]i?B)(?![\w/])"
    r"|\b(?:loss|perplexity|accuracy|macro-F1|order gap)\s(?:(?:of|at|from)\s)?[+−-]?\d+\.\d+"
)
DATE = re.compile(r"\b20\d\d-[01]\d(?:-[0-3]\d)?\b")
MACHINE = re.compile(r"\b(?:CPU|GPU|core|machine|EPYC|H100|H200)s?\b")
# figures that are settings or definitions, not measurements, which FIGURE cannot tell from measured ones (each
# phrase as the page writes it, whitespace collapsed)
SETTINGS = (
    "80% replaced by `[MASK]`, 10% by a random token, 10% kept",  # BERT's masking recipe (docs/pretraining.md)
    "(15% of the tokens)",  # the masking rate (docs/performance.md)
    "the masked tokens only (15%)",  # the same (docs/pretraining.md)
    "below the 1.3× target",  # a target of the GPU benchmark (docs/pretraining.md)
    "up to 256 MiB",  # a limit of the data-file check (docs/pretraining.md)
    "a 1 MB line",  # an input of a test (docs/model.md)
    "less than 64 MiB free",  # the least room the datasets cache must have (docs/pretraining.md)
    "about a 95% interval",  # what two standard errors span (docs/pretraining.md)
    "at least 0.5 nats below the baseline",  # the evaluation sentence's thresholds (docs/pretraining.md)
    "a gap of at least 0.1 nats",
)


def prose_units(text: str) -> list[tuple[int, str, str]]:
    """(line, text, lead-in) of every paragraph, list item and hand-written table of a markdown page, outside code
    blocks, table regions and HTML comments, with whitespace collapsed; the lead-in of a list item or table is the
    paragraph before its list or table (only code blocks and table regions between), "" for a paragraph."""
    blank = lambda match: "\n" * match.group(0).count("\n")  # noqa: E731  (keeps the line numbers)
    text = re.sub(r"^<!-- table: .*?^<!-- end table -->", blank, text, flags=re.S | re.M)
    text = re.sub(r"<!--.*?-->", blank, text, flags=re.S)
    blocks, block, fence = [], [], None  # a block: [(line number, line), ...]
    for number, line in enumerate([*text.split("\n"), ""], start=1):
        stripped = line.strip()
        opening = re.match(r"`{3,}|~{3,}", stripped)
        if fence or opening or not stripped:
            if block:
                blocks.append(block)
            block = []
            if fence and stripped.startswith(fence) and not stripped.strip(fence[0]):
                fence = None
            elif opening and not fence:
                fence = opening.group(0)
            continue
        block.append((number, line))
    units, lead = [], ""
    item = re.compile(r"\s*(?:[-*+]|\d+\.)\s")
    for block in blocks:
        first = block[0][1].lstrip()
        if first.startswith("|") or item.match(first):
            starts = [0] if first.startswith("|") else [i for i, (_, line) in enumerate(block) if item.match(line)]
            for start, end in zip(starts, [*starts[1:], len(block)], strict=True):
                units.append((block[start][0], " ".join(" ".join(line for _, line in block[start:end]).split()), lead))
            lead = ""
        else:
            joined = " ".join(" ".join(line for _, line in block).split())
            units.append((block[0][0], joined, ""))
            lead = "" if first.startswith("#") else joined
    return units


def undated_figures(text: str, checked: tuple[str, ...] = ()) -> list[tuple[int, list[str]]]:
    """(line, figures) of every unit of a page (`prose_units`) whose measured figures lack their date, or for a time
    or a speed its machine, in the unit and its lead-in; the phrases `checked` (figures checked against their source
    files) and SETTINGS left out."""
    found = []
    for line, unit, lead in prose_units(text):
        for phrase in (*checked, *SETTINGS):
            unit = unit.replace(phrase, " ")
        figures = list(FIGURE.finditer(unit))
        context = f"{unit} {lead}"
        dated, machine = DATE.search(context), MACHINE.search(context)
        missing = [m.group(0) for m in figures if not dated or (m.group("speed") and not machine)]
        if missing:
            found.append((line, missing))
    return found


def readme_checked_figures() -> tuple[str, ...]:
    """README's "Results" figures as docs/tables.py checks them against their source files (`readme_figures`)."""
    spec = importlib.util.spec_from_file_location("docs_tables", REPO / "docs" / "tables.py")
    tables = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = tables  # dataclasses look their module up
    spec.loader.exec_module(tables)
    return tuple(figure for figures in tables.readme_figures().values() for figure, _ in figures)


def test_measured_figures_in_prose_carry_a_date_or_come_from_a_result_file():
    readme = readme_checked_figures()
    problems = []
    for file in sorted({file for pattern in FIGURE_PAGES for file in REPO.glob(pattern)}):
        if file.name == "changelog.md":  # CHANGELOG.md, included
            continue
        checked = readme if file.name == "README.md" else ()
        for line, figures in undated_figures(file.read_text(encoding="utf-8"), checked):
            problems.append(f"{file.relative_to(REPO)}:{line}: {', '.join(figures)}")
    assert not problems, (
        "measured figures in prose without the date of their measurement (and for times and speeds the machine) in "
        "their paragraph or list item, or in the paragraph that leads in to their list; date them (`2 CPU cores, "
        "2026-11-27`), or generate them from their result file with docs/tables.py:\n" + "\n".join(problems)
    )


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("It takes 7 minutes and 9,000 tokens/s.", [(1, ["7 minutes", "9,000 tokens/s"])]),
        ("It takes 7 minutes on 2 CPU cores (2026-11-26).", []),
        ("It takes 7 minutes (2026-11-26).", [(1, ["7 minutes"])]),  # a time needs its machine
        ("The loss is 2.71 nats (2026-11-27).\n\nA share of 58%.", [(3, ["58%"])]),
        ("It ends at loss 4.3371 and accuracy 0.867, dropout 0.1.", [(1, ["loss 4.3371", "accuracy 0.867"])]),
        ("Ours is 1.40× BERT.\n\nA batch of 32 × 128 at 4× the length, 1e-10 apart.", [(1, ["1.40×"])]),
        ("**Findings** (2026-11-26, 2 CPU cores)\n\n- rises 1.6 nats\n- 0.5 ms a call", []),
        ("Lead.\n\n```bash\nrun  # 9 minutes\n```\n\n- rises 1.6 nats\n  over 4×", [(7, ["1.6 nats"])]),
        ("## On 2026-11-26\n\n- rises 1.6 nats", [(3, ["1.6 nats"])]),  # a heading leads in to nothing
        (
            "<!-- not run: 9 minutes -->\n```bash\nx\n```\n\n<!-- table: t (python docs/tables.py) -->\n| 2.80× |\n"
            "<!-- end table -->\n\nMasks (15% of the tokens).",
            [],
        ),
    ],
)
def test_undated_figures_are_found_and_dated_or_generated_ones_left_out(text, expected):
    assert undated_figures(text) == expected


# flags of other programs that the library's texts name: `accelerate launch`'s, argparse's own, the plots command's
OTHER_FLAGS = {"--cpu", "--multi_gpu", "--num_machines", "--num_processes", "--help", "--by_tokens"}


def test_every_flag_the_library_names_is_a_flag_of_one_of_its_commands():
    """Help texts, error lines and docstrings of the library name flags (`--max_seq_length must be ...`): each is a
    field of a command's run configuration (or publish's own flag, or one of another program's, `OTHER_FLAGS`), so
    that renaming a setting cannot leave a text naming the old flag. `--name` stands for any flag."""
    import dataclasses

    from sinusoidal_encoder_training import configs

    flags = {"--hub_model_id", "--private", "--commit_message", "--dry_run", "--name", *OTHER_FLAGS}  # publish's
    for value in vars(configs).values():
        if isinstance(value, type) and dataclasses.is_dataclass(value):
            flags |= {f"--{field.name}" for field in dataclasses.fields(value)}
    unknown = []
    for file in sorted([*(REPO / "training").rglob("*.py"), *(REPO / "modeling").rglob("*.py")]):
        for number, line in enumerate(file.read_text(encoding="utf-8").splitlines(), start=1):
            for flag in re.findall(r"(?<![\w-])--[a-z][a-z0-9_]*", line):
                if flag not in flags:
                    unknown.append(f"{file.relative_to(REPO)}:{number}: {flag}")
    assert not unknown, unknown


def test_the_files_copied_into_hub_repositories_name_no_path_of_this_repository():
    """modeling/sinusoidal_encoder/ is copied as-is next to the weights of every saved folder, where this repository's
    files do not exist (docs/layout.md)."""
    found = [
        f"{file.name}:{line}: {path}"
        for file in sorted((REPO / "modeling" / "sinusoidal_encoder").glob("*.py"))
        for line, path in named_paths(file.read_text(encoding="utf-8"))
    ]
    assert not found, found


# the main job's pages: where its minutes are stated (prose, a "not run" comment, the script's header)
MAIN_JOB_PAGES = ("README.md", "docs/*.md", "scripts/*.sh")
MAIN_JOB = re.compile(r"main job|pretrain\.sh|pretrains the")
MINUTES = re.compile(rf"{NUMBER}(?: to {NUMBER})?\s?minutes?\b")


def main_job_time_statements(text: str) -> list[tuple[int, str]]:
    """(line, text) of every paragraph, HTML comment or comment block of a page that states a time in minutes of the
    main job (minutes within 100 characters after the job is named) without naming bf16, on which that time
    depends."""
    found = []
    chunks = re.split(r"\n\s*\n|(?=<!--)|(?<=-->)", text)
    line = 1
    for chunk in chunks:
        flat = " ".join(chunk.split())
        job = [match.end() for match in MAIN_JOB.finditer(flat)]
        timed = any(0 <= match.start() - end <= 100 for match in MINUTES.finditer(flat) for end in job)
        if timed and "bf16" not in chunk:
            found.append((line, " ".join(chunk.split())[:120]))
        line += chunk.count("\n")
    return found


def test_the_main_jobs_minutes_say_that_they_depend_on_bf16_arithmetic():
    """The main job trains in bf16 where the CPU has bf16 arithmetic and in float32 elsewhere, and takes about three
    times as long without it (9 against 28.5 minutes on 2 CPU cores, 2026-11-27): every statement of its minutes
    says on which, or gives both."""
    problems = []
    for file in sorted({file for pattern in MAIN_JOB_PAGES for file in REPO.glob(pattern)}):
        if file.name == "changelog.md":
            continue
        for line, text in main_job_time_statements(file.read_text(encoding="utf-8")):
            problems.append(f"{file.relative_to(REPO)}:~{line}: {text}")
    assert not problems, "the main job's minutes without the bf16 arithmetic they depend on:\n" + "\n".join(problems)


@pytest.mark.parametrize(
    ("text", "flagged"),
    [
        ("<!-- not run: the main job, about 9 minutes on 2 CPU cores -->", True),
        ("<!-- not run: the main job, 9 to 29 minutes on 2 CPU cores, by bf16 arithmetic -->", False),
        ("It pretrains the model (about 9 minutes with the setup on 2 CPU cores, 2026-11-26).", True),
        ("The length study took 40 minutes on 2 CPU cores (2026-11-26).", False),
        ("<!-- not run: the distillation takes about 30 minutes on 2 CPU cores, after the main job -->", False),
    ],
)
def test_main_job_times_without_bf16_are_found(text, flagged):
    assert bool(main_job_time_statements(text)) == flagged


def layout_tree() -> dict[str, set[str]]:
    """The `.py` files docs/layout.md's tree names under each folder (its first `text` block: a folder at the line's
    start, its subfolders on lines indented by two spaces, ending in `/`; the files below a folder on lines indented
    two spaces deeper than it, several to a line, before their description)."""
    text = (REPO / "docs" / "layout.md").read_text(encoding="utf-8")
    block = text.split("```text\n", 1)[1].split("```", 1)[0]
    named: dict[str, set[str]] = {}
    folders: dict[int, str] = {}  # indentation -> the folder opened at it
    for line in block.splitlines():
        indent = len(line) - len(line.lstrip(" "))
        first = line.strip().split("  ")[0]
        if not line.strip() or indent % 2 or indent > 2 + max(folders, default=-2):
            continue  # a description's continuation
        if line.split()[0].endswith("/"):
            folders = {depth: folder for depth, folder in folders.items() if depth < indent}
            folders[indent] = (folders.get(indent - 2, "") if indent else "") + line.split()[0]
        elif indent - 2 in folders and re.match(r"\w+\.py\b", first):
            named.setdefault(folders[indent - 2], set()).update(re.findall(r"\w+\.py\b", first))
    return named


PACKAGE_FOLDERS = ["modeling/sinusoidal_encoder/"] + [
    path.parent.relative_to(REPO).as_posix() + "/"
    for path in sorted((REPO / "training" / "sinusoidal_encoder_training").rglob("__init__.py"))
]


@pytest.mark.parametrize("package", PACKAGE_FOLDERS)
def test_the_layout_page_names_every_module_of_each_package_and_no_other(package):
    """docs/layout.md's tree is checked against the code: every module of each package and subpackage is named in
    it, under its folder (a subpackage's `__init__.py` is its folder's line, unless the tree names it), and every
    module it names there exists."""
    on_disk = {path.name for path in (REPO / package).glob("*.py")}
    named = layout_tree().get(package, set())
    if package.count("/") > 2 and "__init__.py" not in named:
        on_disk.discard("__init__.py")
    assert on_disk - named == set(), f"modules docs/layout.md does not name: {sorted(on_disk - named)}"
    assert named - on_disk == set(), f"modules docs/layout.md names that do not exist: {sorted(named - on_disk)}"
