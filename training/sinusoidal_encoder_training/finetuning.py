"""The fine-tuning stage, with accelerate, on the data, task and model that a `FinetuningConfig` (`configs`)
describes. What a task does with its data is its recipe, the module its entry in `tasks.TASKS` names
(`classification`, `question_answering`, `multiple_choice`): this module loads the data, the tokenizer and the model,
trains through the loop, and exports the folder.

In code: `finetune(FinetuningConfig(model_name_or_path=..., output_dir=...))`, then `export(config, result)`. This
module holds the task data, the model config and its checks, the stage, the export of its folder and the command
line (`run`, `main`).
"""

from __future__ import annotations

import dataclasses
import importlib
import os
from collections.abc import Callable, Sequence
from typing import Any

import datasets
import torch
import transformers
from transformers import (
    AutoConfig,
    AutoModel,
    AutoTokenizer,
)

import sinusoidal_encoder
from sinusoidal_encoder_training.arguments import (
    apply_overrides,
    parse_config,
)
from sinusoidal_encoder_training.command_line import (
    UsageError,
    check_local_files,
    front,
    loading,
)
from sinusoidal_encoder_training.configs import FinetuningConfig
from sinusoidal_encoder_training.corpus import load_builtin_corpus
from sinusoidal_encoder_training.data import load_raw_datasets
from sinusoidal_encoder_training.export import describe_data, export_model, optional_step
from sinusoidal_encoder_training.hub import check_hub_access
from sinusoidal_encoder_training.loop import (
    StageResult,
    TrainingTask,
    make_accelerator,
    make_loaders,
    train,
)
from sinusoidal_encoder_training.metrics_log import write_json
from sinusoidal_encoder_training.optimization import make_optimizer
from sinusoidal_encoder_training.run_folder import claim_output_folder
from sinusoidal_encoder_training.tasks import TASKS

BASELINE_PREFIXES = ("majority_", "tfidf_logreg_")  # the metric names of `run_baselines`
BUILTIN_LABELS = {"python-docs": "python", "python-stdlib": "python"}  # the rest: the package name


STAGE = "fine-tuning"  # the stage's name: in the run folder's settings and the trackers (the tasks' `name`)


@dataclasses.dataclass(frozen=True)
class Prepared:
    """What a task's recipe (`prepare(config, raw, tokenizer, model_config)` of the module its `tasks.TASKS` entry
    names) makes of the raw splits: the tokenised splits, their collator, the task of the training loop (made from
    the data order's generator), the lines that head the run's log, the problem type, how the card states the
    labels, its pipeline example and its intended uses, and scores to add after training (the baselines), computed
    on the main process from the final evaluation."""

    train: datasets.Dataset
    validation: datasets.Dataset
    collate: Callable
    make_task: Callable[[torch.Generator], TrainingTask]
    header: list[str]
    problem: str
    labels: str
    example: str | None  # the text of the card's pipeline example; None: the task has no pipeline
    uses: str
    extra_scores: Callable[[dict[str, float]], dict[str, float]] | None = None


@dataclasses.dataclass(frozen=True)
class FinetuningResult(StageResult):
    """What `finetune()` returns (see `StageResult`; the final evaluation has the baselines' scores when asked),
    and what the task's recipe prepared (`Prepared`: the problem type, the labels)."""

    prepared: Prepared


def load_task_data(config: FinetuningConfig) -> datasets.DatasetDict:
    """The raw splits; for the built-in task, passages of the built-in corpus labelled with the library they document
    (train and validation are the corpus's own hash-based splits)."""
    if config.builtin:
        corpus = load_builtin_corpus()
        raw = corpus.map(
            lambda batch: {"label": [BUILTIN_LABELS.get(s, s) for s in batch["source"]]},
            batched=True,
            remove_columns=["source"],
        )
    else:
        raw = load_raw_datasets(config, config.seed, numbers=True)  # labels and targets: finite
    for split, limit in (("train", config.max_train_samples), ("validation", config.max_eval_samples)):
        if limit is not None and limit < len(raw[split]):
            raw[split] = raw[split].shuffle(seed=config.seed).select(range(limit))
    return raw


