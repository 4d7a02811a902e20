"""The GPU command's work, run by `scripts/test_gpu.sh` with the Python that has CUDA torch: set up what is missing
from a local wheel folder (no registry), run the single-GPU tests, then the GPU benchmark, and write the results.

    bash scripts/test_gpu.sh RESULTS_DIR [--wheels DIR] [--no_benchmark] [--benchmark_budget SECONDS]
        [--loop_budget SECONDS] [--loop_cells CELL ...]
    bash scripts/test_gpu.sh --fill_wheels DIR        # beforehand, with a registry: the folder to carry along

Setup: the distributions the tests and the benchmark import (`REQUIRED`, and what they require in turn) are looked
up in this Python; those missing are installed from the wheel folder with `pip install --no-index --no-deps` into a
temporary folder put on the path (nothing is installed into the machine's Python, nothing fetched). What is missing
and not in the folder stops the command with one line naming it. When `sinusoidal_encoder` is not installed, the
checkout's source roots (`modeling/`, `training/`) go on the path. Without a CUDA GPU the command stops there with
one line, after the setup (which is how it is tested on a CPU: tests/repository/test_gpu_command.py).

RESULTS_DIR receives seven files: `gpu-summary.md` and `.json` (the device, torch/CUDA/transformers versions, the
tests' outcome, what was skipped and why, the benchmark's report), `gpu-tests.xml` (pytest's JUnit report) and
`gpu-tests.log`, and the benchmark's `gpu-benchmark.md`, `.json` and `.log` (benchmarks/gpu/run.py); and, with the
benchmark, a folder `loop-TASK-SIZE-eager` or `loop-TASK-SIZE-MODE` (compiled) for each cell of `LOOP_CELLS`: the
real training loop against its bare step (benchmarks/loop_against_step/run.py: `loop-against-step.md`, `.json` and
`.log`), whose reports the summary shows.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ElementTree
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# what the single-GPU tests and the GPU benchmark import: the model's dependencies, the training extra's (but
# tensorboard and matplotlib, which only optional features use), and pytest
REQUIRED = ("torch", "transformers", "safetensors", "accelerate", "datasets", "tokenizers", "tqdm", "jinja2", "pytest")
# the Python of the GPU machines the command is checked on, besides the one filling the folder
GPU_MACHINE_PYTHON = "3.12"
# distributions checked for but not followed: torch's own requirements (CUDA libraries) vary with its build
LEAVES = frozenset({"torch"})
TESTS_TIMEOUT = 240  # seconds: the single-GPU tests, a bf16 training run and its kill and resume included
BENCHMARK_BUDGET = 180  # seconds of benchmark cells; with the tests the command stays within 8 minutes


class SetupError(Exception):
    """A problem the user fixes, said in one line."""


def canonical(name: str) -> str:
    """A distribution's name as pip compares them (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_closure(roots: tuple[str, ...] = REQUIRED) -> tuple[dict[str, str], set[str]]:
    """The distributions `roots` need, following their requirements (and the extras they ask of each other) as far
    as this Python has them, `LEAVES` aside: ({name: installed version}, {names missing}). Versions are not
    compared: what the machine has is what runs."""
    from packaging.requirements import Requirement

    installed: dict[str, str] = {}
    missing: set[str] = set()
    pending = [(root, frozenset()) for root in roots]
    seen: set[tuple[str, frozenset]] = set()
    while pending:
        name, extras = pending.pop()
        key = (canonical(name), extras)
        if key in seen:
            continue
        seen.add(key)
        try:
            distribution = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            missing.add(canonical(name))
            continue
        installed[canonical(name)] = distribution.version
        if canonical(name) in LEAVES:
            continue
        for line in distribution.requires or []:
            requirement = Requirement(line)
            marker = requirement.marker
            if marker is None or any(marker.evaluate({"extra": extra}) for extra in extras or {""}):
                pending.append((requirement.name, frozenset(requirement.extras)))
    return installed, missing


