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
# editable, as setup.sh installs it: nothing is built into the checkout
"$work/venv/bin/python" -m pip install --quiet -e ".[dev]"
"$work/venv/bin/python" -m pip freeze --exclude-editable > "$work/freeze.txt"
"$work/venv/bin/python" - "$work/freeze.txt" > "$work/constraints.txt" <<'PY'
import importlib.metadata as metadata
import re
import sys


def normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


# torch's requirements, and theirs: left free, so that a torch installed before setup.sh (a GPU build, maybe an older
# release that pins one of them, as torch 2.5 pins sympy) keeps what it needs
free, todo = {"torch", "triton", "sinusoidal-encoder"}, ["torch"]
while todo:
    for requirement in metadata.requires(todo.pop()) or []:
        name = normal(re.split(r"[^A-Za-z0-9._-]", requirement, maxsplit=1)[0])
        if "extra ==" not in requirement and name not in free:
            free.add(name)
            try:
                metadata.distribution(name)
                todo.append(name)
            except metadata.PackageNotFoundError:
                pass
pins = []
for line in open(sys.argv[1]):
    name, separator, version = line.strip().partition("==")
    if separator and normal(name) not in free and not normal(name).startswith(("nvidia-", "cuda-")):
        pins.append(f"{normal(name)}=={version}")
print(
    "# The version of every package scripts/setup.sh installs (pip's --constraint), those the documented figures\n"
    "# were measured with: the built-in corpus is made of these packages' docstrings. For the Python named below;\n"
    "# setup.sh installs the latest releases for another, or with CONSTRAINTS= set empty. Not torch nor what it\n"
    "# requires: setup.sh installs it first (or keeps the build you installed). Written by\n"
    "# scripts/update_constraints.sh.\n"
    "# python: %d.%d" % sys.version_info[:2]
)
print("\n".join(sorted(pins)))
PY
mv "$work/constraints.txt" constraints.txt  # whole, or not at all
echo "wrote constraints.txt: $(grep -vc '^#' constraints.txt) packages"