def load_model_config(config: FinetuningConfig, sinusoidal_only: bool = True) -> Any:
    """The model config of --model_name_or_path with `--config_overrides` applied, before any data is read. Refuse
    (with `sinusoidal_only`, the default loading's case) a model of another type, and an override that would change
    a pretrained weight's shape."""
    with loading("--model_name_or_path", config.model_name_or_path):
        model_config = AutoConfig.from_pretrained(config.model_name_or_path)
    if sinusoidal_only and model_config.model_type != sinusoidal_encoder.SinusoidalEncoderConfig.model_type:
        raise UsageError(
            f"--model_name_or_path {config.model_name_or_path!r} is a {model_config.model_type!r} model, not a "
            f"sinusoidal_encoder one."
        )
    check_local_files("--model_name_or_path", config.model_name_or_path)  # the weights, before any work
    if config.tokenizer_name:
        check_local_files("--tokenizer_name", config.tokenizer_name, "tokenizer")
    else:
        check_local_files("--model_name_or_path", config.model_name_or_path, "tokenizer")
    if config.config_overrides:
        shapes = weight_shapes(model_config)
        apply_overrides(model_config, config.config_overrides)
        changed = sorted(name for name, shape in weight_shapes(model_config).items() if shapes.get(name) != shape)
        if changed:
            raise UsageError(
                f"--config_overrides {config.config_overrides!r} changes the shape of {len(changed)} pretrained "
                f"weight(s) ({changed[0]}, ...): fine-tuning keeps the pretrained architecture; override fields "
                "such as classifier_pooling and the dropouts."
            )
    return model_config


def weight_shapes(model_config: Any) -> dict[str, tuple[int, ...]]:
    """Name → shape of every weight of the base model `model_config` describes (built on the meta device: no
    memory, no initialisation)."""
    with torch.device("meta"):
        model = AutoModel.from_config(model_config)
    return {name: tuple(tensor.shape) for name, tensor in model.state_dict().items()}


def check_texts(raw: datasets.DatasetDict, columns: Sequence[str]) -> None:
    """A `UsageError` naming the split, the row (its number and other values: a split drawn from the training file
    is shuffled) and the column when a text column of the data holds something other than text: a missing value
    (null) reached the tokenizer as a TypeError, or, formatted into a choice, as the word "None"."""
    for split in ("train", "validation"):
        for column in columns:
            for row, value in enumerate(raw[split][column], start=1):
                if not isinstance(value, str):
                    others = {name: held for name, held in raw[split][row - 1].items() if name != column}
                    shown = repr(others) if len(repr(others)) <= 80 else repr(others)[:77] + "..."
                    raise UsageError(
                        f"The {split} split, row {row} {shown}: {column!r} is {value!r}, not text: give every row a "
                        'text ("" for none), or remove the row.'
                    )


def model_inputs(batch: dict[str, torch.Tensor], labels: bool = True) -> dict[str, torch.Tensor]:
    """What a batch gives the model: ids, mask, and the labels (unless `labels` is False)."""
    names = ("input_ids", "attention_mask", "labels") if labels else ("input_ids", "attention_mask")
    return {name: batch[name] for name in names if name in batch}


def finetune(
    config: FinetuningConfig, model_init: Callable[[transformers.PretrainedConfig], Any] | None = None
) -> FinetuningResult:
    """Load the data and the model, fine-tune, evaluate (and score the baselines when asked).

    What the task does with its data is the recipe its entry in `tasks.TASKS` names (`classification`,
    `question_answering`, `multiple_choice`): its `prepare` checks and tokenises the splits, sets the task's fields
    of the model config (the labels), and gives the collator and the task of the training loop.

    `model_init(model_config)` makes the model to fine-tune, as in transformers' `Trainer(model_init=...)`: it is
    given the config of `--model_name_or_path` with the task's fields set and called once every RNG is seeded, so a
    new head starts the same in every run. By default the task's Auto class loads `--model_name_or_path`, which must
    be a sinusoidal encoder (the exported model card describes one); a `model_init` may return any architecture with
    the task's outputs whose loss honours `num_items_in_batch`."""
    accelerator = make_accelerator(config)
    if config.push_to_hub:
        check_hub_access(config.hub_model_id, flag="--push_to_hub")
    model_config = load_model_config(config, sinusoidal_only=model_init is None)
    claim_output_folder(accelerator, config, STAGE)  # before the data: the folder, a resume
    if config.builtin and not config.with_baselines:
        accelerator.print("no baselines: they need scikit-learn (the 'baselines' extra)")
    recipe = importlib.import_module(f"sinusoidal_encoder_training.{TASKS[config.task].recipe}")
    tokenizer_source = config.tokenizer_name or config.model_name_or_path
    with loading(
        "--tokenizer_name" if config.tokenizer_name else "--model_name_or_path", tokenizer_source, "tokenizer"
    ):
        tokenizer = AutoTokenizer.from_pretrained(tokenizer_source)
    with accelerator.main_process_first():
        raw = load_task_data(config)
        prepared = recipe.prepare(config, raw, tokenizer, model_config)
    if model_init is None:
        auto_class = getattr(transformers, TASKS[config.task].auto_class)
        with loading("--model_name_or_path", config.model_name_or_path):
            model = auto_class.from_pretrained(
                config.model_name_or_path, config=model_config, ignore_mismatched_sizes=config.ignore_mismatched_sizes
            )
    else:
        model = model_init(model_config)

    generator = torch.Generator()
    train_loader, eval_loader = make_loaders(
        config, prepared.train, prepared.validation, generator, prepared.collate, prepared.collate
    )
    optimizer = make_optimizer(model, config)
    model, optimizer, train_loader, eval_loader = accelerator.prepare(model, optimizer, train_loader, eval_loader)
    task = prepared.make_task(generator)
    trained = train(accelerator, config, model, optimizer, train_loader, eval_loader, task, prepared.header)
    final = trained.metrics
    if prepared.extra_scores is not None and accelerator.is_main_process:
        extra = optional_step("score the baselines", prepared.extra_scores, final)
        final.update(extra or {})
    return FinetuningResult(accelerator, model, tokenizer, trained.progress, final, trained.max_train_steps, prepared)


