"""The fine-tuning stage, with accelerate, on the data, task and model that a `FinetuningConfig` (`configs`)
describes. What a task does with its data is its recipe, the module its entry in the task table names
(`tasks/NAME/recipe.py`): this module loads the data, the tokenizer and the model, trains through the loop, and
exports the folder. It imports the recipes; they import what they share from `tasks.recipes`, never this module.

In code: `finetune(FinetuningConfig(model_name_or_path=..., output_dir=...))`, then `export(config, result)`. This
module holds the task data, the model config and its checks, the stage, the export of its folder and the command
line (`run`, `main`).
"""

from __future__ import annotations

import copy
import dataclasses
import importlib
import os
from collections.abc import Callable
from typing import Any

import datasets
import torch
import transformers
from accelerate import Accelerator
from transformers import (
    AutoConfig,
    AutoModel,
    AutoTokenizer,
)

import sinusoidal_encoder
from sinusoidal_encoder_training.cli.arguments import (
    apply_overrides,
    parse_config,
)
from sinusoidal_encoder_training.cli.command_line import (
    UsageError,
    check_local_files,
    check_tokenizer_fits,
    check_tokenizer_token,
    front,
    initialised_weights,
    loading,
    quiet_loading,
)
from sinusoidal_encoder_training.configs import FinetuningConfig
from sinusoidal_encoder_training.data.batches import (
    length_grouped_sampler,
    longest_first,
    padding_share,
    row_lengths,
)
from sinusoidal_encoder_training.data.corpus import load_builtin_corpus
from sinusoidal_encoder_training.data.pipeline import load_raw_datasets, validation_split
from sinusoidal_encoder_training.publishing.export import describe_data, export_model, optional_step
from sinusoidal_encoder_training.publishing.hub import check_hub_access
from sinusoidal_encoder_training.runs.accelerator import (
    main_process_first,
    make_accelerator,
    make_loaders,
    prepare_training,
)
from sinusoidal_encoder_training.runs.best_model import describe_best
from sinusoidal_encoder_training.runs.loop import StageResult, train
from sinusoidal_encoder_training.runs.metrics_log import write_json
from sinusoidal_encoder_training.runs.optimization import describe_schedule, make_optimizer
from sinusoidal_encoder_training.runs.run_folder import claim_output_folder, given_back_if_stopped
from sinusoidal_encoder_training.tasks.recipes import (
    STAGE,
    HeadPlan,
    OtherLabels,
    Prepared,
    draw_rows,
    plan_head,
    run_labels,
)
from sinusoidal_encoder_training.tasks.registry import TASKS, auto_class_of

BUILTIN_LABELS = {"python-docs": "python", "python-stdlib": "python"}  # the rest: the package name


@dataclasses.dataclass(frozen=True)
class FinetuningResult(StageResult):
    """What `finetune()` returns (see `StageResult`; the final evaluation has the baselines' scores when asked,
    `baselines` holds them alone), and what the task's recipe prepared (`Prepared`: the problem type, the labels)."""

    prepared: Prepared
    baselines: dict[str, float] = dataclasses.field(default_factory=dict)


def load_task_data(config: FinetuningConfig) -> datasets.DatasetDict:
    """The raw splits, the validation split cut to --max_eval_samples rows drawn at random; for the built-in task,
    passages of the built-in corpus labelled with the library they document (train and validation are the corpus's
    own hash-based splits)."""
    if config.builtin:
        corpus = load_builtin_corpus()
        raw = corpus.map(
            lambda batch: {"label": [BUILTIN_LABELS.get(s, s) for s in batch["source"]]},
            batched=True,
            remove_columns=["source"],
        )
    else:
        raw = load_raw_datasets(config, config.seed, numbers=True)  # labels and targets: finite
    # --max_train_samples: drawn by the recipe, after its label space (`recipes.draw_training_examples`)
    raw["validation"] = draw_rows(raw["validation"], config.max_eval_samples, config.seed)
    return raw


def validation_source(config: FinetuningConfig, split: str | None) -> str:
    """Where the validation split of `load_task_data` comes from, in words; `split` is the split of the data it is
    (`data.pipeline.validation_split`: None for a share of the training split held out)."""
    if config.builtin:
        return "the validation passages of the built-in task"
    if config.validation_file:
        if config.validation_file == config.train_file:
            return f"the whole of {config.validation_file!r}"
        return f"--validation_file {config.validation_file!r}"
    if split is not None:
        return f"the {split!r} split of --dataset_name {config.dataset_name!r}"
    share, seed = config.validation_split_percentage, config.seed
    if config.dataset_name:
        return (
            f"the {share}% of the training split of --dataset_name {config.dataset_name!r} that a fine-tuning run on "
            f"it holds out for validation (seed {seed}; it has no 'validation' split)"
        )
    return (
        f"the {share}% of --train_file {config.train_file!r} that a fine-tuning run on it holds out for validation "
        f"(seed {seed}); --validation_file alone scores a whole file"
    )


