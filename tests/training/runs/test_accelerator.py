"""Runs one after another in one process (a notebook, a script calling `pretrain` then `finetune`, an evaluation
after training) each get the accelerate settings they ask for, as each would in a process of its own: accelerate
keeps mixed precision and the compile plugin in a state shared by the whole process (`AcceleratorState`), which
`runs.accelerator.new_accelerator` clears before each run's Accelerator."""

from __future__ import annotations

import pytest
from accelerate.state import AcceleratorState
from accelerate.utils import DynamoBackend

from sinusoidal_encoder_training.configs import TrainingConfig
from sinusoidal_encoder_training.runs.accelerator import make_accelerator, new_accelerator


@pytest.fixture(autouse=True)
def _fresh_accelerate_state():
    AcceleratorState._reset_state()  # what an earlier test of this worker left
    yield
    AcceleratorState._reset_state()


def run_settings(tmp_path, name: str, **settings) -> tuple[str, str]:
    """The mixed precision and the compile backend of the Accelerator of a run of `settings`."""
    accelerator = make_accelerator(TrainingConfig(output_dir=str(tmp_path / name), **settings))
    return accelerator.mixed_precision, accelerator.state.dynamo_plugin.backend


def test_runs_in_one_process_each_get_the_settings_they_ask_for(tmp_path):
    compiled = run_settings(tmp_path, "a", torch_compile=True, torch_compile_backend="aot_eager")
    assert compiled == ("no", DynamoBackend.AOT_EAGER)
    assert run_settings(tmp_path, "b") == ("no", DynamoBackend.NO)  # was compiled, as the run before it
    assert run_settings(tmp_path, "c", mixed_precision="bf16") == ("bf16", DynamoBackend.NO)  # was refused
    assert new_accelerator().mixed_precision == "no"  # an evaluation after it: was in bf16


def test_activation_checkpointing_is_refused_for_a_model_without_it(tmp_path):
    import torch

    from sinusoidal_encoder_training.runs.accelerator import prepare_training

    config = TrainingConfig(output_dir=str(tmp_path), activation_checkpointing=True)
    model = torch.nn.Linear(2, 2)
    with pytest.raises(ValueError, match=r"^--activation_checkpointing: Linear does not support it; leave it out\.$"):
        prepare_training(make_accelerator(config), config, model, torch.optim.SGD(model.parameters()), [], [])


def test_activation_checkpointing_keeps_a_fraction_of_the_activations():
    """What the layers keep for the backward pass (every tensor autograd saves, counted by its hooks) falls to their
    inputs: under a tenth of it for the tiny encoder, 4 layers deep, on a batch of 8 of 64 tokens."""
    import torch
    from conftest import random_ids, tiny_config

    import sinusoidal_encoder as se
    from sinusoidal_encoder_training.runs.accelerator import enable_activation_checkpointing

    def saved_bytes(model) -> int:
        total = 0

        def pack(tensor):
            nonlocal total
            total += tensor.numel() * tensor.element_size()
            return tensor

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
            hidden = model(input_ids=random_ids(8, 64)).last_hidden_state  # (B, T, d)
        hidden.sum().backward()
        return total

    model = se.SinusoidalEncoderModel(tiny_config(num_hidden_layers=4)).train()
    plain = saved_bytes(model)
    enable_activation_checkpointing(model)
    assert saved_bytes(model) < plain / 10
