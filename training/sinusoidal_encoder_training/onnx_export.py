"""Export a saved model folder to ONNX with dynamic batch and sequence axes, and check it with onnxruntime.

    python training/export_onnx.py outputs/small-builtin                      # -> outputs/small-builtin/model.onnx
    python training/export_onnx.py outputs/small-builtin --task feature-extraction --output encoder.onnx

The graph takes `input_ids` and `attention_mask` of shape (batch, sequence), any sizes, and returns `logits`
(fill-mask, text-classification of a fine-tuned folder: one row per text, token-classification) or
`last_hidden_state` (feature-extraction). The position encoding is computed inside the graph from the
positions, so the exported model runs at any length, past `max_position_embeddings` too. Needs the `onnx`,
`onnxscript` and `onnxruntime` packages (the `integrations` extra).

In code: `export_onnx(model, path, output_name)` and `check_onnx(...)`; the command line is `main`.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Literal

import torch
from transformers import (
    AutoModel,
    AutoModelForMaskedLM,
    AutoModelForSequenceClassification,
    AutoModelForTokenClassification,
)

import sinusoidal_encoder  # noqa: F401  (registers the model with the Auto classes)
from sinusoidal_encoder_training.arguments import FlagConfig, check_model_source, parse_config
from sinusoidal_encoder_training.command_line import UsageError, command, require_extra

TASKS = {
    "fill-mask": (AutoModelForMaskedLM, "logits"),
    "feature-extraction": (AutoModel, "last_hidden_state"),
    "text-classification": (AutoModelForSequenceClassification, "logits"),
    "token-classification": (AutoModelForTokenClassification, "logits"),
}


class _Exported(torch.nn.Module):
    """The model as a function of (input_ids, attention_mask) returning one tensor."""

    def __init__(self, model: torch.nn.Module, output_name: str):
        super().__init__()
        self.model = model
        self.output_name = output_name

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return getattr(self.model(input_ids=input_ids, attention_mask=attention_mask), self.output_name)


def export_onnx(model: torch.nn.Module, path: str, output_name: str, opset: int = 18) -> str:
    """Write `model` to `path` as ONNX (torch.onnx's dynamo exporter) with dynamic batch and sequence axes."""
    model = model.eval()
    if model.config.vocab_size < 3:
        raise UsageError(f"`vocab_size` must be at least 3 to trace an example input, got {model.config.vocab_size}.")
    example = torch.arange(1, 17).remainder(model.config.vocab_size - 1).add(1).expand(2, 16)  # (2, 16)
    batch, sequence = torch.export.Dim("batch"), torch.export.Dim("sequence")
    axes = {0: batch, 1: sequence}
    with torch.no_grad():
        torch.onnx.export(
            _Exported(model, output_name).eval(),  # a new module starts in training mode
            (example, torch.ones_like(example)),
            path,
            input_names=["input_ids", "attention_mask"],
            output_names=[output_name],
            dynamic_shapes={"input_ids": axes, "attention_mask": axes},
            opset_version=opset,
            dynamo=True,
        )
    return path


def check_onnx(model: torch.nn.Module, path: str, output_name: str, lengths=(8, 300), atol: float = 1e-4) -> float:
    """Largest difference between onnxruntime and PyTorch on padded batches of several lengths, at real tokens
    (every row of outputs without a sequence axis, such as a classifier's logits); raises `ValueError` past
    `atol`."""
    import onnxruntime

    session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    generator = torch.Generator().manual_seed(0)
    worst = 0.0
    for length in lengths:
        ids = torch.randint(1, model.config.vocab_size, (3, length), generator=generator)
        mask = torch.ones_like(ids)
        mask[1, length // 2 :] = 0
        with torch.no_grad():
            expected = getattr(model(input_ids=ids, attention_mask=mask), output_name)
        (got,) = session.run([output_name], {"input_ids": ids.numpy(), "attention_mask": mask.numpy()})
        difference = (torch.from_numpy(got) - expected).abs()  # (B, T, ...) or (B, labels)
        per_token = difference.dim() >= 3 and difference.shape[:2] == mask.shape
        worst = max(worst, float((difference[mask.bool()] if per_token else difference).max()))
    if worst > atol:
        raise UsageError(f"onnxruntime differs from PyTorch by {worst:.2e} on real tokens (tolerance {atol:g}).")
    return worst


@dataclasses.dataclass(frozen=True, kw_only=True)
class OnnxExportConfig(FlagConfig):
    """The settings of the export, with `output_path` derived (MODEL/model.onnx for a local folder by default)."""

    model: str = dataclasses.field(metadata={"help": "A saved model folder (or Hub id).", "positional": True})
    task: Literal["feature-extraction", "fill-mask", "text-classification", "token-classification"] = (
        dataclasses.field(default="fill-mask", metadata={"help": "Which head to export."})
    )
    output: str | None = dataclasses.field(
        default=None, metadata={"help": "The .onnx file (default: MODEL/model.onnx for a folder)."}
    )
    opset: int = dataclasses.field(default=18, metadata={"help": "ONNX opset version."})
    no_check: bool = dataclasses.field(default=False, metadata={"help": "Skip the onnxruntime comparison."})

    def __post_init__(self) -> None:
        super().__post_init__()
        check_model_source("MODEL", self.model)
        if self.output is None and not os.path.isdir(self.model):
            raise UsageError("--output is needed when the model is not a local folder.")

    @property
    def output_path(self) -> str:
        """`--output`, or model.onnx in the model folder."""
        return self.output or os.path.join(self.model, "model.onnx")


def parse_args(argv: list[str] | None = None) -> OnnxExportConfig:
    """The export's configuration of a command line (`sys.argv[1:]` by default), checked."""
    return parse_config(OnnxExportConfig, argv, __doc__)


def main(argv: list[str] | None = None) -> None:
    """The command line: `sinusoidal-encoder-export-onnx`, `python -m sinusoidal_encoder_training.onnx_export`, or
    `training/export_onnx.py` in a checkout."""
    config = parse_args(argv)
    for module in ("onnx", "onnxscript") if config.no_check else ("onnx", "onnxscript", "onnxruntime"):
        require_extra(module, what="the ONNX export")  # before the model is loaded
    auto_class, output_name = TASKS[config.task]
    model = auto_class.from_pretrained(config.model).eval()
    export_onnx(model, config.output_path, output_name, config.opset)
    print(f"wrote {config.output_path}")
    if not config.no_check:
        worst = check_onnx(model, config.output_path, output_name)
        print(f"onnxruntime against PyTorch, real tokens, lengths 8 and 300: max abs difference {worst:.2e}")


cli = command(main)  # the console script: main behind the command-line front (`command_line.py`)

if __name__ == "__main__":
    cli()
