"""The evaluate command: a model folder (or Hub id) scored on a dataset as an `EvaluationConfig` (`configs`) says.
A pretrained folder is scored by the evaluation library (`evaluation.MaskedLMEvaluation`, which pretraining's
evaluation calls too) at each length; a fine-tuned one by its task's evaluation (`finetuning.evaluate_finetuned`,
fine-tuning's final evaluation without the training). The command line is `run` (`main`).

In code: `evaluate_model(EvaluationConfig(model="outputs/small-builtin", max_seq_length=[128, 512]))` gives the
metrics by length; `evaluate_model(EvaluationConfig(model="outputs/library-classifier"))` the task's metrics.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, ClassVar

import datasets
import torch
from accelerate import Accelerator
from transformers import AutoModelForMaskedLM, AutoTokenizer

import sinusoidal_encoder  # noqa: F401  (registers the model with the Auto classes)
from sinusoidal_encoder_training.cli.arguments import parse_config
from sinusoidal_encoder_training.cli.command_line import (
    UsageError,
    check_local_files,
    check_tokenizer_fits,
    check_tokenizer_token,
    front,
    loading,
)
from sinusoidal_encoder_training.configs import EvaluationConfig, FinetuningConfig
from sinusoidal_encoder_training.data.batches import IndexedExamples, IndexedStream, KeyedMaskingCollator
from sinusoidal_encoder_training.data.pipeline import (
    load_raw_datasets,
    pack_blocks,
    source_flag,
    tokenize_documents,
    validation_split,
)
from sinusoidal_encoder_training.evaluation.masked_lm import (
    MaskedLMEvaluation,
    describe_evaluation,
    unigram_log_probs,
)
from sinusoidal_encoder_training.publishing.onnx_export import folder_architecture, head_problem, load_trained
from sinusoidal_encoder_training.runs.accelerator import main_process_first, new_accelerator
from sinusoidal_encoder_training.runs.atomic import temporary_path
from sinusoidal_encoder_training.runs.even_batches import unlabel_repeated_examples
from sinusoidal_encoder_training.runs.metrics_log import format_metrics, write_json
from sinusoidal_encoder_training.stages.finetuning import evaluate_finetuned
from sinusoidal_encoder_training.tasks.registry import FINETUNED, task_of_architecture

# the fields of a fine-tuning run's configuration that the evaluate command sets (those it shares with it)
SHARED = tuple(
    field.name for field in dataclasses.fields(EvaluationConfig) if field.name in FinetuningConfig.__dataclass_fields__
)
# what a folder with neither a masked-LM head nor a fine-tuned one is refused with
NO_HEAD = "give a pretraining run's folder (a masked-LM head) or a fine-tuning run's."


def folder_task(config: EvaluationConfig) -> str | None:
    """The fine-tuning task of the folder's head (config.json's `architectures`), or None for a masked-LM folder;
    a folder with neither (a bare encoder) is refused in one line, before any weight is read."""
    architecture = folder_architecture(config.model)
    task = task_of_architecture(architecture)
    if task in FINETUNED:
        if config.max_seq_length is not None:
            raise UsageError(
                f"--max_seq_length is for masked-LM folders; MODEL {config.model!r} is fine-tuned for {task}: its "
                "inputs are cut at --max_length."
            )
        return task
    problem = head_problem(config.model, architecture, "fill-mask", NO_HEAD)
    if problem is not None:
        raise UsageError(problem)
    return None


@dataclasses.dataclass(frozen=True, kw_only=True)
class EvaluatedFolderConfig(FinetuningConfig):
    """A fine-tuning run's configuration whose model is this command's MODEL, and named so in its errors."""

    model_flag: ClassVar[str] = "MODEL"


def finetuning_config(config: EvaluationConfig, task: str) -> FinetuningConfig:
    """The configuration of a fine-tuning run of `task` on the evaluated data, whose final evaluation the command
    reproduces (checked as a fine-tuning run is: the task's flags). Its output folder is never written."""
    values = {name: getattr(config, name) for name in SHARED}
    if config.validation_file and not config.train_file:  # the file alone, scored whole: the recipes read the task's
        values["train_file"] = config.validation_file  # columns and labels from a training split, never trained on
    return EvaluatedFolderConfig(**values, task=task, model_name_or_path=config.model, output_dir=os.curdir)


def load_model(config: EvaluationConfig, accelerator: Accelerator):
    """The folder's masked-LM model and its tokenizer, after the checks: damaged files, a tokenizer without a mask
    token or larger than the vocabulary, are refused in one line before any data is read."""
    check_local_files("MODEL", config.model)
    source, flag = (config.tokenizer_name, "--tokenizer_name") if config.tokenizer_name else (config.model, "MODEL")
    with loading(flag, source, "tokenizer"):
        tokenizer = AutoTokenizer.from_pretrained(source)
    label = f"{flag} {source!r}" if config.tokenizer_name else f"the tokenizer of MODEL {source!r}"
    check_tokenizer_token(tokenizer, "mask_token", label, "the masked-LM evaluation masks with it")
    with loading("MODEL", config.model):
        model = load_trained(AutoModelForMaskedLM, config.model, NO_HEAD)
    check_tokenizer_fits(
        f"{flag} {source!r}",
        len(tokenizer),
        f"MODEL {config.model!r}",
        model.config.vocab_size,
        "pass the model's own tokenizer as --tokenizer_name.",
    )
    accelerator.print(f"loaded {type(model).__name__} ({model.num_parameters():,} parameters) from {config.model}")
    return model, tokenizer


def length_blocks(
    config: EvaluationConfig, tokenized, tokenizer, length: int
) -> tuple[torch.utils.data.Dataset, torch.Tensor]:
    """The validation split (`tokenize_documents`, tokenised once for every length) in blocks of `length` tokens (the
    first --max_eval_samples), each with its document, and the unigram log-frequencies of the training split packed
    the same way (`unigram_log_probs`), as pretraining counts them."""
    packed = pack_blocks(tokenized, tokenizer, length, config.preprocessing_num_workers)
    unigram = unigram_log_probs(packed["train"], len(tokenizer), tokenizer.all_special_ids)
    validation = packed["validation"]
    streamed = isinstance(validation, datasets.IterableDataset)
    if streamed:
        if config.max_eval_samples is not None:
            validation = validation.take(config.max_eval_samples)
        empty = next(iter(validation), None) is None  # read up to its first block
    else:
        if config.max_eval_samples is not None and config.max_eval_samples < len(validation):
            validation = validation.select(range(config.max_eval_samples))
        empty = len(validation) == 0
    if empty:
        raise UsageError(
            f"The validation split holds no block of {length} tokens: give more validation text, or a shorter "
            "--max_seq_length."
        )
    return (IndexedStream if streamed else IndexedExamples)(validation), unigram


def evaluate_model(config: EvaluationConfig, accelerator: Accelerator | None = None) -> dict:
    """A masked-LM folder's metrics at each length of --max_seq_length (`evaluate_masked_lm`), or a fine-tuned
    folder's task metrics (`finetuning.evaluate_finetuned`), summed over every process of `accelerator` (a new one by
    default, which reads accelerate's launch settings: devices, mixed precision)."""
    return score_folder(config, accelerator)[0]


def score_folder(config: EvaluationConfig, accelerator: Accelerator | None = None) -> tuple[dict, str]:
    """`evaluate_model`'s results, with what they were scored on, in words (as printed)."""
    accelerator = accelerator or new_accelerator()
    task = folder_task(config)
    if task is None:
        if config.validation_file and not config.train_file:
            raise UsageError(
                f"MODEL {config.model!r} is a masked-LM folder, whose unigram baseline counts the tokens of the "
                "training split: pass the run's --train_file with --validation_file (--validation_file alone scores "
                "fine-tuned folders)."
            )
        return evaluate_masked_lm(config, accelerator)
    metrics, scored = evaluate_finetuned(finetuning_config(config, task), accelerator)
    accelerator.print(f"{task}: {format_metrics(metrics)}")
    return metrics, scored


def evaluate_masked_lm(config: EvaluationConfig, accelerator: Accelerator) -> tuple[dict[int, dict[str, float]], str]:
    """The metrics of a masked-LM folder at each length (`MaskedLMEvaluation`: loss, perplexity, unigram baseline,
    order gap, masked tokens), each printed with the sentence that reads it; and the text they were scored on, in
    words (printed first)."""
    model, tokenizer = load_model(config, accelerator)

    def prepare() -> tuple[dict[int, Any], str]:
        raw = load_raw_datasets(config, config.seed)
        scored = masked_lm_source(config, validation_split(config, raw["validation"]))
        tokenized = tokenize_documents(raw, tokenizer, config.text_column_name, config.preprocessing_num_workers)
        return {length: length_blocks(config, tokenized, tokenizer, length) for length in config.lengths}, scored

    prepared, scored = main_process_first(accelerator, prepare)
    accelerator.print(f"scoring {scored}")
    model = accelerator.prepare(model)
    exact = config.mask_count == "exact"
    masking = KeyedMaskingCollator(tokenizer, config.mlm_probability, config.seed, epoch="eval", exact_count=exact)
    results = {}
    for length, (blocks, unigram) in prepared.items():
        loader = torch.utils.data.DataLoader(blocks, batch_size=config.per_device_eval_batch_size, collate_fn=masking)
        loader = accelerator.prepare(loader)
        batches = ({**batch, "labels": unlabel_repeated_examples(batch["labels"], accelerator)} for batch in loader)
        evaluation = MaskedLMEvaluation(unigram, order_seed=config.seed)
        results[length] = evaluation(model, batches, accelerator)
        accelerator.print(f"{length} tokens: {format_metrics(results[length])}")
        accelerator.print(f"    {describe_evaluation(results[length])}")
    return results, scored


def masked_lm_source(config: EvaluationConfig, split: str | None) -> str:
    """The text a masked-LM folder is scored on, in words: `split` is the split of the data it is
    (`data.pipeline.validation_split`: None for a share of the training split held out, as pretraining holds it)."""
    if config.dataset_name is None and config.train_file is None:
        source = "the validation split of the built-in corpus"
    elif config.validation_file:
        source = f"--validation_file {config.validation_file!r}"
    elif split is not None:
        source = f"the {split!r} split of --dataset_name {config.dataset_name!r}"
    else:
        share = (
            f"the first {config.streaming_validation_examples:,} documents"
            if config.streaming
            else f"the {config.validation_split_percentage}%"
        )
        held = "that pretraining on it holds out for validation"
        source = f"{share} of {source_flag(config)} {held} (seed {config.seed})"
    if config.max_eval_samples is not None:
        return f"at most the first {config.max_eval_samples:,} blocks at each length of {source}"
    return source


def write_results(path: str, config: EvaluationConfig, results: dict, scored: str) -> None:
    """The results as JSON (a masked-LM folder's by length), with what was evaluated, as the command says it (what
    was `scored`; a masked-LM folder's training data, whose unigram counts are its baseline, and masking); written
    whole or not at all."""
    task = folder_task(config)
    report: dict[str, Any] = {"model": config.model, "task": task or "fill-mask"}
    if task is None:
        report["data"] = config.dataset_name or config.train_file or "the built-in corpus"
        if config.validation_file:
            report["validation_file"] = config.validation_file
        report["scored"] = scored
        report["mlm_probability"] = config.mlm_probability
    else:
        report["data"] = scored
    if config.max_eval_samples is not None:
        report["max_eval_samples"] = config.max_eval_samples  # at most so many, drawn at random
    report["seed"] = config.seed
    report["results"] = {str(key): value for key, value in results.items()}
    temporary = temporary_path(path)
    write_json(temporary, report)
    os.replace(temporary, path)


def run(config: EvaluationConfig) -> dict:
    """The command: evaluate, print the results, and write --output_file (`sinusoidal-encoder-evaluate`,
    `python -m sinusoidal_encoder_training evaluate`, once `console.py` has parsed the flags)."""
    accelerator = new_accelerator()
    results, scored = score_folder(config, accelerator)
    if config.output_file is not None and accelerator.is_main_process:
        write_results(config.output_file, config, results, scored)
        print(f"results written to {config.output_file}")
    return results


def main(argv: list[str] | None = None) -> dict:
    """`python -m sinusoidal_encoder_training.stages.evaluate`: the command of `argv` (`sys.argv[1:]` by default)."""
    return run(parse_config(EvaluationConfig, argv))


if __name__ == "__main__":
    with front():
        main()
