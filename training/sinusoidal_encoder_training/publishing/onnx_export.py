"""The ONNX export of a saved model folder, with dynamic batch and sequence axes, checked with onnxruntime; what
is exported is an `OnnxExportConfig` (`configs`).

In code: `export_onnx(model, path, outputs)` and `check_onnx(...)`; `load_trained` loads a head and refuses
one that transformers initialises at random; the command line is `run`
(`main`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import warnings
from collections.abc import Iterator, Sequence

import torch
from transformers import AutoConfig

import sinusoidal_encoder  # noqa: F401  (registers the model with the Auto classes)
from sinusoidal_encoder_training.cli.arguments import parse_config
from sinusoidal_encoder_training.cli.command_line import (
    UsageError,
    check_local_files,
    front,
    initialised_weights,
    loading,
    quiet_loading,
    require_extra,
)
from sinusoidal_encoder_training.configs import OnnxExportConfig
from sinusoidal_encoder_training.runs.atomic import clean_leftovers, staged
from sinusoidal_encoder_training.tasks.registry import EXPORTED, TASKS, auto_class_of, task_of_architecture


def folder_architecture(source: str, name: str = "MODEL") -> str | None:
    """The first class that config.json's `architectures` names in a model folder (or Hub id), the class it was
    saved from; None when it names none. A folder without a config.json, or a config transformers cannot read, is a
    `UsageError` naming `name` (the argument)."""
    if os.path.isdir(source) and not os.path.isfile(os.path.join(source, "config.json")):
        raise UsageError(f"{name} {source!r} is not a model folder: it has no config.json.")
    with loading(name, source):
        config = AutoConfig.from_pretrained(source)
    return next(iter(getattr(config, "architectures", None) or []), None)


def head_problem(source: str, architecture: str | None, task: str, instead: str, name: str = "MODEL") -> str | None:
    """The one-line refusal when a folder saved from `architecture` has no trained head for `task` (the encoder,
    feature-extraction, is in every folder; a folder that names no class is judged when it loads, `load_trained`);
    `instead` says what to use instead. None when it has one."""
    if architecture is None or task == "feature-extraction" or task_of_architecture(architecture) == task:
        return None
    return (
        f"{name} {source!r} is a {architecture}, without a trained {TASKS[task].head_description} (transformers "
        f"would add one initialised at random): {instead}"
    )


def load_trained(auto_class: type, source: str, instead: str, name: str = "MODEL") -> torch.nn.Module:
    """`auto_class.from_pretrained(source)` in eval mode, or a `UsageError` when transformers reports weights it
    initialised at random (missing from the folder, or of another shape): a new head is never used silently.
    `instead` says what to use instead; the refusal names the weights."""
    with quiet_loading():
        model, info = auto_class.from_pretrained(source, output_loading_info=True, ignore_mismatched_sizes=True)
    new = initialised_weights(info)
    if new:
        shown = ", ".join(new[:3]) + (f", ... ({len(new)} in all)" if len(new) > 3 else "")
        raise UsageError(
            f"{name} {source!r} ({folder_architecture(source, name) or 'no architecture in config.json'}) lacks "
            f"weights of {type(model).__name__} that transformers would initialise at random ({shown}): {instead}"
        )
    return model.eval()


class _Exported(torch.nn.Module):
    """The model as a function of (input_ids, attention_mask) returning the tensors named `outputs`."""

    def __init__(self, model: torch.nn.Module, outputs: tuple[str, ...]):
        super().__init__()
        self.model = model
        self.outputs = outputs

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> tuple[torch.Tensor, ...]:
        result = self.model(input_ids=input_ids, attention_mask=attention_mask)
        return tuple(getattr(result, name) for name in self.outputs)


def _names(outputs: str | Sequence[str]) -> tuple[str, ...]:
    return (outputs,) if isinstance(outputs, str) else tuple(outputs)


def _example_ids(vocab_size: int, input_axes: Sequence[str], length: int, rows: int = 2) -> torch.Tensor:
    """Token ids of shape `input_axes` (`rows` for every axis but the sequence, `length` for it), never 0."""
    shape = [length if axis == "sequence" else rows for axis in input_axes]
    count = torch.Size(shape).numel()
    return torch.arange(1, count + 1).remainder(vocab_size - 1).add(1).reshape(shape)


def export_onnx(
    model: torch.nn.Module,
    path: str,
    outputs: str | Sequence[str],
    opset: int = 18,
    input_axes: Sequence[str] = ("batch", "sequence"),
) -> str:
    """Write `model` to `path` as ONNX (torch.onnx's dynamo exporter): inputs `input_ids` and `attention_mask` with
    the dynamic axes `input_axes` (a task's, `tasks.Task.input_axes`), the outputs named `outputs`, in opset `opset`
    (a `UsageError`, the files removed, when the exporter could not convert the graph to it)."""
    model = model.eval()
    if model.config.vocab_size < 3:
        raise UsageError(f"`vocab_size` must be at least 3 to trace an example input, got {model.config.vocab_size}.")
    names = _names(outputs)
    example = _example_ids(model.config.vocab_size, input_axes, 16)  # (2, 16), or (2, 2, 16) with choices
    axes = {index: torch.export.Dim(axis) for index, axis in enumerate(input_axes)}
    with torch.no_grad(), _quiet_exporter():
        torch.onnx.export(
            _Exported(model, names).eval(),  # a new module starts in training mode
            (example, torch.ones_like(example)),
            path,
            input_names=["input_ids", "attention_mask"],
            output_names=list(names),
            dynamic_shapes={"input_ids": axes, "attention_mask": axes},
            opset_version=opset,
            dynamo=True,
            verbose=False,  # no progress lines; a failure still raises with the exporter's own message
        )
    written = _opset_of(path)
    if written != opset:  # the exporter writes its own opset when it cannot convert the graph, and only warns
        for file in (path, path + ".data"):
            if os.path.lexists(file):
                os.remove(file)
        raise UsageError(
            f"--opset {opset}: torch's ONNX exporter could not convert the graph to opset {opset} (it wrote opset "
            f"{written}; nothing was kept): choose another --opset, such as 18, the exporter's own."
        )
    return path


# What torch's exporter says on every export of these models that says nothing about the export: the inputs share
# their axes (both named `batch` and `sequence`, as meant), a deprecation inside torch's own tree utilities, and the
# operators of torchvision, which the models do not use, left unregistered.
EXPORTER_NOISE = (
    (UserWarning, r"# The axis name: \S+ will not be used, since it shares the same shape constraints"),
    (FutureWarning, r"`isinstance\(treespec, LeafSpec\)` is deprecated"),
)
EXPORTER_REGISTRATION_LOGGER = "torch.onnx._internal.exporter._registration"


@contextlib.contextmanager
def _quiet_exporter() -> Iterator[None]:
    """Within it, `EXPORTER_NOISE` and the exporter's registration notices are not shown; every other warning is."""
    registration = logging.getLogger(EXPORTER_REGISTRATION_LOGGER)
    level = registration.level
    registration.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            for category, message in EXPORTER_NOISE:
                warnings.filterwarnings("ignore", message=message, category=category)
            yield
    finally:
        registration.setLevel(level)


def _opset_of(path: str) -> int:
    """The default-domain (ai.onnx) opset of the ONNX file at `path`."""
    import onnx

    model = onnx.load(path, load_external_data=False)
    return next(entry.version for entry in model.opset_import if entry.domain in ("", "ai.onnx"))


def check_onnx(
    model: torch.nn.Module,
    path: str,
    outputs: str | Sequence[str],
    lengths=(8, 300),
    atol: float = 1e-4,
    input_axes: Sequence[str] = ("batch", "sequence"),
) -> float:
    """Largest difference between onnxruntime and PyTorch over the `outputs`, on padded batches of several lengths
    (3 rows, and 3 choices where the task has them), at real tokens (every row of outputs without a sequence axis,
    such as a classifier's logits); a `UsageError` past `atol`, or when onnxruntime cannot load the graph."""
    import onnxruntime

    try:
        session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    except Exception as error:  # onnxruntime's own exception types: a graph it cannot load (an opset it predates)
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise UsageError(
            f"onnxruntime {onnxruntime.__version__} cannot load {path} (opset {_opset_of(path)}): {reason[:300]}; "
            "the export is kept: load it with a newer onnxruntime, or export again with a lower --opset."
        ) from None
    names = _names(outputs)
    generator = torch.Generator().manual_seed(0)
    worst = 0.0
    for length in lengths:
        shape = [length if axis == "sequence" else 3 for axis in input_axes]
        ids = torch.randint(1, model.config.vocab_size, shape, generator=generator)
        mask = torch.ones_like(ids)
        mask[1, ..., length // 2 :] = 0
        with torch.no_grad():
            expected = model(input_ids=ids, attention_mask=mask)
        got = session.run(list(names), {"input_ids": ids.numpy(), "attention_mask": mask.numpy()})
        for name, array in zip(names, got, strict=True):
            difference = (torch.from_numpy(array) - getattr(expected, name)).abs()  # (B, T, ...) or (B, labels)
            per_token = difference.shape[: mask.dim()] == mask.shape
            worst = max(worst, float((difference[mask.bool()] if per_token else difference).max()))
    if worst > atol:
        raise UsageError(f"onnxruntime differs from PyTorch by {worst:.2e} on real tokens (tolerance {atol:g}).")
    return worst


def _export_instead(own: str | None, task: str) -> str:
    """What to export instead of `task`'s head from a folder whose own head is `own`'s."""
    if own not in (None, task, "feature-extraction"):
        return (
            f"export its own head with --task {own} (the default), or the encoder alone with --task "
            "feature-extraction."
        )
    if task != "feature-extraction":
        default = " (the default)" if own == "feature-extraction" else ""
        return f"export the encoder alone with --task feature-extraction{default}."
    return "export a folder saved from a trained model."


def resolve_task(config: OnnxExportConfig) -> tuple[str, str | None]:
    """The task to export (`--task`, else the folder's own head) and the folder's own, read from its config.json
    before any weight is loaded; a `UsageError` for a head the folder does not have, or when it names none that
    can be exported and `--task` is not given."""
    architecture = folder_architecture(config.model)
    own = task_of_architecture(architecture)
    task = config.task or (own if own in EXPORTED else None)
    if task is None and architecture is None:
        raise UsageError(
            f"MODEL {config.model!r}: its config.json names no architecture, so its head is unknown: pass --task "
            f"({', '.join(EXPORTED)})."
        )
    if task is None:
        raise UsageError(
            f"MODEL {config.model!r} is a {architecture}, a head export_onnx does not export: pass --task "
            "feature-extraction to export the encoder alone."
        )
    problem = head_problem(config.model, architecture, task, _export_instead(own, task))
    if problem is not None:
        raise UsageError(problem)
    return task, own


def run(config: OnnxExportConfig) -> None:
    """The command: export, then compare with PyTorch (`sinusoidal-encoder-export-onnx`, `training/export_onnx.py` in
    a checkout, once `console.py` has parsed the flags)."""
    for module in ("onnx", "onnxscript") if config.no_check else ("onnx", "onnxscript", "onnxruntime"):
        require_extra(module, what="the ONNX export")  # before the model is loaded
    task, own = resolve_task(config)
    check_local_files("MODEL", config.model)  # the weights are the config's, before any is read
    entry = TASKS[task]
    auto_class = auto_class_of(task)
    with loading("MODEL", config.model):
        model = load_trained(auto_class, config.model, _export_instead(own, task))  # before anything is written
    print(f"exporting {type(model).__name__} ({task}) from {config.model}")
    folder, name = os.path.split(os.path.abspath(config.output_path))
    clean_leftovers(folder, recursive=False)  # an export killed before
    with staged(folder, replaces=(name + ".data",)) as temporary:  # the graph's weights file keeps its name
        export_onnx(model, os.path.join(temporary, name), entry.outputs, config.opset, entry.input_axes)
    print(f"wrote {config.output_path}")
    if not config.no_check:
        worst = check_onnx(model, config.output_path, entry.outputs, input_axes=entry.input_axes)
        print(f"onnxruntime against PyTorch, real tokens, lengths 8 and 300: max abs difference {worst:.2e}")


def main(argv: list[str] | None = None) -> None:
    """`python -m sinusoidal_encoder_training.publishing.onnx_export`: the command of `argv` (`sys.argv[1:]` by
    default)."""
    run(parse_config(OnnxExportConfig, argv))


if __name__ == "__main__":
    with front():
        main()
