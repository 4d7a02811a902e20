"""A wheel built from the repository carries what the training library reads (the shipped tokenizer and the model
card template) and pretrains from another directory, in an environment where the repository is not importable
(its files are found in the installed package, never next to the checkout). Each of its console scripts works
with every extra installed, and with the base install either works or names, in one line, the extra it needs."""

from __future__ import annotations

import email
import functools
import importlib.metadata
import re
import shutil
import site
import subprocess
import sys
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from conftest import REPO, TINY, env, write_text_corpus
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from sinusoidal_encoder_training.cli.command_line import EXTRA_OF_MODULE, UsageError, front, require_extra
from sinusoidal_encoder_training.cli.commands import COMMANDS, SCRIPT_PREFIX

SOURCES = ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md", "model_card.md")
SOURCE_DIRS = ("modeling", "training", "tokenizer_config")


def build_wheel(tmp_path: Path) -> Path:
    """`pip wheel` on a copy of the package's sources (building in the checkout would leave build/ behind)."""
    source = tmp_path / "source"
    source.mkdir()
    for name in SOURCES:
        shutil.copy(REPO / name, source / name)
    for name in SOURCE_DIRS:
        shutil.copytree(REPO / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
    dist = tmp_path / "dist"
    cmd = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(dist), "."]
    proc = subprocess.run(cmd, cwd=source, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (wheel,) = dist.glob("sinusoidal_encoder-*.whl")
    return wheel


def fresh_environment(tmp_path: Path, wheel: Path) -> Path:
    """A new venv with the wheel installed (its console scripts in the venv's bin/) and the test environment's
    dependencies (torch, transformers, ...) visible through a .pth line, written after the install so that pip sees
    no other sinusoidal-encoder; the checkout's editable install is not visible (its .pth is not processed there).
    With HIDDEN_MODULES and HIDDEN_DISTRIBUTIONS (comma-separated) in its environment, those modules and their
    metadata cannot be found (`HIDE_EXTRAS`), as if they were not installed."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    cmd = [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "-q", str(wheel)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    (Path(purelib) / "test_dependencies.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    (Path(purelib) / "hide_extras.py").write_text(HIDE_EXTRAS)
    (Path(purelib) / "zz_hide_extras.pth").write_text("import hide_extras\n")  # after test_dependencies.pth
    return python


HIDE_EXTRAS = """\"\"\"Every finder of sys.meta_path, filtered: the top-level modules of $HIDDEN_MODULES are not
found (an import raises ModuleNotFoundError, importlib.util.find_spec returns None) and the distributions of
$HIDDEN_DISTRIBUTIONS have no metadata.\"\"\"
import os
import re
import sys

MODULES = frozenset(filter(None, os.environ.get("HIDDEN_MODULES", "").split(",")))
DISTRIBUTIONS = frozenset(filter(None, os.environ.get("HIDDEN_DISTRIBUTIONS", "").split(",")))


class Hiding:
    def __init__(self, finder):
        self.finder = finder

    def __getattr__(self, name):
        return getattr(self.finder, name)

    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in MODULES or not hasattr(self.finder, "find_spec"):
            return None
        return self.finder.find_spec(name, path, target)

    def find_distributions(self, *args, **kwargs):
        found = getattr(self.finder, "find_distributions", lambda *args, **kwargs: ())(*args, **kwargs)
        return (d for d in found if re.sub(r"[-_.]+", "-", d.metadata["Name"] or "").lower() not in DISTRIBUTIONS)


if MODULES or DISTRIBUTIONS:
    sys.meta_path[:] = [Hiding(finder) for finder in sys.meta_path]
"""


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel of the checkout, built once for this module's tests."""
    return build_wheel(tmp_path_factory.mktemp("wheel"))


@pytest.fixture(scope="module")
def installed(tmp_path_factory, wheel) -> Path:
    """The python of a fresh environment with the wheel installed, made once for this module's tests."""
    return fresh_environment(tmp_path_factory.mktemp("installed"), wheel)


def wheel_metadata(wheel: Path) -> tuple[dict[str, str], email.message.Message]:
    """The console scripts (name: target) and the METADATA of a wheel."""
    archive = zipfile.ZipFile(wheel)
    (info,) = {name.split("/")[0] for name in archive.namelist() if ".dist-info/" in name}
    entry_points = archive.read(f"{info}/entry_points.txt").decode()
    section = entry_points.split("[console_scripts]\n")[1].split("\n[")[0]
    scripts = dict(line.split(" = ") for line in section.splitlines() if " = " in line)
    return scripts, email.message_from_bytes(archive.read(f"{info}/METADATA"))


def extra_requirements(metadata: email.message.Message) -> dict[str, set[str]]:
    """Each extra of the wheel's METADATA (but the tools of this repository's developers, `dev` and `docs`): the
    distributions it installs, those of the extras it names (`sinusoidal-encoder[onnx]`) included."""
    own = canonicalize_name(metadata["Name"])
    requirements = [Requirement(line) for line in metadata.get_all("Requires-Dist")]

    def installs(extra: str) -> set[str]:
        found = set()
        for requirement in requirements:
            if requirement.marker is None or not requirement.marker.evaluate({"extra": extra}):
                continue
            if canonicalize_name(requirement.name) == own:
                found |= set().union(*(installs(named) for named in requirement.extras))
            else:
                found.add(canonicalize_name(requirement.name))
        return found

    return {extra: installs(extra) for extra in metadata.get_all("Provides-Extra") if extra not in ("dev", "docs")}


def dependency_closure(names: set[str]) -> set[str]:
    """`names` and what they require (installed here, without their extras), as canonical distribution names."""
    seen, todo = set(), list(names)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            requires = importlib.metadata.requires(name) or []
        except importlib.metadata.PackageNotFoundError:
            continue
        for line in requires:
            requirement = Requirement(line)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                todo.append(canonicalize_name(requirement.name))
    return seen


@functools.cache
def installed_modules() -> dict[str, list[str]]:
    """The top-level modules installed here and the distributions that provide each (a scan of all of them)."""
    return importlib.metadata.packages_distributions()


def modules_of(distributions: set[str]) -> set[str]:
    """The top-level modules that only `distributions` provide (installed here)."""
    providers = installed_modules()
    return {
        module
        for module, names in providers.items()
        if {canonicalize_name(name) for name in names} <= distributions and not module.startswith("_")
    }


def test_wheel_carries_the_tokenizer_and_the_card_template(wheel):
    archive = zipfile.ZipFile(wheel)
    names = set(archive.namelist())
    resources = "sinusoidal_encoder_training/resources/"
    assert {
        resources + "model_card.md",
        resources + "tokenizer_config/tokenizer.json",
        resources + "tokenizer_config/tokenizer_config.json",
        "sinusoidal_encoder/modeling_sinusoidal_encoder.py",
        "sinusoidal_encoder_training/stages/pretraining.py",
    } <= names
    # a console script per command of the table, naming it in the wheel's `console` module; the wheel holds its stage
    scripts, metadata = wheel_metadata(wheel)
    assert set(scripts) == {SCRIPT_PREFIX + name for name in COMMANDS}
    for name, entry in COMMANDS.items():
        assert scripts[SCRIPT_PREFIX + name] == f"sinusoidal_encoder_training.cli.console:{name.replace('-', '_')}"
        assert f"sinusoidal_encoder_training/{entry.module.replace('.', '/')}.py" in names, name
    extras = extra_requirements(metadata)
    assert {"training", "onnx", "integrations", "all"} <= set(extras)
    assert extras["all"] == set().union(*extras.values())  # everything a user needs
    assert extras["onnx"] <= extras["integrations"]  # `integrations` still installs the ONNX export


def test_every_module_of_an_extra_names_its_extra(wheel):
    """`EXTRA_OF_MODULE` (what a missing module's one-line error names) covers each module of each extra's
    distributions, with an extra that installs it."""
    extras = extra_requirements(wheel_metadata(wheel)[1])
    for extra, distributions in extras.items():
        for distribution in distributions:
            for module in modules_of({distribution}):
                assert module in EXTRA_OF_MODULE, (extra, distribution, module)
                assert distribution in extras[EXTRA_OF_MODULE[module]], (module, EXTRA_OF_MODULE[module])


def test_a_missing_module_of_an_extra_is_one_line_naming_the_extra(monkeypatch, capsys):
    """`require_extra` (a feature that needs an extra) and the command-line front (a module of an extra imported
    as the command runs) end with one line: what needs which extra, and the pip command that adds it."""
    assert require_extra("json").dumps([]) == "[]"
    with pytest.raises(UsageError, match=r"^--pictures needs the 'plots' extra \(No module named 'no_such_\w+'\); "):
        require_extra("no_such_module_here", extra="plots", what="--pictures")

    def main():
        raise ModuleNotFoundError("No module named 'onnxscript'", name="onnxscript")

    monkeypatch.setattr(sys, "argv", ["sinusoidal-encoder-export-onnx"])
    with pytest.raises(SystemExit) as stopped:
        with front():
            main()
    assert stopped.value.code == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(
        "sinusoidal-encoder-export-onnx: error: this command needs the 'onnx' extra (No module named 'onnxscript'); "
        "add it with: pip install "
    ), line
    assert line.endswith("[onnx]'") or line.endswith("[onnx]' (in the repository)"), line

    def elsewhere():
        raise ModuleNotFoundError("No module named 'not_of_an_extra'", name="not_of_an_extra")

    with pytest.raises(ModuleNotFoundError):  # not an extra's: a bug, with its traceback
        with front():
            elsewhere()


def run_script(python: Path, script: str, argv: list[str], hidden=None, cwd: Path | None = None):
    """`SCRIPT ARGV` in the environment of `python`, with `hidden` (modules, distributions) not installed."""
    modules, distributions = hidden or ((), ())
    return subprocess.run(
        [str(python.parent / script), *argv],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=cwd,
        env=env(HIDDEN_MODULES=",".join(sorted(modules)), HIDDEN_DISTRIBUTIONS=",".join(sorted(distributions))),
    )


# a command line of each command that needs more than the base install (`CommandEntry.extras`), run from a folder
# that holds a folder `model`
NEEDS_AN_EXTRA = {
    "pretrain": ["--output_dir", "out", "--max_train_steps", "1"],
    "finetune": ["--model_name_or_path", "model", "--output_dir", "out"],
    "evaluate": ["model", "--output_file", "out.json"],
    "train-tokenizer": ["--output_dir", "out"],
    "export-onnx": ["model", "--output", "out/model.onnx"],
    "distill": ["model", "--output_dir", "out"],
}


@pytest.mark.slow
def test_every_console_script_helps_at_once_and_a_run_names_the_extra_it_needs(wheel, installed, tmp_path):
    """Every console script of the installed wheel answers `--help` with its usage, with all extras and with the base
    install alone (the extras' distributions and what only they require hidden): the flags are parsed before the
    libraries that do the work are imported. Run with the base install, a command that needs an extra ends in one
    line naming the extra and the pip command that adds it, from the wheel it was installed from, before anything
    is written."""
    scripts, metadata = wheel_metadata(wheel)
    extras = extra_requirements(metadata)
    base = {canonicalize_name(r.name) for r in map(Requirement, metadata.get_all("Requires-Dist")) if not r.marker}
    distributions = dependency_closure(set().union(*extras.values())) - dependency_closure(base)
    modules = modules_of(distributions)
    assert {"datasets", "accelerate", "onnxscript", "sklearn", "matplotlib"} <= modules
    hidden = (modules, distributions)
    (tmp_path / "model").mkdir()
    runs = [(script, ["--help"], h) for script in scripts for h in (None, hidden)]
    assert set(NEEDS_AN_EXTRA) == {name for name, entry in COMMANDS.items() if entry.extras}
    runs += [(SCRIPT_PREFIX + name, argv, hidden) for name, argv in NEEDS_AN_EXTRA.items()]
    with ThreadPoolExecutor(max_workers=3) as pool:
        procs = list(pool.map(lambda run: run_script(installed, *run, cwd=tmp_path), runs))
    for (script, argv, h), proc in zip(runs, procs, strict=True):
        if argv == ["--help"]:
            assert proc.returncode == 0 and proc.stdout.startswith("usage: "), (script, h, proc.stderr[-3000:])
            continue
        line = re.escape(f"{script}: error: ") + r"[\w ]+ needs the '(\w+)' extra \(No module named '(\w+)'\); "
        match = re.fullmatch(line + re.escape("add it with: pip install '") + r"(.+)\[\1\]'\n", proc.stderr)
        assert proc.returncode == 2 and match, (script, proc.returncode, proc.stderr[-3000:])
        extra, module, source = match.groups()
        entry = COMMANDS[script.removeprefix(SCRIPT_PREFIX)]
        assert extra == entry.extras[0] and Path(source) == wheel and module in modules, proc.stderr
    assert not (tmp_path / "out").exists() and not (tmp_path / "out.json").exists()


@pytest.mark.slow
def test_installed_wheel_pretrains_from_another_directory(tmp_path, installed):
    python = installed
    work = tmp_path / "elsewhere"
    train, validation = write_text_corpus(work / "data", n_train=25, n_validation=6)
    where = subprocess.run(
        [
            str(python),
            "-c",
            "import sinusoidal_encoder_training.data.pipeline as d; print(d.__file__); print(d.SHIPPED_TOKENIZER)",
        ],
        cwd=work,
        capture_output=True,
        text=True,
        env=env(),
        timeout=300,
    )
    assert where.returncode == 0, where.stderr[-3000:]
    module_file, tokenizer_dir = where.stdout.split()
    venv = python.parent.parent
    assert Path(module_file).is_relative_to(venv) and Path(tokenizer_dir).is_relative_to(venv)

    out = work / "model"
    cmd = [
        str(python),
        "-m",
        "sinusoidal_encoder_training.stages.pretraining",
        *("--train_file", str(train), "--validation_file", str(validation)),
        *("--config_name", "tiny", "--config_overrides", TINY, "--max_seq_length", "32"),
        *("--per_device_train_batch_size", "8", "--max_train_steps", "2", "--output_dir", str(out)),
    ]
    proc = subprocess.run(cmd, cwd=work, capture_output=True, text=True, env=env(), timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    card = (out / "README.md").read_text()
    assert "sinusoidal position encoding" in card and "{{" not in card  # the template, rendered
    load = (
        "import sys, sinusoidal_encoder; from transformers import AutoModelForMaskedLM, AutoTokenizer; "
        "m = AutoModelForMaskedLM.from_pretrained(sys.argv[1]); t = AutoTokenizer.from_pretrained(sys.argv[1]); "
        "print(type(m).__name__, len(t))"
    )
    loaded = subprocess.run(
        [str(python), "-c", load, str(out)], cwd=work, capture_output=True, text=True, env=env(), timeout=300
    )
    assert loaded.returncode == 0, loaded.stderr[-3000:]
    assert loaded.stdout.split() == ["SinusoidalEncoderForMaskedLM", "16384"]


@pytest.mark.slow
def test_readme_blocks_run_from_an_installed_wheel_outside_the_checkout(tmp_path, wheel, installed):
    """README's Python blocks work from an installed wheel, outside any checkout: each block that README runs, run
    by the wheel's environment (the base install: its extras hidden) in a folder outside the checkout, passes,
    reaches the shipped tokenizer by its public name, and writes only under that folder's `outputs/`."""
    from test_docs import fenced_blocks  # tests/repository/test_docs.py (tests/conftest.py puts it on the path)

    blocks = [block for block in fenced_blocks(REPO / "README.md") if block.runs and block.language == "python"]
    assert blocks and any("SHIPPED_TOKENIZER" in block.code for block in blocks)
    _, metadata = wheel_metadata(wheel)
    base = {canonicalize_name(r.name) for r in map(Requirement, metadata.get_all("Requires-Dist")) if not r.marker}
    hidden = dependency_closure(set().union(*extra_requirements(metadata).values())) - dependency_closure(base)
    hide = {"HIDDEN_MODULES": ",".join(sorted(modules_of(hidden))), "HIDDEN_DISTRIBUTIONS": ",".join(sorted(hidden))}
    work = tmp_path / "elsewhere"
    work.mkdir()
    before = subprocess.run(["git", "status", "--porcelain"], cwd=REPO, capture_output=True, text=True).stdout
    for number, block in enumerate(blocks):
        script = work / f"block_{number}.py"
        script.write_text(block.code)
        proc = subprocess.run(
            [str(installed), str(script)], cwd=work, capture_output=True, text=True, timeout=300, env=env(**hide)
        )
        assert proc.returncode == 0, (block.where(), proc.stderr[-3000:])
    written = {path.relative_to(work).parts[0] for path in work.rglob("*") if not path.name.startswith("block_")}
    assert written <= {"outputs"} and (work / "outputs" / "my-encoder" / "config.json").is_file(), written
    after = subprocess.run(["git", "status", "--porcelain"], cwd=REPO, capture_output=True, text=True).stdout
    assert after == before  # nothing left in the repository
