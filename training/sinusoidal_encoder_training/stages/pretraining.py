"""The pretraining stage: masked language modelling with accelerate on the corpus, model and tokenizer that a
`PretrainingConfig` (`configs`) describes.

In code: `pretrain(PretrainingConfig(output_dir=..., max_train_steps=...))`, then `export(config, result)`. This
module holds the model the configuration describes, the masked-LM task of the training loop, the stage, the export
of its folder and the command line (`run`, `main`).
"""

from __future__ import annotations

import dataclasses

import datasets
import torch
import transformers
from accelerate import Accelerator
from transformers import AutoConfig, AutoModelForMaskedLM, AutoTokenizer
from transformers.tokenization_utils_base import VERY_LARGE_INTEGER

import sinusoidal_encoder
from sinusoidal_encoder_training.cli.arguments import apply_overrides, parse_config
from sinusoidal_encoder_training.cli.command_line import (
    UsageError,
    check_local_files,
    check_tokenizer_fits,
    check_tokenizer_token,
    front,
    loading,
    quiet_loading,
)
from sinusoidal_encoder_training.configs import MODEL_SIZES, PretrainingConfig
from sinusoidal_encoder_training.data.batches import (
    EpochTaggedSampler,
    IndexedExamples,
    IndexedStream,
    KeyedMaskingCollator,
    masked_per_row,
)
from sinusoidal_encoder_training.data.pipeline import (
    check_stream_blocks,
    derive_seed,
    load_raw_datasets,
    tokenize_and_pack,
    validation_split,
)
from sinusoidal_encoder_training.evaluation.masked_lm import (
    MaskedLMEvaluation,
    describe_evaluation,
    unigram_log_probs,
)
from sinusoidal_encoder_training.publishing.export import describe_data, export_model
from sinusoidal_encoder_training.publishing.hub import check_hub_access
from sinusoidal_encoder_training.runs.accelerator import (
    main_process_first,
    make_accelerator,
    make_loaders,
    prepare_training,
)
from sinusoidal_encoder_training.runs.best_model import describe_best
from sinusoidal_encoder_training.runs.compilation import uses_cuda_graphs
from sinusoidal_encoder_training.runs.even_batches import unlabel_repeated_examples
from sinusoidal_encoder_training.runs.loop import StageResult, TrainingTask, train
from sinusoidal_encoder_training.runs.optimization import describe_schedule, make_optimizer
from sinusoidal_encoder_training.runs.run_folder import claim_output_folder, given_back_if_stopped
from sinusoidal_encoder_training.tasks.registry import task_of_architecture


@dataclasses.dataclass(frozen=True)
class PretrainingResult(StageResult):
    """What `pretrain()` returns (see `StageResult`)."""


def describe_length_schedule(schedule: tuple[tuple[int, int], ...]) -> str:
    """How the model card states a sequence-length warmup (an empty string without one)."""
    if not schedule:
        return ""
    phases = ", ".join(f"of {length} tokens until step {step}" for length, step in schedule)
    return f" (sequence-length warmup: each block cut into rows {phases}; whole blocks after)"


def exact_mask_count(config: PretrainingConfig) -> bool:
    """Whether each block gets exactly round(mlm_probability x length) masked tokens (`--mask_count exact`, and by
    default where the run replays CUDA graphs: sampled masks give each batch its own number of masked tokens, the
    shape of the masked-LM head's sparse prediction, and each new shape records a new graph) rather than each token
    its own draw (`--mask_count sampled`, the default elsewhere)."""
    if config.mask_count is not None:
        return config.mask_count == "exact"
    return uses_cuda_graphs(config)


def describe_masking(config: PretrainingConfig) -> str:
    """The masking, for the run's header and the model card: how many tokens and how they are chosen."""
    if exact_mask_count(config):
        count = masked_per_row(config.mlm_probability, config.max_seq_length)
        chosen = f"exactly {count} of each block's {config.max_seq_length} tokens"
    else:
        chosen = f"{config.mlm_probability:.0%} of tokens, each drawn on its own"
    return f"{chosen}; 80% [MASK], 10% random, 10% kept"