def wheels_for(names: set[str], folder: Path) -> tuple[list[Path], set[str], list[str]]:
    """The wheels in `folder` that install `names` on this Python: for each name the newest whose requirements the
    installed distributions meet (else the newest, with a warning). Returns (wheels, names without one, warnings)."""
    from packaging.tags import sys_tags
    from packaging.utils import parse_wheel_filename

    supported = set(sys_tags())
    candidates: dict[str, list[tuple]] = {}
    for path in folder.glob("*.whl"):
        try:
            name, version, _, tags = parse_wheel_filename(path.name)
        except ValueError:
            continue
        if canonical(name) in names and tags & supported:
            candidates.setdefault(canonical(name), []).append((version, path))
    chosen, warnings = [], []
    for found in candidates.values():
        found.sort(reverse=True)
        conflicts = {path: unmet_requirements(path) for _, path in found}
        fitting = [path for _, path in found if not conflicts[path]]
        chosen.append(fitting[0] if fitting else found[0][1])
        if not fitting:
            warnings.append(f"{found[0][1].name} asks for {', '.join(conflicts[found[0][1]])}")
    return chosen, names - set(candidates), warnings


def unmet_requirements(wheel: Path) -> list[str]:
    """The requirements of a wheel (its METADATA) that the installed distributions do not meet: 'name spec
    (installed version)'. Distributions not installed are not counted (they come from the folder too)."""
    import zipfile

    from packaging.requirements import Requirement

    with zipfile.ZipFile(wheel) as archive:
        metadata = next(name for name in archive.namelist() if name.endswith(".dist-info/METADATA"))
        lines = archive.read(metadata).decode("utf-8", "replace").splitlines()
    unmet = []
    for line in lines:
        if not line.startswith("Requires-Dist:"):
            continue
        requirement = Requirement(line.partition(":")[2].strip())
        if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
            continue
        try:
            version = importlib.metadata.version(requirement.name)
        except importlib.metadata.PackageNotFoundError:
            continue
        if not requirement.specifier.contains(version, prereleases=True):
            unmet.append(f"{requirement.name}{requirement.specifier} ({version} installed)")
    return unmet


def install_missing(wheel_folder: Path | None, site: Path) -> list[str]:
    """Install into `site` what `REQUIRED` lacks, from `wheel_folder`, round after round (an installed wheel's own
    requirements show only once it is there); put `site` on this process's path. Returns the installed wheels'
    names. Raises SetupError naming what is missing and not in the folder."""
    _, missing = requirement_closure()
    if not missing:
        return []
    fill = f"fill one where a registry is reachable: bash scripts/test_gpu.sh --fill_wheels {wheel_folder or 'DIR'}"
    if wheel_folder is None:
        raise SetupError(f"missing from this Python: {', '.join(sorted(missing))}; pass --wheels DIR ({fill}).")
    sys.path.insert(0, str(site))
    installed: list[str] = []
    while missing:
        wheels, absent, warnings = wheels_for(missing, wheel_folder)
        if absent:
            raise SetupError(
                f"missing from this Python and without a wheel for it in {wheel_folder}: "
                f"{', '.join(sorted(absent))} ({fill}; packages with compiled code must be installed on the machine "
                "itself)."
            )
        for warning in warnings:
            print(f"test_gpu.sh: warning: {warning}; installing it anyway", file=sys.stderr)
        pip = [sys.executable, "-m", "pip", "install", "--quiet", "--no-index", "--no-deps", "--no-compile"]
        proc = subprocess.run(
            [*pip, "--disable-pip-version-check", "--upgrade", "--target", str(site), *map(str, wheels)],
            capture_output=True,
            text=True,
            check=False,
        )
        if proc.returncode != 0:
            last = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
            names = ", ".join(path.name for path in wheels)
            raise SetupError(f"installing {names} from {wheel_folder} failed: {last}")
        installed += [path.name for path in wheels]
        importlib.invalidate_caches()
        _, missing = requirement_closure()
    return sorted(installed)


def source_roots() -> list[str]:
    """The checkout's source roots when `sinusoidal_encoder` is not installed (none when it is)."""
    try:
        importlib.metadata.distribution("sinusoidal-encoder")
        import sinusoidal_encoder  # noqa: F401

        return []
    except (importlib.metadata.PackageNotFoundError, ModuleNotFoundError):
        return [str(REPO / "modeling"), str(REPO / "training")]


