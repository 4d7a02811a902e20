#!/usr/bin/env bash
# Set up .venv with the package (editable) and its training and development extras, at the versions of
# constraints.txt (those the documented figures were measured with) where this is the Python it was written for;
# `CONSTRAINTS= bash scripts/setup.sh` installs the latest releases instead. Safe to run again: once this
# pyproject.toml, setup.py, the console scripts of the command table and the constraints are installed (a stamp in
# .venv records them), it does nothing, so a second run needs no package registry (resuming a run on a machine
# without one works). `scripts/setup.sh --stamp` prints the stamp this checkout wants.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
stamp=.venv/.installed-from
constraints="${CONSTRAINTS-constraints.txt}"
if [ -n "$constraints" ]; then
  [ -f "$constraints" ] || { echo "setup.sh: error: CONSTRAINTS=$constraints is not a file: name one, or set it empty for the latest releases." >&2; exit 2; }
  pinned=$(sed -n 's/^# python: *//p' "$constraints")
  running=$("$PYTHON" -c "import sys; print('%d.%d' % sys.version_info[:2])")
  if [ "$pinned" != "$running" ]; then
    echo "setup.sh: $constraints pins the packages for Python $pinned, this is Python $running: installing the latest" \
      "releases (the built-in corpus, made of their docstrings, and with it the main job's figures may differ)." >&2
    constraints=""
  fi
fi
# the command table, read as setup.py reads it: the package's source alone, no site-packages
scripts=$("$PYTHON" -I -S -c "import sys; sys.path.insert(0, 'training')
from sinusoidal_encoder_training.cli.commands import console_scripts; print(*console_scripts(), sep='\n')")
wanted=$(printf '%s\n' "$(cat pyproject.toml setup.py ${constraints:+"$constraints"})" "$scripts" | "$PYTHON" -c "import hashlib, sys; print(hashlib.sha256(sys.stdin.buffer.read()).hexdigest())")
if [ "${1:-}" = "--stamp" ]; then
  echo "$wanted"
  exit 0
fi
if [ -x .venv/bin/python ] && [ "$(cat "$stamp" 2>/dev/null)" = "$wanted" ] \
  && .venv/bin/python -c "import torch, sinusoidal_encoder, sinusoidal_encoder_training" 2>/dev/null; then
  exit 0
fi
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip
# torch first, pinned: with no torch installed, an unpinned requirement would pull a multi-GB CUDA build.
# (On a machine with a GPU, install the torch build you want before running this; it is kept.)
if ! .venv/bin/python -c "import torch" 2>/dev/null; then
  .venv/bin/python -m pip install --quiet "torch==${TORCH_VERSION:-2.13.0}"
fi
.venv/bin/python -m pip install --quiet -e ".[dev]" ${constraints:+--constraint "$constraints"}
echo "$wanted" > "$stamp"
