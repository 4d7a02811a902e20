"""How a run is compiled (`--torch_compile`): the settings under which it captures one graph per mode, and what a
mode that replays CUDA graphs needs from the training step (a step marked before each forward, accumulated gradients
copied out of the graphs' memory)."""

from __future__ import annotations

import torch

from sinusoidal_encoder_training.configs import TrainingConfig


def compile_once_per_mode() -> None:
    """Settings under which a compiled run captures one graph per mode (training; evaluation with and without
    labels) whatever the lengths, batch sizes and masks of its batches: the masked-LM head's sparse prediction
    (`hidden[labels != -100]`, a size that depends on the data) is traced instead of breaking the graph at every
    forward, and sizes that happen to be equal (a batch of 32 rows of 32 tokens, under a sequence-length schedule)
    are not assumed equal in the next batch, which recompiled."""
    import torch._dynamo.config
    import torch.fx.experimental._config

    torch._dynamo.config.capture_dynamic_output_shape_ops = True
    torch.fx.experimental._config.use_duck_shape = False


CUDA_GRAPH_MODES = ("reduce-overhead", "max-autotune")  # the torch.compile modes that replay graphs as CUDA graphs


def uses_cuda_graphs(config: TrainingConfig) -> bool:
    """Whether the run is compiled in a mode that replays its graphs as CUDA graphs (on a CUDA GPU; elsewhere
    inductor runs them as the default mode does)."""
    return bool(config.torch_compile) and config.torch_compile_mode in CUDA_GRAPH_MODES


def mark_cuda_graph_step() -> None:
    """Before each forward under CUDA graphs: a new step begins, whose replay may reuse the memory of the outputs of
    the step before (the loop has read what it keeps of them). Without it, torch starts a new step at a forward only
    when no backward is pending, a guess that any output kept a step longer would break."""
    torch.compiler.cudagraph_mark_step_begin()


def keep_gradients(model: torch.nn.Module) -> None:
    """Under CUDA graphs, after the first backward of an optimizer step that accumulates several micro-batches: the
    gradients it left in `.grad` live in the graphs' memory, which the next forward's replay reuses; copied out of it,
    they are ordinary tensors that the next backwards add to (torch stops such a run otherwise). Parameters without a
    gradient keep none."""
    for parameter in model.parameters():
        if parameter.grad is not None:
            parameter.grad = parameter.grad.clone()


def compile_line(config: TrainingConfig) -> str | None:
    """How the run is compiled, for the run's header (None: eager), and what the mode does on this machine."""
    if not config.torch_compile:
        return None
    line = f"torch.compile = {config.torch_compile_backend}, mode {config.torch_compile_mode or 'default'}"
    if uses_cuda_graphs(config):
        if torch.cuda.is_available():
            line += " (CUDA graphs: one recording per shape, replayed)"
        else:
            line += " (CUDA graphs need a CUDA GPU: here the graphs run as in the default mode)"
    return line