def fill_wheels(folder: Path) -> list[str]:
    """Download into `folder` the pure-Python wheels of everything `REQUIRED` needs, at the versions installed here,
    for this Python and the GPU machines' (a few MB; compiled packages, torch first, must be on the GPU machine)."""
    installed, missing = requirement_closure()
    if missing:
        raise SetupError(f"this Python lacks {', '.join(sorted(missing))}: run it from the set-up .venv")
    pure = sorted(name for name in installed if _is_pure_python(name))
    folder.mkdir(parents=True, exist_ok=True)
    pythons = sorted({f"{sys.version_info.major}.{sys.version_info.minor}", GPU_MACHINE_PYTHON})
    for python in pythons:
        command = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:"]
        command += ["--python-version", python, "--dest", str(folder)]
        proc = subprocess.run(
            [*command, *(f"{name}=={installed[name]}" for name in pure)], capture_output=True, text=True, check=False
        )
        if proc.returncode != 0:
            last = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
            raise SetupError(f"downloading the wheels for Python {python} failed: {last}")
    return sorted(path.name for path in folder.glob("*.whl"))


def _is_pure_python(name: str) -> bool:
    """Whether an installed distribution came from a pure-Python wheel (`Root-Is-Purelib: true`)."""
    wheel = importlib.metadata.distribution(name).read_text("WHEEL") or ""
    return "root-is-purelib: true" in wheel.lower()


# ----------------------------------------------------------------------------------------------------------------
# the run


def cuda_line() -> str | None:
    """None when torch sees a CUDA GPU; else the one line that says it does not, and with which torch."""
    import torch

    if torch.cuda.is_available():
        return None
    build = f"CUDA {torch.version.cuda} build" if torch.version.cuda else "CPU-only build"
    return (
        f"no CUDA GPU is visible to torch {torch.__version__} ({build}) in {sys.executable}: run this on a machine "
        "with a GPU, with the Python that has CUDA torch (PYTHON=... bash scripts/test_gpu.sh ...)."
    )


def device_description() -> dict:
    import torch
    import transformers

    properties = torch.cuda.get_device_properties(0)
    return {
        "name": torch.cuda.get_device_name(0),
        "count": torch.cuda.device_count(),
        "memory_gib": round(properties.total_memory / 2**30, 1),
        "capability": ".".join(map(str, torch.cuda.get_device_capability(0))),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "transformers": transformers.__version__,
        "python": platform.python_version(),
    }


def test_outcomes(junit: Path) -> dict:
    """Counts and the skipped tests with their reasons, from pytest's JUnit XML."""
    outcomes = {"passed": 0, "failed": 0, "skipped": 0, "errors": 0, "failures": [], "skips": []}
    if not junit.exists():
        return outcomes
    for case in ElementTree.parse(junit).getroot().iter("testcase"):
        name = case.get("name", "?")
        if case.find("skipped") is not None:
            outcomes["skipped"] += 1
            reason = case.find("skipped").get("message", "")
            outcomes["skips"].append({"test": name, "reason": re.sub(r"^Skipped: ", "", reason)})
        elif case.find("failure") is not None or case.find("error") is not None:
            kind = "failed" if case.find("failure") is not None else "errors"
            outcomes[kind] += 1
            outcomes["failures"].append(name)
        else:
            outcomes["passed"] += 1
    return outcomes


def skipped_line(skips: list[dict]) -> str:
    """What was skipped and why, in one line: the reasons, each with the tests it skipped."""
    if not skips:
        return "Skipped: nothing."
    by_reason: dict[str, list[str]] = {}
    for skip in skips:
        by_reason.setdefault(skip["reason"], []).append(skip["test"])
    parts = [f"{', '.join(tests)} ({reason})" for reason, tests in by_reason.items()]
    return "Skipped: " + "; ".join(parts) + "."


NO_BENCHMARK = "Not run (--no_benchmark or --benchmark_budget 0), or it wrote no result."


def summary_markdown(summary: dict) -> str:
    device = summary["device"]
    tests = summary["tests"]
    lines = [
        "# The GPU command's results",
        "",
        f"`{summary['command']}` on {summary['date']}, commit {summary['commit']}: {device['name']} "
        f"({device['count']} GPU, {device['memory_gib']} GiB, compute capability {device['capability']}), "
        f"Python {device['python']}, torch {device['torch']} (CUDA {device['cuda']}), transformers "
        f"{device['transformers']}. Installed from the wheel folder: {', '.join(summary['installed']) or 'nothing'}.",
        "",
        f"## Single-GPU tests: {tests['passed']} passed, {tests['failed']} failed, {tests['errors']} errors, "
        f"{tests['skipped']} skipped ({summary['tests_seconds']:.0f} s)",
        "",
        summary["skipped_line"],
    ]
    if tests["failures"]:
        lines += ["", "Failed: " + ", ".join(tests["failures"]) + " (gpu-tests.log)."]
    lines += ["", f"## Benchmark ({summary['benchmark_seconds']:.0f} s)", ""]
    lines.append(NO_BENCHMARK if summary["benchmark"] is None else summary["benchmark"])
    for cell in summary.get("loop_against_step", []):
        lines += ["", f"## The loop against the step: {cell['name']} ({cell['seconds']:.0f} s)", ""]
        if cell["status"] is None:
            lines.append(f"Not run: the loop cells' {cell['budget']:.0f} s (--loop_budget) were spent.")
        else:
            lines.append(cell["report"] or f"Not measured (exit status {cell['status']}; {cell['log']}).")
    return "\n".join(lines) + "\n"


