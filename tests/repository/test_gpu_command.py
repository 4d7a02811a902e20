"""The GPU command (`scripts/test_gpu.sh`, its work in scripts/gpu_check.py) on a machine without a GPU: its setup
in a "bare" environment like the GPU machines' (torch, transformers, accelerate and compiled packages; the
pure-Python rest from a wheel folder, no registry), the one line it ends with when no GPU is visible, and its
reports from pytest's results."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest
from conftest import REPO

SCRIPT = REPO / "scripts" / "test_gpu.sh"
spec = importlib.util.spec_from_file_location("gpu_check", REPO / "scripts" / "gpu_check.py")
gpu_check = importlib.util.module_from_spec(spec)
spec.loader.exec_module(gpu_check)


def command(*args: str, python: str | None = None, cwd: Path = REPO, **environment) -> subprocess.CompletedProcess:
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHON", "PYTHONPATH")}
    env.update(environment)
    if python:
        env["PYTHON"] = python
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=300)


# ----------------------------------------------------------------------------------------------------------------
# the bare environment


def bare_environment(folder: Path) -> Path:
    """A venv that sees, of this one's distributions, torch, transformers and accelerate with what they need, and the
    compiled packages the tests' requirements reach (as a GPU machine has them), through symbolic links; returns its
    Python. The pure-Python rest (datasets, dill, multiprocess, pytest, ...) is missing, as on the GPU machines."""
    venv.EnvBuilder(with_pip=True).create(folder)
    python = folder / "bin" / "python"
    needed, _ = gpu_check.requirement_closure()
    base, _ = gpu_check.requirement_closure(("torch", "transformers", "accelerate"))
    visible = set(base) | {name for name in needed if not gpu_check._is_pure_python(name)}
    links = folder / "visible"
    links.mkdir()
    for name in visible:
        distribution = gpu_check.importlib.metadata.distribution(name)
        for top in {Path(str(path)).parts[0] for path in distribution.files or []}:
            target = Path(distribution.locate_file(top))
            if top != ".." and target.exists() and not (links / top).exists():
                (links / top).symlink_to(target)
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    Path(site, "visible.pth").write_text(str(links) + "\n")
    return python


@pytest.fixture(scope="module")
def wheels(tmp_path_factory) -> Path:
    """The wheel folder, filled by the documented command (it downloads from the registry: a step done beforehand,
    where one is reachable)."""
    folder = tmp_path_factory.mktemp("wheels")
    proc = command("--fill_wheels", str(folder))
    assert proc.returncode == 0, proc.stderr
    size = sum(path.stat().st_size for path in folder.glob("*.whl"))
    assert size < 32 * 2**20, size  # well under the 64 MiB a GPU machine's call carries, the tree included
    assert all(path.name.endswith("-none-any.whl") for path in folder.glob("*.whl"))  # pure Python only
    return folder


@pytest.mark.slow
def test_the_gpu_command_sets_up_a_bare_environment_from_wheels_and_stops_without_a_gpu(tmp_path, wheels):
    python = bare_environment(tmp_path / "bare")
    missing = subprocess.run([str(python), "-c", "import datasets"], capture_output=True, text=True)
    assert missing.returncode != 0  # as on the GPU machines
    offline = dict(PIP_NO_INDEX="1", PIP_INDEX_URL="http://127.0.0.1:9/simple", HTTP_PROXY="http://127.0.0.1:9")
    offline.update(HTTPS_PROXY="http://127.0.0.1:9", HF_HUB_OFFLINE="1")
    # without the wheel folder: one line naming what is missing and how to get it
    proc = command(str(tmp_path / "results"), python=str(python), **offline)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert lines[0].startswith("test_gpu.sh: error: missing from this Python: ") and "datasets" in lines[0]
    assert "--fill_wheels" in lines[0]
    # with it: the missing distributions installed from the folder, the checkout on the path, then the one line
    proc = command(str(tmp_path / "results"), "--wheels", str(wheels), python=str(python), **offline)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    installed = next(line for line in proc.stdout.splitlines() if line.startswith("installed from"))
    for name in ("datasets-", "dill-", "multiprocess-", "pytest-"):
        assert name in installed, installed
    assert "modeling/ and training/ go on the path" in proc.stdout
    assert "Traceback" not in proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("test_gpu.sh: no CUDA GPU is visible to torch"), proc.stderr
    assert str(python) in lines[0] and "CPU-only build" in lines[0]
    assert not (tmp_path / "results").exists()  # nothing written before a GPU is found
    # the folder without one of them: one line naming it
    partial = tmp_path / "partial"
    partial.mkdir()
    for wheel in wheels.glob("*.whl"):
        if not wheel.name.startswith("dill-"):
            (partial / wheel.name).symlink_to(wheel)
    proc = command(str(tmp_path / "results"), "--wheels", str(partial), python=str(python), **offline)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert f"without a wheel for it in {partial}: dill (fill one" in lines[0]


def test_the_gpu_command_picks_a_python_with_torch_and_says_when_none_has_a_gpu(tmp_path):
    """In this checkout: .venv's Python (CPU torch, everything installed) is the one with torch; no GPU: one line.
    Its temporary folder (where wheels would be installed) is gone after it."""
    (tmp_path / "tmp").mkdir()
    proc = command(str(tmp_path / "results"), TMPDIR=str(tmp_path / "tmp"))
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 1 and len(lines) == 1, proc.stdout + proc.stderr
    assert lines[0].startswith("test_gpu.sh: no CUDA GPU is visible to torch")
    assert "installed from" not in proc.stdout  # nothing was missing
    assert not any((tmp_path / "tmp").iterdir())
    proc = command(str(tmp_path / "results"), python=str(tmp_path / "no-such-python"))
    assert proc.returncode == 2 and proc.stderr.startswith("test_gpu.sh: error: no Python with torch found")


@pytest.mark.parametrize(
    "args, message",
    [
        ([], "give the folder for the results"),
        (["{file}"], "is a file; give a folder for the results"),
        (["out", "--benchmark_budget", "-1"], "--benchmark_budget must be 0 (no benchmark) or more seconds"),
        (["out", "--loop_cells", "loop-pretraining-huge-eager"], "argument --loop_cells: invalid choice"),
        (["out", "--loop_budget", "-1"], "--loop_budget must be 0 (no loop cells) or more seconds"),
        (["out", "--wheels", "{missing}"], "no such folder"),
    ],
)
def test_bad_arguments_get_one_line(tmp_path, args, message):
    (tmp_path / "file").write_text("")
    args = [arg.format(file=tmp_path / "file", missing=tmp_path / "missing") for arg in args]
    proc = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "gpu_check.py"), *args], capture_output=True, text=True, cwd=tmp_path
    )
    assert proc.returncode == 2 and message in proc.stderr.strip().splitlines()[-1]


# ----------------------------------------------------------------------------------------------------------------
# the reports

JUNIT = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" tests="5">
<testcase classname="tests.model.test_gpu" name="test_sdpa_on_cuda_equals_the_cpu" time="0.5"/>
<testcase classname="tests.model.test_gpu" name="test_ddp_with_the_multi_gpu_config" time="0.0">
<skipped type="pytest.skip" message="needs 2 CUDA GPUs, found 1">skip</skipped></testcase>
<testcase classname="tests.model.test_gpu" name="test_fsdp_trains" time="0.0">
<skipped type="pytest.skip" message="needs 2 CUDA GPUs, found 1">skip</skipped></testcase>
<testcase classname="tests.model.test_gpu" name="test_flash_attention_varlen_equals_sdpa[dtype0]" time="0.0">
<skipped type="pytest.skip" message="could not import 'flash_attn': flash-attn is not installed">s</skipped></testcase>
<testcase classname="tests.model.test_gpu" name="test_bf16_training" time="3.0"><failure message="boom">x</failure>
</testcase></testsuite></testsuites>"""