def load_model_config(config: FinetuningConfig, sinusoidal_only: bool = True) -> Any:
    """The model config of --model_name_or_path with `--config_overrides` applied, before any data is read. Refuse
    (with `sinusoidal_only`, the default loading's case) a model of another type, and an override that would change
    a pretrained weight's shape."""
    with loading(config.model_flag, config.model_name_or_path):
        model_config = AutoConfig.from_pretrained(config.model_name_or_path)
    if sinusoidal_only and model_config.model_type != sinusoidal_encoder.SinusoidalEncoderConfig.model_type:
        raise UsageError(
            f"{config.model_flag} {config.model_name_or_path!r} is a {model_config.model_type!r} model, not a "
            f"sinusoidal_encoder one."
        )
    # the weights, before any work (a head --ignore_mismatched_sizes replaces is not judged)
    check_local_files(config.model_flag, config.model_name_or_path, replaced_head=config.ignore_mismatched_sizes)
    if config.tokenizer_name:
        check_local_files("--tokenizer_name", config.tokenizer_name, "tokenizer")
    else:
        check_local_files(config.model_flag, config.model_name_or_path, "tokenizer")
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


def record_training_length(config: FinetuningConfig, model_config: Any) -> None:
    """A sinusoidal encoder fine-tuned at inputs longer than it was trained at has been trained there: its
    `max_position_embeddings` becomes `--max_length`, as pretraining's context extension does (what
    sentence-transformers truncates at, the card's training length, where `long_input_attention_window` starts).
    For training only: an evaluation scores the folder's model as it runs."""
    if model_config.model_type == sinusoidal_encoder.SinusoidalEncoderConfig.model_type:
        model_config.max_position_embeddings = max(model_config.max_position_embeddings, config.max_length)


def load_tokenizer(config: FinetuningConfig, model_config: Any) -> Any:
    """The tokenizer of --tokenizer_name (default: the model's own), before any work; refused when it has no
    padding token or more tokens than the model has token embeddings."""
    source = config.tokenizer_name or config.model_name_or_path
    flag = "--tokenizer_name" if config.tokenizer_name else config.model_flag
    with loading(flag, source, "tokenizer"):
        tokenizer = AutoTokenizer.from_pretrained(source)
    label = f"{flag} {source!r}" if config.tokenizer_name else f"the tokenizer of {flag} {source!r}"
    check_tokenizer_token(tokenizer, "pad_token", label, "fine-tuning pads each batch to its longest input")
    if config.tokenizer_name:
        check_tokenizer_fits(
            label,
            len(tokenizer),
            f"{config.model_flag} {config.model_name_or_path!r}",
            model_config.vocab_size,
            "leave --tokenizer_name out (the model's own tokenizer), or give the one it was trained with.",
        )
    return tokenizer


def weight_shapes(model_config: Any) -> dict[str, tuple[int, ...]]:
    """Name → shape of every weight of the base model `model_config` describes (built on the meta device: no
    memory, no initialisation)."""
    with torch.device("meta"):
        model = AutoModel.from_config(model_config)
    return {name: tuple(tensor.shape) for name, tensor in model.state_dict().items()}


def load_task_model(config: FinetuningConfig, model_config: Any, plan: HeadPlan) -> tuple[Any, list[str]]:
    """The task's model of --model_name_or_path: the folder's weights, or, when `plan` says a new head starts
    (`fresh`), the folder's encoder alone under a head transformers initialises as it does for a folder without
    one; and the modules transformers initialised (`new_modules`), which the stage says in place of transformers'
    load report."""
    auto_class = auto_class_of(config.task)
    source = config.model_name_or_path
    with loading(config.model_flag, source), quiet_loading():
        if not plan.fresh:
            model, info = auto_class.from_pretrained(
                source,
                config=model_config,
                ignore_mismatched_sizes=config.ignore_mismatched_sizes,
                output_loading_info=True,
            )
            return model, new_modules(info)
        encoder = AutoModel.from_pretrained(source, config=model_config)
        model_class = getattr(sinusoidal_encoder, f"SinusoidalEncoder{TASKS[config.task].head}")
        prefix = model_class.base_model_prefix
        weights = {f"{prefix}.{name}": tensor for name, tensor in encoder.state_dict().items()}
        model, info = model_class.from_pretrained(
            None, config=model_config, state_dict=weights, output_loading_info=True
        )
        return model, new_modules(info)


