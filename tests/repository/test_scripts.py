"""The scripts after their command (scripts/pretrain.sh, scripts/finetune.sh): extra arguments go to the command, and
what the script does after it (fill-mask or label predictions) reads the folder the arguments name, never the
default folder of an earlier run; asked for help, the script prints the command's and stops. The scripts run on a
stand-in `.venv/bin/python` that writes down how it was called (and a `setup.sh` that installs nothing)."""

from __future__ import annotations

import shutil
import subprocess

import pytest
from conftest import REPO

from sinusoidal_encoder_training.cli.arguments import parse_config
from sinusoidal_encoder_training.configs import PretrainingConfig

STAND_IN = """#!/usr/bin/env bash
printf '%s\\n' "$*" >> "$(dirname "$0")/calls.log"
if [ "${1:-}" = - ]; then cat > /dev/null; fi
if [ "${1:-}" = -c ]; then echo no; fi
"""


@pytest.fixture
def checkout(tmp_path):
    """A checkout of the scripts alone, its `.venv/bin/python` the stand-in."""
    (tmp_path / "scripts").mkdir()
    for name in ("pretrain.sh", "finetune.sh", "flags.sh"):
        shutil.copy(REPO / "scripts" / name, tmp_path / "scripts" / name)
    (tmp_path / "scripts" / "setup.sh").write_text("exit 0\n")
    python = tmp_path / ".venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(STAND_IN)
    python.chmod(0o755)
    return tmp_path


def calls(checkout, script: str, *argv: str) -> list[str]:
    """How the script called python (one line a call), run with `argv`."""
    subprocess.run(["bash", str(checkout / "scripts" / script), *argv], check=True, capture_output=True, text=True)
    return (checkout / ".venv" / "bin" / "calls.log").read_text().splitlines()


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["--output_dir", "outputs/mine"],
        ["--output_dir=outputs/mine"],
        ["--output_dir", "first", "--max_train_steps", "10", "--output_dir=outputs/last"],
    ],
)
def test_pretrain_shows_the_predictions_of_the_folder_it_trained(checkout, argv):
    """The folder fill-mask loads is the --output_dir the command trains into, as its parser reads the arguments
    (the last one given; the main job's own by default)."""
    trained = calls(checkout, "pretrain.sh", *argv)
    command = next(call for call in trained if call.startswith("training/pretrain.py"))
    assert command.endswith(" ".join(["--resume_from_checkpoint latest", *argv]).strip())  # the arguments last
    output_dir = argv and parse_config(PretrainingConfig, ["--config_name", "tiny", *argv]).output_dir
    assert trained[-1] == f"training/fill_mask.py {output_dir or 'outputs/small-builtin'}"


@pytest.mark.parametrize("script", ["pretrain.sh", "finetune.sh"])
@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_help_is_the_commands_alone(checkout, script, flag):
    """Asked for help, the command prints it and trains nothing: no predictions follow (of a folder of an earlier
    run, or of none)."""
    made = calls(checkout, script, flag)
    assert made[-1].startswith("training/") and made[-1].endswith(flag)


@pytest.mark.parametrize(("argv", "folder"), [([], "outputs/library-classifier"), (["--output_dir=ft"], "ft")])
def test_finetune_shows_the_predictions_of_the_folder_it_trained(checkout, argv, folder):
    made = calls(checkout, "finetune.sh", *argv)
    assert made[-2].startswith("training/finetune.py") and made[-1] == f"- {folder}"