def test_the_outcomes_and_the_skipped_line_come_from_pytests_junit_report(tmp_path):
    (tmp_path / "junit.xml").write_text(JUNIT)
    outcomes = gpu_check.test_outcomes(tmp_path / "junit.xml")
    assert (outcomes["passed"], outcomes["failed"], outcomes["skipped"]) == (1, 1, 3)
    assert outcomes["failures"] == ["test_bf16_training"]
    line = gpu_check.skipped_line(outcomes["skips"])
    assert line == (
        "Skipped: test_ddp_with_the_multi_gpu_config, test_fsdp_trains (needs 2 CUDA GPUs, found 1); "
        "test_flash_attention_varlen_equals_sdpa[dtype0] (could not import 'flash_attn': flash-attn is not installed)."
    )
    assert gpu_check.skipped_line([]) == "Skipped: nothing."
    assert gpu_check.test_outcomes(tmp_path / "absent.xml")["passed"] == 0


SUMMARY = {
    "command": "bash scripts/test_gpu.sh out",
    "date": "2026-11-26",
    "commit": "abc1234",
    "device": {
        "name": "NVIDIA H100 80GB HBM3",
        "count": 1,
        "memory_gib": 79.2,
        "capability": "9.0",
        "torch": "2.11.0+cu130",
        "cuda": "13.0",
        "transformers": "5.17.0",
        "python": "3.12.3",
    },
    "installed": ["datasets-5.2.0-py3-none-any.whl"],
    "tests": {"passed": 9, "failed": 0, "errors": 0, "skipped": 2, "failures": [], "skips": []},
    "tests_seconds": 95.2,
    "skipped_line": "Skipped: nothing.",
    "benchmark_seconds": 170.0,
    "benchmark": None,
}