def new_modules(info: dict[str, Any]) -> list[str]:
    """The modules whose weights the folder did not give (missing, or of another shape) and transformers
    initialised, from its loading info (`output_loading_info`)."""
    return sorted({key.rsplit(".", 1)[0] for key in initialised_weights(info)})


def head_line(new: list[str]) -> str:
    """The header's line on the head: the modules new on the folder's encoder (`new_modules`), or the folder's own."""
    if not new:
        return "Head = the folder's own, trained further"
    return f"Head = new on the folder's encoder, initialised at random: {', '.join(new)}"


def read_and_prepare(
    config: FinetuningConfig, recipe, tokenizer, model_config
) -> tuple[datasets.DatasetDict, Prepared]:
    """The task's raw splits (`load_task_data`) and what its recipe prepares of them."""
    raw = load_task_data(config)
    return raw, recipe.prepare(config, raw, tokenizer, model_config)


def group_by_length(config: FinetuningConfig, train, generator: torch.Generator, processes: int) -> tuple[Any, str]:
    """--group_by_length: the training sampler (`data.batches.length_grouped_sampler`, its batches a step's examples
    over every process) and the header's line on what it saves: the share of padding among the tokens of an epoch's
    batches grouped by length, and of batches drawn at random (each drawn as with the run's seed)."""
    lengths = row_lengths(train)
    step = config.global_batch_size(processes)
    sampler = length_grouped_sampler(lengths, step, generator)
    drawn = torch.Generator().manual_seed(config.seed)
    grouped = list(length_grouped_sampler(lengths, step, drawn))
    shuffled = torch.randperm(len(lengths), generator=drawn.manual_seed(config.seed)).tolist()
    batch, multiple = config.per_device_train_batch_size, config.pad_to_multiple_of
    line = (
        f"Batches = grouped by length: {padding_share(lengths, grouped, batch, multiple):.0%} of their tokens "
        f"padding ({padding_share(lengths, shuffled, batch, multiple):.0%} drawn at random)"
    )
    return sampler, line


def evaluation_order(config: FinetuningConfig, validation) -> tuple[list[int], str]:
    """--group_by_length, for evaluation (as transformers' Trainer groups its evaluation batches too): the split's
    examples longest first (`data.batches.longest_first`), so that each batch holds examples of similar length (the
    first batch the largest); and the header's line on what it saves. The figures do not depend on the order."""
    lengths = row_lengths(validation)
    order = longest_first(lengths)
    batch, multiple = config.per_device_eval_batch_size, config.pad_to_multiple_of
    line = (
        f"Evaluation batches = longest first: {padding_share(lengths, order, batch, multiple):.0%} of their tokens "
        f"padding ({padding_share(lengths, list(range(len(lengths))), batch, multiple):.0%} in the split's order)"
    )
    return order, line


