#!/usr/bin/env bash
# Write constraints.txt anew from the latest releases: a new environment in a temporary folder gets what
# scripts/setup.sh installs (torch pinned and first, then the package with its development extras) without the old
# constraints, and its versions are frozen, for this Python's minor version. Then, before committing the file, set
# up again (bash scripts/setup.sh), run the tests (bash scripts/test.sh) and the main job (bash scripts/pretrain.sh),
# and update the figures the docs quote: the built-in corpus is made of these packages' docstrings.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$PYTHON" -m venv "$work/venv"
"$work/venv/bin/python" -m pip install --quiet --upgrade pip
"$work/venv/bin/python" -m pip install --quiet "torch==${TORCH_VERSION:-2.13.0}"
"$work/venv/bin/python" -m pip install --quiet ".[dev]"
python_version=$("$work/venv/bin/python" -c "import sys; print('%d.%d' % sys.version_info[:2])")
{
  echo "# The version of every package scripts/setup.sh installs (pip's --constraint), those the documented figures"
  echo "# were measured with: the built-in corpus is made of these packages' docstrings. For the Python named below;"
  echo "# setup.sh installs the latest releases for another, or with CONSTRAINTS= set empty. Not torch: setup.sh"
  echo "# installs it first (or keeps the build you installed). Written by scripts/update_constraints.sh."
  echo "# python: $python_version"
  # not torch and its CUDA libraries (a GPU machine's own build), nor this package
  "$work/venv/bin/python" -m pip freeze | grep -viE '^(torch|triton|nvidia-[a-z0-9-]+|cuda-[a-z0-9-]+|sinusoidal-encoder)([=@ ]|$)' | LC_ALL=C sort -f
} > constraints.txt
echo "wrote constraints.txt: $(grep -vc '^#' constraints.txt) packages, Python $python_version"