def test_the_summary_names_the_device_versions_tests_and_benchmark():
    summary = dict(SUMMARY)
    text = gpu_check.summary_markdown(summary)
    assert "NVIDIA H100 80GB HBM3" in text and "torch 2.11.0+cu130 (CUDA 13.0)" in text
    assert "9 passed, 0 failed, 0 errors, 2 skipped (95 s)" in text and gpu_check.NO_BENCHMARK in text
    assert "datasets-5.2.0-py3-none-any.whl" in text and "loop against the step" not in text
    summary["loop_against_step"] = [
        {"name": "small, 300 steps", "status": 0, "seconds": 41.0, "report": "The loop keeps 0.91 of", "log": "x"},
        {"name": "base, 60 steps", "status": 124, "seconds": 240.0, "report": None, "log": "out/loop-base/log"},
    ]
    text = gpu_check.summary_markdown(summary)
    assert "## The loop against the step: small, 300 steps (41 s)\n\nThe loop keeps 0.91 of" in text
    assert (
        "## The loop against the step: base, 60 steps (240 s)\n\nNot measured (exit status 124; out/loop-base/log)."
        in text
    )


def test_the_loop_cells_cover_both_tasks_and_sizes_eager_and_compiled_and_the_summary_shows_each(
    tmp_path, monkeypatch
):
    """Pretraining and fine-tuning at small and base, eager and compiled: the small model with CUDA graphs
    (reduce-overhead; its fine-tuning batches padded to a multiple of 32 tokens, a few shapes), every model in the
    default mode; each cell in its own folder under its time limit, its report in the summary."""
    runs = []

    def run_step(command, log, timeout, environment):
        runs.append((command, timeout))
        folder = Path(command[command.index("--output_dir") + 1])
        (folder / "loop-against-step.md").write_text(f"The report of {' '.join(command[3:])}.")
        return 0, 12.0

    monkeypatch.setattr(gpu_check, "run_step", run_step)
    cells = gpu_check.loop_cells(tmp_path, {}, budget=10_000)
    modes = {}
    for command, timeout in runs:
        assert command[1:3] == ["-m", "benchmarks.loop_against_step.run"] and timeout > 0
        task, size = command[command.index("--task") + 1], command[command.index("--size") + 1]
        compiled = "--torch_compile" in command
        mode = command[command.index("--torch_compile_mode") + 1] if compiled else None
        modes.setdefault((task, size, compiled), set()).add(mode)
        if mode == "reduce-overhead" and task == "finetuning":
            assert command[command.index("--pad_to_multiple_of") + 1] == "32"
    cases = {(task, size) for task in ("pretraining", "finetuning") for size in ("small", "base")}
    assert set(modes) == {(*case, compiled) for case in cases for compiled in (False, True)}
    assert modes["pretraining", "small", True] == {"reduce-overhead"}
    assert modes["finetuning", "small", True] == {"reduce-overhead", "default"}
    assert modes["pretraining", "base", True] == modes["finetuning", "base", True] == {"default"}
    folders = {Path(command[command.index("--output_dir") + 1]) for command, _ in runs}
    assert len(folders) == len(runs) == len(cells) and all(folder.parent == tmp_path for folder in folders)
    text = gpu_check.summary_markdown({**SUMMARY, "loop_against_step": cells})
    assert text.count("## The loop against the step: ") == len(runs)
    assert "## The loop against the step: pretraining, small, compiled (reduce-overhead), 300 steps (12 s)" in text
    assert "## The loop against the step: finetuning, base, eager, 60 steps (12 s)\n\nThe report of" in text
    # the small model's fine-tuning step also timed over 8 batches in turn, and profiled (its loop kept 0.63 of it)
    finetuning_small = next(c for c, _ in runs if "finetuning" in c and "small" in c and "--torch_compile" not in c)
    assert finetuning_small[finetuning_small.index("--step_batches") + 1] == "8"
    # ... and the small model's CUDA-graph pretraining loop profiled (0.64 of its step on an H200)
    profiled = {
        (c[c.index("--task") + 1], c[c.index("--size") + 1], "--torch_compile" in c)
        for c, _ in runs
        if "--profile" in c
    }
    assert "--profile" in finetuning_small and profiled == {
        ("finetuning", "small", False),
        ("pretraining", "small", True),
    }


