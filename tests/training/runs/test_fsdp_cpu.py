"""FSDP2 on two CPU processes (gloo) with the sharding of training/accelerate_configs/fsdp.yaml: training, a sharded
checkpoint, resume, and an exported folder equal to the unsharded model's training
(tests/training/runs/fsdp_cpu_worker.py).

accelerate 1.15 cannot run FSDP on CPUs (it enables FSDP for GPU-like devices only; the scripts refuse such a launch,
tests/training/stages/test_pretraining.py), so the worker drives torch's `fully_shard` and torch.distributed.checkpoint
directly: what accelerate calls for `fsdp_version: 2`. The `accelerate launch` FSDP path itself is in
tests/model/test_gpu.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForMaskedLM

import sinusoidal_encoder  # noqa: F401  (registers the Auto classes)

pytestmark = pytest.mark.slow
WORKER = Path(__file__).with_name("fsdp_cpu_worker.py")
sys.path.insert(0, str(WORKER.parent))
import fsdp_cpu_worker as worker  # noqa: E402


def torchrun(*flags: str) -> None:
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    result = subprocess.run([*command, str(WORKER), *flags], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]


def unsharded_training(steps: int) -> dict[str, torch.Tensor]:
    """One process, the same global batches and the same objective (the mean of the two halves' mean losses)."""
    model = worker.tiny_model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    for step in range(steps):
        halves = [worker.batch(step, rank, 2) for rank in range(2)]
        loss = sum(model(input_ids=ids, labels=labels).loss for ids, labels in halves) / 2
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    return model.state_dict()


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("fsdp")
    torchrun("--steps", "6", "--export", str(root / "uninterrupted"))
    torchrun("--steps", "6", "--export", str(root / "stopped"), "--save_at", "3", "--checkpoint", str(root / "ckpt"))
    torchrun("--steps", "6", "--export", str(root / "resumed"), "--resume", str(root / "ckpt"))
    return root


def test_the_checkpoint_is_sharded_one_file_per_process(runs):
    shards = sorted(path.name for path in (runs / "ckpt").glob("*.distcp"))
    assert shards == ["__0_0.distcp", "__1_0.distcp"]
    total = sum(p.numel() for p in worker.tiny_model().parameters())
    local = json.loads((runs / "uninterrupted" / "run.json").read_text())["local_parameters"]
    assert local <= total // 2 + 64  # each process holds about half of every parameter (dim-0 shards)


def test_resuming_the_sharded_checkpoint_ends_exactly_as_the_uninterrupted_run(runs):
    uninterrupted = load_file(str(runs / "uninterrupted" / "model.safetensors"))
    resumed = load_file(str(runs / "resumed" / "model.safetensors"))
    stopped = load_file(str(runs / "stopped" / "model.safetensors"))
    assert uninterrupted.keys() == resumed.keys()
    for name, tensor in uninterrupted.items():
        assert torch.equal(resumed[name], tensor), name
    assert any(not torch.equal(stopped[name], tensor) for name, tensor in uninterrupted.items())  # 3 steps short


def test_the_exported_folder_equals_the_unsharded_model_and_loads_with_auto(runs):
    expected = unsharded_training(6)
    model = AutoModelForMaskedLM.from_pretrained(runs / "uninterrupted")
    assert type(model).__name__ == "SinusoidalEncoderForMaskedLM"  # not torch's FSDP wrapper class
    got = model.state_dict()
    assert got.keys() == expected.keys()
    for name, tensor in expected.items():
        torch.testing.assert_close(got[name], tensor, atol=1e-5, rtol=1e-4, msg=name)
    assert torch.equal(got["lm_head.decoder.weight"], got["model.embeddings.word_embeddings.weight"])  # still tied