# the loop-against-step cells (benchmarks/loop_against_step/run.py), in the order they run: task, size, steps, time
# limit in seconds, the torch.compile mode (None: eager) and further arguments. The small model first (whose loop fed
# the GPU at a fifth of its step's speed), eager then compiled, then base. The small model's fine-tuning loop kept
# 0.63 of its step on an H200 (2026-11-28; the step's padded layout and attention without dropout, timed there, were
# slower; its bare step then repeated rows of random tokens, 72 real tokens a row where the loop's rows have 66: it
# now steps on the loop's own rows), so its step is also timed over 8 batches in turn (the loop's batches change
# their real tokens from one to the next; the bare step repeats one), and profiled; `--profile` also gives the loop's
# main process by function, as for the CUDA-graph pretraining loop (0.64 of its step on that H200). Compiled: the
# small model in reduce-overhead (CUDA graphs), where its step is bound by the host: pretraining's whole blocks
# (masks counted exactly), and fine-tuning's batches padded to a multiple of 32 tokens (a few shapes, each recorded
# once, where padding to the longest row would record one per length); then every model in the default mode. A
# compiled cell compiles the bare step and the loop from nothing, hence its longer limit. The cells
# share --loop_budget: each runs under what is left of it (at most its own limit), and those that find less than
# LEAST_CELL_SECONDS left are reported as not run.
WHERE_THE_STEP_GOES = ("--step_batches", "8", "--profile")
LOOP_CELLS = (
    ("pretraining", "small", 300, 200, None, ()),
    ("finetuning", "small", 300, 200, None, WHERE_THE_STEP_GOES),
    ("pretraining", "small", 300, 300, "reduce-overhead", ("--profile",)),
    ("finetuning", "small", 300, 300, "reduce-overhead", ("--pad_to_multiple_of", "32")),
    ("finetuning", "small", 300, 300, "default", ()),
    ("pretraining", "base", 60, 200, None, ()),
    ("finetuning", "base", 60, 200, None, ()),
    ("pretraining", "base", 60, 300, "default", ()),
    ("finetuning", "base", 60, 300, "default", ()),
)
LOOP_BUDGET = 180  # seconds of loop cells by default: with the tests (about 165 s) and the benchmark, about 9 minutes
LEAST_CELL_SECONDS = 30


def cell_name(task: str, size: str, mode: str | None) -> str:
    """A loop cell's name, that of its folder in RESULTS_DIR: loop-TASK-SIZE-eager, or loop-TASK-SIZE-MODE."""
    return f"loop-{task}-{size}-{mode or 'eager'}"


CELL_NAMES = [cell_name(task, size, mode) for task, size, _, _, mode, _ in LOOP_CELLS]