def test_the_loop_cells_share_their_budget_small_model_first(tmp_path, monkeypatch):
    """Each cell runs under what is left of --loop_budget (at most its own limit), the small model's first; those
    that find too little left are not run and the summary says why."""
    limits = []

    def run_step(command, log, timeout, environment):
        limits.append((command[command.index("--size") + 1], timeout))
        return 0, 110.0

    monkeypatch.setattr(gpu_check, "run_step", run_step)
    cells = gpu_check.loop_cells(tmp_path, {}, budget=240)
    assert limits == [("small", 200), ("small", 130)]  # 240 s, then what the first left; then 20 s: too little
    assert [cell["status"] for cell in cells] == [0, 0] + [None] * (len(gpu_check.LOOP_CELLS) - 2)
    text = gpu_check.summary_markdown({**SUMMARY, "loop_against_step": cells})
    assert text.count("Not run: the loop cells' 240 s (--loop_budget) were spent.") == len(gpu_check.LOOP_CELLS) - 2
    assert gpu_check.loop_cells(tmp_path, {}, budget=0) and len(limits) == 2  # none run


def pretend_a_gpu(monkeypatch) -> None:
    """The command's checks of the machine as on a GPU machine with everything installed."""
    monkeypatch.setattr(gpu_check, "cuda_line", lambda: None)
    monkeypatch.setattr(gpu_check, "install_missing", lambda wheels, site: [])
    monkeypatch.setattr(gpu_check, "device_description", lambda: SUMMARY["device"])


def write_junit(pytest_command: list[str]) -> None:
    """What the single-GPU tests' pytest would write: JUNIT, where its `--junitxml=` says."""
    Path(next(a for a in pytest_command if a.startswith("--junitxml=")).split("=", 1)[1]).write_text(JUNIT)


def test_a_command_stopped_from_outside_keeps_a_summary_of_what_it_measured(tmp_path, monkeypatch):
    """The summary is written after the tests, after the benchmark and after each loop cell: a command killed during
    a cell (a device session's time limit) leaves the summary of everything before it."""
    pretend_a_gpu(monkeypatch)
    cells = []

    def run_step(command, log, timeout, environment):
        if "pytest" in command:
            write_junit(command)
        elif "benchmarks.gpu.run" in command:
            (tmp_path / "out" / "gpu-benchmark.md").write_text("The benchmark's report.")
        else:
            cells.append(command)
            if len(cells) == 2:
                raise KeyboardInterrupt  # the session's limit, during the second cell
            (Path(command[command.index("--output_dir") + 1]) / "loop-against-step.md").write_text("Cell one.")
        return 0, 5.0

    monkeypatch.setattr(gpu_check, "run_step", run_step)
    with pytest.raises(KeyboardInterrupt):
        gpu_check.main([str(tmp_path / "out"), "--loop_budget", "600"])
    text = (tmp_path / "out" / "gpu-summary.md").read_text()
    assert "## Single-GPU tests: 1 passed, 1 failed" in text and "The benchmark's report." in text
    assert text.count("## The loop against the step: ") == 1 and "Cell one." in text


