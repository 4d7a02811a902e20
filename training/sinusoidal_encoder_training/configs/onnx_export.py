"""The configuration of `sinusoidal-encoder-export-onnx` (`OnnxExportConfig`) and its checks of the opset and
the output."""

from __future__ import annotations

import dataclasses
import importlib.util
import os

from sinusoidal_encoder_training.cli.arguments import Cleared, CommandEntry, FlagConfig, check_model_source
from sinusoidal_encoder_training.cli.command_line import UsageError
from sinusoidal_encoder_training.runs.run_folder import creation_failure, existing_parent
from sinusoidal_encoder_training.tasks.registry import EXPORTED

OLDEST_ONNX_OPSET = 17  # the exported graph's LayerNormalization is an ONNX operator from opset 17 on


@dataclasses.dataclass(frozen=True, kw_only=True)
class OnnxExportConfig(FlagConfig):
    """Export a saved model folder to ONNX with dynamic axes, and check it with onnxruntime.

        python training/export_onnx.py outputs/small-builtin                      # -> outputs/small-builtin/model.onnx
        python training/export_onnx.py outputs/small-builtin --task feature-extraction --output encoder.onnx
        python training/export_onnx.py outputs/library-classifier                # its own head: text-classification

    The folder's own head is exported by default: the task of the class config.json's `architectures` names
    (`tasks.TASKS`; a bare encoder: feature-extraction). `--task` chooses; a head the folder does not have (one
    transformers would initialise at random) is refused, and feature-extraction, the encoder alone, exports from any
    folder. The graph takes `input_ids` and `attention_mask` of the task's axes, any sizes ((batch, sequence), or
    (batch, choices, sequence) for multiple-choice), and returns the outputs of the head that transformers names
    (`logits`; `start_logits` and `end_logits` for question-answering; `last_hidden_state` for the encoder). The
    position encoding is computed inside the graph from the positions, so the exported model runs at any length, past
    `max_position_embeddings` too. An existing export (the .onnx file or its .onnx.data) is replaced only with
    `--overwrite`; missing folders of `--output` are created. Needs the `onnx`, `onnxscript` and `onnxruntime`
    packages (the `integrations` extra).

    The settings of the export, with `output_path` derived (MODEL/model.onnx for a local folder by default).
    """

    model: str = dataclasses.field(
        metadata={"help": "A saved model folder (or Hub id).", "positional": True, "reads": True}
    )
    task: str | None = dataclasses.field(
        default=None,
        metadata={
            "choices": EXPORTED,
            "help": "Which head to export (default: the folder's own, from config.json's `architectures`). A "
            "head the folder does not have is refused; feature-extraction (the encoder) exports from any folder.",
        },
    )
    output: str | None = dataclasses.field(
        default=None,
        metadata={
            "help": "The .onnx file, or a folder for FOLDER/model.onnx (default: MODEL/model.onnx for a folder). "
            "Missing folders are created."
        },
    )
    overwrite: bool = dataclasses.field(
        default=False, metadata={"help": "Replace an existing export at the output (the .onnx and .onnx.data)."}
    )
    opset: int = dataclasses.field(
        default=18,
        metadata={
            "help": f"ONNX opset version, {OLDEST_ONNX_OPSET} or newer (18 is the exporter's own, others converted)."
        },
    )
    no_check: bool = dataclasses.field(default=False, metadata={"help": "Skip the onnxruntime comparison."})

    def __post_init__(self) -> None:
        super().__post_init__()
        check_opset(self.opset)
        check_model_source("MODEL", self.model)
        if self.output is None and not os.path.isdir(self.model):
            raise UsageError("--output is needed when the model is not a local folder.")
        check_output(self.output_path, "--output" if self.output else "the output", self.overwrite)

    def read_paths(self) -> dict[str, str]:
        """What `FlagConfig.read_paths` says, and each file of the model folder but its ONNX exports: what
        `--overwrite` may replace is only an export (`--output MODEL/model.safetensors` would be the weights)."""
        reads = super().read_paths()
        if os.path.isdir(self.model):
            for name in sorted(os.listdir(self.model)):
                if not name.endswith((".onnx", ".onnx.data")) and name != "onnx":
                    reads[f"MODEL's {name}"] = os.path.join(self.model, name)
        return reads

    def cleared_paths(self) -> list[Cleared]:
        """The export and its weights file, which `--overwrite` replaces."""
        if not self.overwrite:
            return []
        return [
            Cleared("--overwrite would replace", path, "--output")
            for path in (self.output_path, self.output_path + ".data")
        ]

    @property
    def output_path(self) -> str:
        """`--output` (model.onnx in it when it is a folder, or ends with '/'), or model.onnx in the model folder."""
        if self.output is None:
            return os.path.join(self.model, "model.onnx")
        if os.path.isdir(self.output) or self.output.endswith(("/", os.sep)):
            return os.path.join(self.output, "model.onnx")
        return self.output


COMMAND = CommandEntry(
    "export-onnx", "publishing.onnx_export", OnnxExportConfig, "export a model folder to ONNX", ("onnx",)
)


def check_opset(opset: int) -> None:
    """A `UsageError` for an opset the graph cannot be written in: older than `OLDEST_ONNX_OPSET`, or newer than the
    installed onnx package knows (when it is installed: its absence is reported with the other extras)."""
    if opset < OLDEST_ONNX_OPSET:
        raise UsageError(
            f"--opset {opset}: the graph needs opset {OLDEST_ONNX_OPSET} or newer (its LayerNormalization), choose "
            f"--opset {OLDEST_ONNX_OPSET} or more."
        )
    if importlib.util.find_spec("onnx") is None:
        return
    from onnx.defs import onnx_opset_version

    if opset > onnx_opset_version():
        raise UsageError(
            f"--opset {opset}: the installed onnx package knows opsets up to {onnx_opset_version()}; choose one of "
            f"{OLDEST_ONNX_OPSET} to {onnx_opset_version()}."
        )


def check_output(path: str, name: str, overwrite: bool) -> None:
    """A `UsageError` before any work when the export could not be written to `path`: an earlier export there (the
    .onnx file or its weights, .onnx.data) without `overwrite`, a folder in its place, or a parent that is a file or
    not writable. Missing parent folders are fine: `main` creates them just before it writes."""
    if os.path.isdir(path):
        raise UsageError(f"{name} {path!r} is a folder: name the .onnx file to write with --output.")
    weights = path + ".data"
    if not overwrite and (os.path.lexists(path) or os.path.lexists(weights)):
        if not os.path.lexists(path):
            found = f"{name} {path!r}: {weights!r} (the weights of an earlier export) already exists"
        else:
            found = f"{name} {path!r} already exists" + (
                f" (with its weights, {weights!r})" if os.path.lexists(weights) else ""
            )
        raise UsageError(f"{found}: pass --overwrite to replace it, or choose another --output.")
    parent = existing_parent(os.path.dirname(os.path.abspath(path)))
    if not os.path.isdir(parent):
        raise UsageError(f"{name} {path!r} cannot be written: {parent!r} is a file, not a folder.")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise UsageError(f"{name} {path!r} cannot be written: {parent!r} is not writable.")
    failure = creation_failure(parent)
    if failure is not None:
        raise UsageError(f"{name} {path!r} cannot be written: creating a file in {parent!r} fails ({failure}).")
