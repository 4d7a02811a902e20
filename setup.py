"""Packaging metadata lives in pyproject.toml; this file adds what follows from the repository: the console scripts,
one per entry of the command table (training/sinusoidal_encoder_training/cli/commands.py, gathered from the run
configurations, which import nothing beyond the standard library), and the two non-code files the training library
reads (the shipped tokenizer and the model card template, at the top of the repository), under
`sinusoidal_encoder_training/resources/`, so that a wheel or a non-editable install carries them."""

import shutil
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
RESOURCES = ("model_card.md", "tokenizer_config/tokenizer.json", "tokenizer_config/tokenizer_config.json")


class BuildPyWithResources(build_py):
    def run(self):
        super().run()
        target = Path(self.build_lib, "sinusoidal_encoder_training", "resources")
        for name in RESOURCES:
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(ROOT / name, target / name)


sys.path.insert(0, str(ROOT / "training"))  # the package's source, read here without its dependencies
from sinusoidal_encoder_training.cli.commands import console_scripts  # noqa: E402

setup(
    cmdclass={"build_py": BuildPyWithResources},
    entry_points={"console_scripts": console_scripts()},
)