def export(config: FinetuningConfig, result: FinetuningResult) -> None:
    """The Hub-ready folder: weights, config with the label names, code, tokenizer, README.md (model card with the
    results and the baselines), pictures and eval_results.json."""
    accelerator, progress, final = result.accelerator, result.progress, result.metrics
    problem, labels, pipeline_tag = result.prepared.problem, result.prepared.labels, config.task
    if config.builtin:
        data = (
            "The offline downstream task of sinusoidal-encoder: passages of its built-in corpus (Python "
            f"documentation and docstrings) labelled with the library they document ({labels}); train and "
            "validation are the corpus's hash-based splits."
        )
    else:
        data = describe_data(config)
    base = config.model_name_or_path
    if os.path.isdir(base):
        base = config.base_model_id or f"a local model folder, {os.path.basename(os.path.normpath(base))}"
    procedure = (
        f"Fine-tuned from `{base}` for {config.task} ({problem}; labels: {labels}) with "
        f"`training/finetune.py` of sinusoidal-encoder: {progress.completed_steps:,} optimizer steps, inputs "
        f"truncated to {config.max_length} tokens, AdamW (lr {config.learning_rate:g}, weight decay "
        f"{config.weight_decay} on matrices), {config.lr_scheduler_type} schedule after warmup, global batch "
        f"{config.global_batch_size(accelerator.num_processes)}, seed {config.seed}."
    )
    if config.config_overrides:
        procedure += f" Config changed from the pretrained model's: `{config.config_overrides}`."
    if accelerator.is_main_process:
        os.makedirs(config.output_dir, exist_ok=True)
        write_json(os.path.join(config.output_dir, "eval_results.json"), final)
    export_model(
        accelerator,
        config,
        result.model,
        getattr(transformers, TASKS[config.task].auto_class),
        result.tokenizer,
        pipeline_tag=pipeline_tag,
        example=result.prepared.example,
        training_data=data,
        training_procedure=procedure,
        metrics={
            k.removeprefix("eval_"): v for k, v in final.items() if k.startswith("eval_") and isinstance(v, float)
        },
        baselines={k: v for k, v in final.items() if k.startswith(("majority_", "tfidf_logreg_"))},
        dataset_name="built-in library-of-a-passage task" if config.builtin else None,
        base_model=config.base_model_id
        or (config.model_name_or_path if not os.path.isdir(config.model_name_or_path) else None),
        intended_uses=result.prepared.uses,
        extra_tags=(pipeline_tag,),
    )


def run(config: FinetuningConfig) -> dict[str, float]:
    """The command: fine-tune, then export the folder (`sinusoidal-encoder-finetune`, `training/finetune.py` in a
    checkout, once `console.py` has parsed the flags); returns the final metrics."""
    result = finetune(config)
    try:
        export(config, result)
    finally:
        if config.with_tracking:
            result.accelerator.end_training()
    return result.metrics


def main(argv: list[str] | None = None) -> dict[str, float]:
    """`python -m sinusoidal_encoder_training.finetuning`: the command of `argv` (`sys.argv[1:]` by default)."""
    return run(parse_config(FinetuningConfig, argv))


if __name__ == "__main__":
    with front():
        main()