def load_tokenizer(config: PretrainingConfig):
    """The run's tokenizer (`PretrainingConfig.tokenizer_source`: `--tokenizer_name`, the model's own, or the
    shipped one), without a length cap: the length a model is trained at is its `max_position_embeddings`. Refused
    without a mask token, before any work."""
    flag, source = config.tokenizer_source
    with loading(flag, source, "tokenizer"):
        tokenizer = AutoTokenizer.from_pretrained(source)
    check_tokenizer_token(tokenizer, "mask_token", tokenizer_label(config), "masked-LM pretraining masks with it")
    tokenizer.model_max_length = VERY_LARGE_INTEGER
    return tokenizer


def tokenizer_label(config: PretrainingConfig) -> str:
    """How a line names the run's tokenizer: `--tokenizer_name 'x'`, `the tokenizer of --model_name_or_path 'x'`,
    `the shipped tokenizer`."""
    flag, source = config.tokenizer_source
    if flag == "--model_name_or_path":
        return f"the tokenizer of {flag} {source!r}"
    return f"{flag} {source!r}" if flag == "--tokenizer_name" else flag


def build_model_config(config: PretrainingConfig, tokenizer) -> transformers.PretrainedConfig:
    """The config of the model the settings describe (a preset or a config source, sized for the tokenizer and the
    training length, with `--config_overrides`; or that of `--model_name_or_path`, whose `max_position_embeddings`
    becomes `--max_seq_length` when that is longer: continued at a longer length, the model is trained there
    (context extension, docs/pretraining.md)), with `sparse_prediction=True`
    where it has the option: training and evaluation need logits at the masked positions only (the exported folder
    carries the published default, see `export.published_config`). Cheap, and random-free: `pretrain` builds it
    before loading any data, so that a bad override stops the run before work starts."""
    if config.model_name_or_path:
        with loading("--model_name_or_path", config.model_name_or_path):
            model_config = AutoConfig.from_pretrained(config.model_name_or_path)
            check_local_files("--model_name_or_path", config.model_name_or_path)  # the weights, before any work
        if getattr(model_config, "model_type", None) == "sinusoidal_encoder":  # context extension: trained longer now
            model_config.max_position_embeddings = max(model_config.max_position_embeddings, config.max_seq_length)
    else:
        if config.config_name in MODEL_SIZES:
            model_config = sinusoidal_encoder.SinusoidalEncoderConfig(**MODEL_SIZES[config.config_name])
        else:
            with loading("--config_name", config.config_name):
                model_config = AutoConfig.from_pretrained(config.config_name)
        model_config.vocab_size = len(tokenizer)
        model_config.pad_token_id = tokenizer.pad_token_id
        model_config.max_position_embeddings = config.max_seq_length
    if hasattr(model_config, "sparse_prediction"):
        model_config.sparse_prediction = True
    apply_overrides(model_config, config.config_overrides)  # (none with --model_name_or_path: refused by the config)
    return model_config


def build_model(
    config: PretrainingConfig, tokenizer, model_config: transformers.PretrainedConfig | None = None
) -> transformers.PreTrainedModel:
    """The model the settings describe (`build_model_config`, unless given): new weights, or those of
    `--model_name_or_path` (whose fit was checked before any work: transformers' load report could only list the
    new head, which the run's own line names)."""
    model_config = model_config if model_config is not None else build_model_config(config, tokenizer)
    if config.model_name_or_path:
        line = new_head_line(config.model_name_or_path, model_config)
        if line is not None:
            print(line)
        with loading("--model_name_or_path", config.model_name_or_path), quiet_loading():
            return AutoModelForMaskedLM.from_pretrained(config.model_name_or_path, config=model_config)
    return AutoModelForMaskedLM.from_config(model_config)


def new_head_line(source: str, model_config: transformers.PretrainedConfig) -> str | None:
    """The line that says a masked-LM head starts anew: the folder's model (config.json's `architectures`) is one of
    another task, whose head pretraining does not use, or the bare encoder; None for a masked-LM folder."""
    architecture = next(iter(getattr(model_config, "architectures", None) or []), None)
    task = task_of_architecture(architecture)
    if task is None or task == "fill-mask":
        return None
    held = "no head (the bare encoder)" if task == "feature-extraction" else f"a {task} head ({architecture})"
    return f"--model_name_or_path {source!r} has {held}: pretraining continues its encoder with a new masked-LM head."