def loop_cells(
    results: Path,
    environment: dict,
    budget: float = LOOP_BUDGET,
    after_each: Callable[[list[dict]], None] = lambda cells: None,
    only: list[str] | None = None,
) -> list[dict]:
    """The real pretraining and fine-tuning loops against their bare steps at each size of `LOOP_CELLS`, eager and
    compiled (bf16), in its order within `budget` seconds (each under what is left, at most its own limit), into
    RESULTS_DIR/loop-TASK-SIZE-eager/ or loop-TASK-SIZE-MODE/: its report, or why there is none; with `only`, the
    cells of those names alone. `after_each` is given the cells so far after each one that ran (the command writes
    its summary then)."""
    cells, spent = [], 0.0
    for task, size, steps, limit, mode, extra in LOOP_CELLS:
        if only is not None and cell_name(task, size, mode) not in only:
            continue
        folder = results / cell_name(task, size, mode)
        how = "eager" if mode is None else f"compiled ({mode})"
        cell = {"name": f"{task}, {size}, {how}, {steps} steps", "log": str(folder / "loop-against-step.log")}
        if budget - spent < LEAST_CELL_SECONDS:
            cells.append({**cell, "status": None, "seconds": 0.0, "report": None, "budget": budget})
            continue
        command = [sys.executable, "-m", "benchmarks.loop_against_step.run", "--task", task, "--size", size]
        command += ["--steps", str(steps), "--output_dir", str(folder)]
        if mode is not None:
            command += ["--torch_compile", "--torch_compile_mode", mode]
        command += extra
        folder.mkdir(parents=True, exist_ok=True)
        status, seconds = run_step(
            command, folder / "loop-against-step.log", int(min(limit, budget - spent)), environment
        )
        spent += seconds
        report = folder / "loop-against-step.md"
        cells.append(
            {**cell, "status": status, "seconds": seconds, "report": report.read_text() if report.exists() else None}
        )
        after_each(cells)
    return cells


def run_step(command: list[str], log: Path | None, timeout: int, environment: dict) -> tuple[int, float]:
    """A step as a subprocess under a time limit, its output shown and (with `log`) kept: (exit status, seconds)."""
    start = datetime.datetime.now()
    with open(log, "w") if log else open(os.devnull, "w") as keep:
        proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=environment)
        try:
            for line in proc.stdout:
                sys.stdout.write(line)
                keep.write(line)
            status = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.terminate()  # SIGTERM first: the benchmark records the cell it was in before it ends
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
            status = 124
            print(f"stopped after {timeout} s: {' '.join(command[:4])} ...", flush=True)
    return status, (datetime.datetime.now() - start).total_seconds()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="scripts/test_gpu.sh",
        description=__doc__,
        epilog="Arguments after `--` go to pytest (e.g. `-- -k sdpa` runs only the tests that match).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("results_dir", nargs="?", help="Where the results go (created; seven files).")
    parser.add_argument("--wheels", type=Path, default=None, help="A folder of wheels to install what is missing.")
    parser.add_argument("--no_benchmark", action="store_true", help="Only the tests.")
    parser.add_argument(
        "--benchmark_budget",
        type=int,
        default=BENCHMARK_BUDGET,
        help="Seconds of benchmark cells (0: no benchmark; the loop cells still run).",
    )
    parser.add_argument(
        "--loop_budget",
        type=int,
        default=LOOP_BUDGET,
        help="Seconds of loop-against-step cells, run in the order of LOOP_CELLS (0: none).",
    )
    parser.add_argument(
        "--loop_cells",
        nargs="+",
        default=None,
        choices=CELL_NAMES,
        metavar="CELL",
        help="Only these loop cells, in the order of LOOP_CELLS (default: all): " + ", ".join(CELL_NAMES) + ".",
    )
    parser.add_argument(
        "--fill_wheels",
        type=Path,
        default=None,
        metavar="DIR",
        help="Instead of running: download into DIR the pure-Python wheels a GPU machine may lack (needs a registry).",
    )
    # what follows `--` goes to pytest, wherever RESULTS_DIR stands (a positional after it would take it otherwise)
    argv = list(sys.argv[1:] if argv is None else argv)
    split = argv.index("--") if "--" in argv else len(argv)
    args = parser.parse_args(argv[:split])
    args.pytest_args = argv[split + 1 :]
    if args.fill_wheels is None:
        if args.results_dir is None:
            parser.error("give the folder for the results: bash scripts/test_gpu.sh RESULTS_DIR [--wheels DIR]")
        if Path(args.results_dir).exists() and not Path(args.results_dir).is_dir():
            parser.error(f"{args.results_dir} is a file; give a folder for the results.")
    if args.wheels is not None and not args.wheels.is_dir():
        parser.error(
            f"--wheels {args.wheels}: no such folder (fill one: bash scripts/test_gpu.sh --fill_wheels {args.wheels})."
        )
    if args.benchmark_budget < 0:
        parser.error(f"--benchmark_budget must be 0 (no benchmark) or more seconds, got {args.benchmark_budget}.")
    if args.loop_budget < 0:
        parser.error(f"--loop_budget must be 0 (no loop cells) or more seconds, got {args.loop_budget}.")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.fill_wheels is not None:
        try:
            names = fill_wheels(args.fill_wheels)
        except SetupError as error:
            print(f"test_gpu.sh: error: {error}", file=sys.stderr)
            return 2
        size = sum(path.stat().st_size for path in args.fill_wheels.glob("*.whl")) / 2**20
        print(f"{len(names)} wheels ({size:.1f} MiB) in {args.fill_wheels}: {', '.join(names)}")
        return 0
    with tempfile.TemporaryDirectory(prefix="gpu-site-") as site:  # what the wheels install, gone at the end
        return check(args, argv, Path(site))


