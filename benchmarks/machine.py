"""What a benchmark record says about where it ran: the CPU (model, cores, the instruction sets that decide its
matrix-product speed) and the commit of the code."""

from __future__ import annotations

import os
import platform
import subprocess

import torch

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CPU_FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_tile", "amx_bf16", "amx_int8")


def cpu_description() -> dict:
    """The CPU's model name, its logical cores, torch's threads, and which of CPU_FLAGS it has (/proc/cpuinfo)."""
    fields: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                key, _, value = line.partition(":")
                fields.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    flags = set(fields.get("flags", "").split())
    return {
        "model": fields.get("model name") or platform.processor() or platform.machine(),
        "logical_cores": os.cpu_count(),
        "threads": torch.get_num_threads(),
        "flags": {flag: flag in flags for flag in CPU_FLAGS},
    }


def git_commit() -> str | None:
    """The checkout's commit, '-dirty' when it has uncommitted changes (None outside a git checkout)."""
    proc = subprocess.run(
        ["git", "describe", "--always", "--dirty"], cwd=REPO, capture_output=True, text=True, check=False
    )
    return proc.stdout.strip() or None


def write_record(folder: str, stem: str, result: dict, text: str) -> str:
    """A benchmark's record: `folder/STEM.json` (strict JSON) and its report `folder/STEM.md` (`text`, returned)."""
    import json

    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, f"{stem}.json"), "w") as handle:
        json.dump(result, handle, indent=1, allow_nan=False)
    with open(os.path.join(folder, f"{stem}.md"), "w") as handle:
        handle.write(text)
    return text