def finetune(
    config: FinetuningConfig, model_init: Callable[[transformers.PretrainedConfig], Any] | None = None
) -> FinetuningResult:
    """Load the data and the model, fine-tune, evaluate (and score the baselines when asked).

    What the task does with its data is the recipe its entry in `tasks.registry.TASKS` names (`tasks/NAME/recipe.py`):
    its `prepare` checks and tokenises the splits, sets the task's fields
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
    record_training_length(config, model_config)
    tokenizer = load_tokenizer(config, model_config)
    claim_output_folder(accelerator, config, STAGE)  # before the data: the folder, a resume
    with given_back_if_stopped(accelerator, config.output_dir):  # bad data found once read: as found
        if config.builtin and not config.with_baselines:
            accelerator.print("no baselines: they need scikit-learn (the 'baselines' extra)")
        recipe = importlib.import_module(TASKS[config.task].recipe)
        folder_config = copy.deepcopy(model_config)  # the folder's head, before the recipe sets the run's labels
        raw, prepared = main_process_first(
            accelerator, lambda: read_and_prepare(config, recipe, tokenizer, model_config)
        )
        config.check_best_metric(TASKS[config.task], prepared.problem)  # what the data made of the task
        plan = plan_head(config, folder_config, *run_labels(config, model_config))
        if model_init is None:
            if plan.new_head is not None:
                accelerator.print(plan.new_head)
            model, new = load_task_model(config, model_config, plan)
            header = [*prepared.header, head_line(new)]
        else:
            model, header = model_init(model_config), prepared.header

        generator = torch.Generator()
        sampler = eval_order = None
        if config.group_by_length:
            sampler, line = group_by_length(config, prepared.train, generator, accelerator.num_processes)
            eval_order, eval_line = evaluation_order(config, prepared.validation)
            header = [*header, line, eval_line]
        # every example trained on in every epoch, as with transformers' Trainer: the last, smaller batch is a
        # step of its own (its loss a mean over its own units), and a set smaller than a batch trains at all
        train_loader, eval_loader = make_loaders(
            config,
            prepared.train,
            prepared.validation,
            generator,
            prepared.collate,
            prepared.collate,
            sampler,
            drop_last=False,
            eval_order=eval_order,
        )
        optimizer = make_optimizer(model, config)
        model, optimizer, train_loader, eval_loader = prepare_training(
            accelerator, config, model, optimizer, train_loader, eval_loader
        )
        task = prepared.make_task(generator)
        task.evaluation_order = eval_order
        trained = train(accelerator, config, model, optimizer, train_loader, eval_loader, task, header)
        final = trained.metrics
        baselines = {}
        if prepared.extra_scores is not None and accelerator.is_main_process:
            baselines = optional_step("score the baselines", prepared.extra_scores, final) or {}
            final.update(baselines)
        return FinetuningResult(
            accelerator,
            model,
            tokenizer,
            trained.progress,
            final,
            trained.max_train_steps,
            validation_split(config, raw["validation"]),
            prepared,
            baselines,
        )


def evaluate_finetuned(config: FinetuningConfig, accelerator: Accelerator) -> tuple[dict[str, float], str]:
    """The final evaluation of a fine-tuning run, without the training: the head of --model_name_or_path (trained for
    --task) scored on the validation split of the run's data, prepared by the task's recipe as fine-tuning prepares
    it, summed over the processes of `accelerator`; with the examples scored, in words (as printed). Data with a
    label the head lacks is refused in one line (`plan_head`; data with some of its labels only is scored by the
    whole head); no folder is written."""
    model_config = load_model_config(config)
    tokenizer = load_tokenizer(config, model_config)
    recipe = importlib.import_module(TASKS[config.task].recipe)
    folder_config = copy.deepcopy(model_config)
    try:
        raw, prepared = main_process_first(
            accelerator, lambda: read_and_prepare(config, recipe, tokenizer, model_config)
        )
        problem, labels = run_labels(config, model_config)
        plan = plan_head(config, folder_config, problem, labels)
    except OtherLabels as error:
        raise UsageError(f"{error.what}: give data with the head's labels.") from error
    if plan.fresh:  # a head of another task: never scored
        raise UsageError(f"{config.model_flag} {config.model_name_or_path!r} has no trained {config.task} head.")
    count, source = len(raw["validation"]), validation_source(config, validation_split(config, raw["validation"]))
    if count == config.max_eval_samples:
        source = f"drawn at random by --max_eval_samples from {source}"
    accelerator.print(f"scoring {count:,} example{'s' * (count != 1)}: {source}")
    model, _ = load_task_model(config, model_config, plan)  # every weight the folder's: its files were checked
    loader = torch.utils.data.DataLoader(
        prepared.validation, batch_size=config.per_device_eval_batch_size, collate_fn=prepared.collate
    )
    model, loader = accelerator.prepare(model, loader)
    return prepared.make_task(torch.Generator()).evaluate(model, loader, accelerator), source


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
        data = describe_data(config, result.validation_split)
    base = config.model_name_or_path
    if os.path.isdir(base):
        base = config.base_model_id or f"a local model folder, {os.path.basename(os.path.normpath(base))}"
    procedure = (
        f"Fine-tuned from `{base}` for {config.task} ({problem}; labels: {labels}) with "
        f"`training/finetune.py` of sinusoidal-encoder: {progress.completed_steps:,} optimizer steps, inputs "
        f"truncated to {config.max_length} tokens, AdamW (lr {config.learning_rate:g}, weight decay "
        f"{config.weight_decay} on matrices), {describe_schedule(config)}, global batch "
        f"{config.global_batch_size(accelerator.num_processes)}, seed {config.seed}."
        + describe_best(config, progress, result.max_train_steps)
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
        auto_class_of(config.task),
        result.tokenizer,
        pipeline_tag=pipeline_tag,
        example=result.prepared.example,
        training_data=data,
        dataset_split=result.validation_split,
        training_procedure=procedure,
        metrics={
            k.removeprefix("eval_"): v for k, v in final.items() if k.startswith("eval_") and isinstance(v, float)
        },
        baselines=result.baselines,
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
    """`python -m sinusoidal_encoder_training.stages.finetuning`: the command of `argv` (`sys.argv[1:]` by default)."""
    return run(parse_config(FinetuningConfig, argv))


if __name__ == "__main__":
    with front():
        main()