EVALUATION_NOTE = (
    "On the validation split, with the same masked tokens ({mlm_probability:.0%}) at every evaluation: `loss` is the "
    "masked-token cross-entropy (nats per masked token); `unigram_baseline_loss` is the loss of predicting every "
    "masked token by its frequency in the training split, so a model that learned context is clearly below it; "
    "`order_gap` is the loss of the same blocks with their tokens shuffled (a fixed permutation per block, masked "
    "tokens moving with their tokens) minus the loss as written: 0 for a model that ignores word order, positive "
    "when the model uses it. The figures after `±` are two standard errors, the validation documents taken as the "
    "sample."
)


class MaskedLMTask(TrainingTask):
    """Masked language modelling on packed blocks: loss units are masked tokens. The model computes the loss, once
    per batch: it takes `labels` and `num_items_in_batch` and returns the cross-entropy summed over the labelled
    tokens divided by `num_items_in_batch` (transformers' convention, which `SinusoidalEncoderForMaskedLM` follows)."""

    name = "pretraining"
    # every step's batches whole: blocks of a corpus are many, and a step of a few blocks would weigh as much
    every_example = False

    def __init__(
        self,
        train_generator: torch.Generator,
        train_masking: KeyedMaskingCollator,
        seed: int,
        unigram_log_probs: torch.Tensor,
        length_schedule: tuple[tuple[int, int], ...] = (),
        train_order: EpochTaggedSampler | None = None,
    ):
        self.train_generator = train_generator
        self.train_masking = train_masking
        self.train_order = train_order
        self.seed = seed
        # the standard errors take the validation documents as the sample (each batch's `document`)
        self.evaluation = MaskedLMEvaluation(unigram_log_probs, order_seed=seed)
        self.length_schedule = length_schedule  # ((length, until step), ...): sequence-length warmup
        self.train_length: int | None = None  # the sequence length of the current step (None: the blocks' own)

    def begin_step(self, step: int) -> None:
        self.train_length = next((length for length, until in self.length_schedule if step < until), None)

    def start_epoch(self, epoch: int) -> None:
        self.train_generator.manual_seed(derive_seed(self.seed, "data", epoch))  # same order on resume, new per epoch
        self.train_masking.epoch = epoch  # the masks of a stream's blocks, and of untagged ones
        if self.train_order is not None:  # the epoch of the indices drawn from now, which travels with them
            self.train_order.epoch = epoch

    def loss_units(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return (batch["labels"] != -100).sum()

    def loss(self, model, batch: dict[str, torch.Tensor], num_items_in_batch: float | torch.Tensor) -> torch.Tensor:
        """The masked-token cross-entropy of the batch summed and divided by `num_items_in_batch`, as the model
        computes it. In training under a sequence-length warmup each block runs as shorter rows (the same tokens and
        masks)."""
        labels = batch["labels"]  # (B, T)
        input_ids = batch["input_ids"]
        if model.training and self.train_length is not None:  # sequence-length warmup: each block as shorter rows
            input_ids = input_ids.reshape(-1, self.train_length)  # (B * T / L, L)
            labels = labels.reshape(-1, self.train_length)  # (B * T / L, L)
        return model(input_ids=input_ids, labels=labels, num_items_in_batch=num_items_in_batch).loss

    def loss_sum(self, model, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """The batch's loss summed over its masked tokens, and their number (the model's loss times its units)."""
        count = self.loss_units(batch)
        items = count.clamp(min=1)
        return self.loss(model, batch, items) * items, count

    def evaluate(self, model, loader, accelerator: Accelerator) -> dict[str, float]:
        """Masked-token-weighted loss and perplexity over the whole evaluation split, summed across processes
        (without the samples accelerate repeats to even out the last batch); beside them the unigram baseline on the
        same masked tokens and the order gap: the loss of the same blocks with their tokens permuted, minus the loss
        (`evaluation.MaskedLMEvaluation`, which the evaluate command calls too)."""
        batches = ({**batch, "labels": unlabel_repeated_examples(batch["labels"], accelerator)} for batch in loader)
        return self.evaluation(model, batches, accelerator)

    def summary(self, metrics: dict[str, float]) -> str:
        return describe_evaluation(metrics)


def check_vocabulary(model: transformers.PreTrainedModel | transformers.PretrainedConfig, tokenizer_size: int) -> None:
    """A `UsageError` unless the vocabulary of `model` (a model or its config) covers the tokenizer's: a token id
    past it has no embedding (an IndexError in the first step)."""
    vocab_size = getattr(model, "config", model).vocab_size
    if vocab_size < tokenizer_size:
        raise UsageError(
            f"The model's vocabulary ({vocab_size}) is smaller than the tokenizer's ({tokenizer_size}): leave "
            "vocab_size out of --config_overrides (a new model takes the tokenizer's), or give the model's own "
            "tokenizer."
        )


def pretrain(config: PretrainingConfig, model: transformers.PreTrainedModel | None = None) -> PretrainingResult:
    """Tokenise and pack the corpus, then train by masked language modelling the model the settings describe
    (`build_model`, called once every RNG is seeded), or `model`: a masked-LM of your own making, whose vocabulary
    covers the tokenizer's and whose loss honours `num_items_in_batch` as transformers' Trainer passes it (the
    summed loss divided by it), as `MaskedLMTask` needs. Its initialisation is yours; the
    run's seed governs data order, masks and dropout."""
    accelerator = make_accelerator(config)
    if config.push_to_hub:
        check_hub_access(config.hub_model_id, flag="--push_to_hub")
    tokenizer = load_tokenizer(config)
    if model is not None:
        check_vocabulary(model, len(tokenizer))
    else:
        model_config = build_model_config(config, tokenizer)
        if config.model_name_or_path:
            check_tokenizer_fits(
                tokenizer_label(config),
                len(tokenizer),
                f"--model_name_or_path {config.model_name_or_path!r}",
                model_config.vocab_size,
                "pass the model's own tokenizer as --tokenizer_name.",
            )
        check_vocabulary(model_config, len(tokenizer))
    claim_output_folder(accelerator, config, MaskedLMTask.name)  # before the data: the folder, a resume's settings
    with given_back_if_stopped(accelerator, config.output_dir):  # bad data found once read: as found
        packed = main_process_first(
            accelerator,
            lambda: tokenize_and_pack(
                load_raw_datasets(config, config.seed),
                tokenizer,
                config.max_seq_length,
                config.text_column_name,
                config.preprocessing_num_workers,
            ),
        )
        streaming = isinstance(packed["train"], datasets.IterableDataset)
        if streaming:  # a map-style split's blocks are counted by `pack_blocks` and `plan_steps`
            check_stream_blocks(packed, config.max_seq_length, config.global_batch_size(accelerator.num_processes))
        if model is None:
            model = build_model(config, tokenizer, model_config)

        train_generator = torch.Generator()  # the data order's own RNG: never draws from the global one
        masking = {
            "mlm_probability": config.mlm_probability,
            "seed": config.seed,
            "exact_count": exact_mask_count(config),
        }
        train_masking = KeyedMaskingCollator(tokenizer, **masking)
        eval_masking = KeyedMaskingCollator(tokenizer, **masking, epoch="eval")
        wrap = IndexedStream if streaming else IndexedExamples
        train_set, eval_set = wrap(packed["train"]), wrap(packed["validation"])
        # each index tagged with its epoch: the masks follow it into workers that persist from one epoch to the next
        order = (
            None
            if streaming
            else EpochTaggedSampler(torch.utils.data.RandomSampler(train_set, generator=train_generator))
        )
        train_loader, eval_loader = make_loaders(
            config,
            train_set,
            eval_set,
            train_generator,
            train_masking,
            eval_masking,
            train_sampler=order,
            drop_last=not MaskedLMTask.every_example,
        )
        optimizer = make_optimizer(model, config)
        model, optimizer, train_loader, eval_loader = prepare_training(
            accelerator, config, model, optimizer, train_loader, eval_loader
        )

        tokens_per_step = config.global_batch_size(accelerator.num_processes) * config.max_seq_length
        tokens_line = f"Tokens = {tokens_per_step:,} per step"
        if config.max_train_steps is not None:  # else train() derives the steps from the epochs
            tokens_line += f", {tokens_per_step * config.max_train_steps:,} in all"
        header = [
            f"Training examples (blocks of {config.max_seq_length} tokens) = "
            f"{'streamed' if streaming else f'{len(train_set):,}'}",
            tokens_line,
            f"Masking = {describe_masking(config)}",
        ]
        unigram = unigram_log_probs(packed["train"], len(tokenizer), tokenizer.all_special_ids)
        task = MaskedLMTask(train_generator, train_masking, config.seed, unigram, config.length_schedule, order)
        trained = train(
            accelerator, config, model, optimizer, train_loader, eval_loader, task, header, streaming=streaming
        )
        return PretrainingResult(
            accelerator,
            model,
            tokenizer,
            trained.progress,
            trained.metrics,
            trained.max_train_steps,
            validation_split(config, packed["validation"]),
        )


BUILTIN_CORPUS = (
    "The built-in offline corpus of sinusoidal-encoder: the Python language reference topics and the docstrings of "
    "the Python standard library, numpy, huggingface_hub, datasets, accelerate and transformers (PSF, BSD-3-Clause "
    "and Apache-2.0 licences), split 98/2 by a hash of each document."
)


def export(config: PretrainingConfig, result: PretrainingResult) -> None:
    """The Hub-ready folder: weights, config, code, tokenizer, README.md (model card) and pictures."""
    accelerator, progress, final_eval = result.accelerator, result.progress, result.metrics
    procedure = (
        f"Masked language modelling ({describe_masking(config)}) on "
        f"packed blocks of {config.max_seq_length} tokens{describe_length_schedule(config.length_schedule)}; "
        f"{progress.completed_steps:,} optimizer steps, "
        f"{progress.tokens_seen:,} tokens seen; AdamW (lr {config.learning_rate:g}, betas {config.adam_beta1}/"
        f"{config.adam_beta2}, weight decay {config.weight_decay} on matrices), {describe_schedule(config)}, "
        f"gradient clipping at {config.max_grad_norm}, global batch "
        f"{config.global_batch_size(accelerator.num_processes)} sequences, {accelerator.num_processes} process(es), "
        f"mixed precision {accelerator.mixed_precision}, seed {config.seed}. Trained with `training/pretrain.py` of "
        f"sinusoidal-encoder.{describe_best(config, progress, result.max_train_steps)}"
    )
    export_model(
        accelerator,
        config,
        result.model,
        AutoModelForMaskedLM,
        result.tokenizer,
        pipeline_tag="fill-mask",
        example=f"The function returns a {result.tokenizer.mask_token} of positions.",
        training_data=(
            describe_data(config, result.validation_split)
            if config.dataset_name or config.train_file
            else BUILTIN_CORPUS
        ),
        dataset_split=result.validation_split,
        training_procedure=procedure,
        metrics={
            "loss": final_eval["eval_loss"],
            "perplexity": final_eval["eval_perplexity"],
            "unigram_baseline_loss": final_eval["eval_unigram_loss"],
            "order_gap": final_eval["eval_order_gap"],
        },
        evaluation_note=EVALUATION_NOTE.format(mlm_probability=config.mlm_probability)
        + " In short: "
        + describe_evaluation(final_eval),
    )


def run(config: PretrainingConfig) -> None:
    """The command: pretrain, then export the folder (`sinusoidal-encoder-pretrain`, `training/pretrain.py` in a
    checkout, once `console.py` has parsed the flags)."""
    result = pretrain(config)
    try:
        export(config, result)
    finally:
        if config.with_tracking:
            result.accelerator.end_training()


def main(argv: list[str] | None = None) -> None:
    """`python -m sinusoidal_encoder_training.stages.pretraining`: the command of `argv` (`sys.argv[1:]` by
    default)."""
    run(parse_config(PretrainingConfig, argv))


if __name__ == "__main__":
    with front():
        main()