def test_a_short_session_can_skip_the_benchmark_and_choose_its_loop_cells(tmp_path, monkeypatch):
    """`--benchmark_budget 0` runs no benchmark but the loop cells; `--loop_cells` runs those named, in the order of
    LOOP_CELLS whatever the order given."""
    pretend_a_gpu(monkeypatch)
    ran = []

    def run_step(command, log, timeout, environment):
        if "pytest" in command:
            write_junit(command)
        else:
            ran.append(
                command[2]
                if "benchmarks.gpu.run" in command
                else Path(command[command.index("--output_dir") + 1]).name
            )
        return 0, 5.0

    monkeypatch.setattr(gpu_check, "run_step", run_step)
    chosen = ["loop-pretraining-base-eager", "loop-pretraining-small-reduce-overhead"]
    argv = [str(tmp_path / "out"), "--benchmark_budget", "0", "--loop_budget", "600", "--loop_cells", *chosen]
    assert gpu_check.main(argv) == 0
    assert ran == ["loop-pretraining-small-reduce-overhead", "loop-pretraining-base-eager"]
    text = (tmp_path / "out" / "gpu-summary.md").read_text()
    assert gpu_check.NO_BENCHMARK in text and text.count("## The loop against the step: ") == 2
    assert set(gpu_check.CELL_NAMES) == {f"loop-{t}-{s}-{m or 'eager'}" for t, s, _, _, m, _ in gpu_check.LOOP_CELLS}


@pytest.mark.parametrize("results_first", [True, False])
def test_what_follows_the_double_dash_goes_to_pytest_wherever_the_results_folder_stands(
    tmp_path, monkeypatch, results_first
):
    """`-- -k sdpa` reaches pytest with RESULTS_DIR before the options or after them (before, argparse's positional
    list took nothing and refused the rest: "unrecognized arguments")."""
    pretend_a_gpu(monkeypatch)
    given = []

    def run_step(command, log, timeout, environment):
        if "pytest" in command:
            given.append(command[command.index(next(a for a in command if a.startswith("--junitxml"))) + 1 :])
            write_junit(command)
        return 0, 5.0

    monkeypatch.setattr(gpu_check, "run_step", run_step)
    options = ["--no_benchmark", "--loop_budget", "0"]
    out = str(tmp_path / "out")
    argv = [out, *options] if results_first else [*options, out]
    assert gpu_check.main([*argv, "--", "-k", "sdpa", "-x"]) == 0
    assert given == [["-k", "sdpa", "-x"]]


def test_a_wheel_whose_requirements_the_machine_does_not_meet_gives_way_to_one_that_fits(tmp_path):
    import zipfile

    def wheel(version: str, requires: str) -> None:
        path = tmp_path / f"examplepkg-{version}-py3-none-any.whl"
        with zipfile.ZipFile(path, "w") as archive:
            archive.writestr(
                f"examplepkg-{version}.dist-info/METADATA",
                f"Metadata-Version: 2.1\nName: examplepkg\nVersion: {version}\nRequires-Dist: {requires}\n",
            )

    import torch

    wheel("2.0", "torch>=999")  # newer, but asks for a torch this machine lacks
    wheel("1.0", f"torch>={torch.__version__.split('+')[0]}")
    chosen, absent, warnings = gpu_check.wheels_for({"examplepkg", "otherpkg"}, tmp_path)
    assert [path.name for path in chosen] == ["examplepkg-1.0-py3-none-any.whl"]
    assert absent == {"otherpkg"} and warnings == []
    (tmp_path / "examplepkg-1.0-py3-none-any.whl").unlink()
    chosen, _, warnings = gpu_check.wheels_for({"examplepkg"}, tmp_path)
    assert [path.name for path in chosen] == ["examplepkg-2.0-py3-none-any.whl"]
    assert warnings == [f"examplepkg-2.0-py3-none-any.whl asks for torch>=999 ({torch.__version__} installed)"]
