"""A wheel built from the repository carries what the training library reads (the shipped tokenizer and the model
card template) and pretrains from another directory, in an environment where the repository is not importable
(issue 16, item 9: `dirname(dirname(__file__))` pointed into site-packages)."""

from __future__ import annotations

import shutil
import site
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from conftest import REPO, TINY, env, write_text_corpus

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
    """A new venv with the wheel installed and the test environment's dependencies (torch, transformers, ...)
    visible through a .pth line; the checkout's editable install is not (its .pth is not processed there)."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    (Path(purelib) / "test_dependencies.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    cmd = [sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", purelib, str(wheel)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return python


def test_wheel_carries_the_tokenizer_and_the_card_template(tmp_path):
    wheel = zipfile.ZipFile(build_wheel(tmp_path))
    names = set(wheel.namelist())
    resources = "sinusoidal_encoder_training/resources/"
    assert {
        resources + "model_card.md",
        resources + "tokenizer_config/tokenizer.json",
        resources + "tokenizer_config/tokenizer_config.json",
        "sinusoidal_encoder/modeling_sinusoidal_encoder.py",
        "sinusoidal_encoder_training/pretraining.py",
    } <= names
    # every console script names a module of the wheel (the stage's, which holds its command line)
    (entry_points,) = [name for name in names if name.endswith(".dist-info/entry_points.txt")]
    scripts = [line.split(" = ") for line in wheel.read(entry_points).decode().splitlines() if " = " in line]
    assert len(scripts) == 6
    for _, target in scripts:
        assert target.split(":")[0].replace(".", "/") + ".py" in names, target


@pytest.mark.slow
def test_installed_wheel_pretrains_from_another_directory(tmp_path):
    python = fresh_environment(tmp_path, build_wheel(tmp_path))
    work = tmp_path / "elsewhere"
    train, validation = write_text_corpus(work / "data", n_train=25, n_validation=6)
    where = subprocess.run(
        [
            str(python),
            "-c",
            "import sinusoidal_encoder_training.data as d; print(d.__file__); print(d.SHIPPED_TOKENIZER)",
        ],
        cwd=work,
        capture_output=True,
        text=True,
        env=env(),
        timeout=300,
    )
    assert where.returncode == 0, where.stderr[-3000:]
    module_file, tokenizer_dir = where.stdout.split()
    assert Path(module_file).is_relative_to(tmp_path / "venv") and Path(tokenizer_dir).is_relative_to(
        tmp_path / "venv"
    )

    out = work / "model"
    cmd = [
        str(python),
        "-m",
        "sinusoidal_encoder_training.pretraining",
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