def check(args: argparse.Namespace, argv: list[str] | None, site: Path) -> int:
    """The setup into `site` (a temporary folder put on the path), the tests, the benchmark and the loop cells."""
    try:
        installed = install_missing(args.wheels, site)
    except SetupError as error:
        print(f"test_gpu.sh: error: {error}", file=sys.stderr)
        return 2
    if installed:
        print(f"installed from {args.wheels}: {', '.join(installed)}", flush=True)
    roots = source_roots()
    if roots:
        print(
            "sinusoidal_encoder is not installed: this checkout's modeling/ and training/ go on the path", flush=True
        )
    paths = [str(site), *roots, str(REPO)]
    inherited = [path for path in os.environ.get("PYTHONPATH", "").split(os.pathsep) if path]
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join([*paths, *inherited])}
    environment.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    sys.path[:0] = paths
    line = cuda_line()
    if line is not None:
        print(f"test_gpu.sh: {line}", file=sys.stderr)
        return 1
    results = Path(args.results_dir)
    results.mkdir(parents=True, exist_ok=True)
    junit = results / "gpu-tests.xml"
    pytest = [sys.executable, "-m", "pytest", str(REPO / "tests" / "model" / "test_gpu.py"), "-m", "gpu", "-v", "-rs"]
    pytest += ["-p", "no:cacheprovider", f"--junitxml={junit}", *args.pytest_args]
    summary = {
        "command": "bash scripts/test_gpu.sh " + " ".join(argv if argv is not None else sys.argv[1:]),
        "date": datetime.date.today().isoformat(),
        "commit": os.environ.get("SINUSOIDAL_ENCODER_COMMIT") or _git_commit(),
        "device": device_description(),
        "installed": installed,
        "benchmark_status": None,
        "benchmark_seconds": 0.0,
        "benchmark": None,
        "loop_against_step": [],
    }

    def write_summary(**measured) -> None:  # after each step: a command stopped from outside keeps what it measured
        summary.update(measured)
        (results / "gpu-summary.json").write_text(json.dumps(summary, indent=1) + "\n")
        (results / "gpu-summary.md").write_text(summary_markdown(summary))

    tests_status, tests_seconds = run_step(pytest, results / "gpu-tests.log", TESTS_TIMEOUT, environment)
    outcomes = test_outcomes(junit)
    write_summary(
        tests=outcomes,
        tests_status=tests_status,
        tests_seconds=tests_seconds,
        skipped_line=skipped_line(outcomes["skips"]),
    )
    benchmark_status = None
    if not args.no_benchmark:
        if args.benchmark_budget > 0:
            command = [sys.executable, "-m", "benchmarks.gpu.run", "--output", str(results)]
            command += ["--time_budget", str(args.benchmark_budget)]
            log = results / "gpu-benchmark.log"
            benchmark_status, benchmark_seconds = run_step(command, log, args.benchmark_budget + 60, environment)
            report = results / "gpu-benchmark.md"
            benchmark = report.read_text() if report.exists() else None
            write_summary(benchmark_status=benchmark_status, benchmark_seconds=benchmark_seconds, benchmark=benchmark)
        loop_cells(
            results,
            environment,
            args.loop_budget,
            lambda cells: write_summary(loop_against_step=cells),
            only=args.loop_cells,
        )
    print(summary["skipped_line"])
    failed = tests_status != 0 or benchmark_status not in (None, 0)
    print(f"results in {results}: gpu-summary.md; {'something FAILED (see above)' if failed else 'all passed'}")
    return 1 if failed else 0


def _git_commit() -> str | None:
    proc = subprocess.run(["git", "describe", "--always", "--dirty"], cwd=REPO, capture_output=True, text=True)
    return proc.stdout.strip() or None


if __name__ == "__main__":
    sys.exit(main())
