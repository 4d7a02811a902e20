"""The configuration of `sinusoidal-encoder-finetune` (`FinetuningConfig`), and the task-data flags it shares
with the evaluate command (`TaskDataConfig`)."""

from __future__ import annotations

import dataclasses
import importlib.util
from typing import ClassVar

from sinusoidal_encoder_training.cli.arguments import (
    CommandEntry,
    FlagConfig,
    check_model_source,
    check_positive,
    redefault,
)
from sinusoidal_encoder_training.cli.command_line import UsageError, require_extra
from sinusoidal_encoder_training.configs.data import DataConfig, LanguageConfig
from sinusoidal_encoder_training.configs.output import TrainingConfig
from sinusoidal_encoder_training.tasks.registry import FINETUNED, TASK_FLAGS, TASKS, reading


@dataclasses.dataclass(frozen=True, kw_only=True)
class TaskDataConfig(FlagConfig, *TASK_FLAGS):
    """How a fine-tuning task reads its data (the label column, the inputs' length, and the flags of each task's
    own, `tasks.task.Task.flags`, of which this class is composed), for fine-tuning a head and for evaluating a
    fine-tuned one; `check_task_flags` checks them against the task."""

    _argument_group_name = "task data"

    label_column_name: str | None = dataclasses.field(
        default=None,
        metadata={
            "help": "The label column (default: 'label' or 'labels'; for tokens 'ner_tags', 'tags' or 'labels')."
        },
    )
    max_length: int = dataclasses.field(default=128, metadata={"help": "Tokens per input; longer ones are truncated."})
    pad_to_multiple_of: int | None = dataclasses.field(
        default=None, metadata={"help": "Pad batches to a multiple of this (8 suits tensor cores)."}
    )
    keep_similar_labels: bool = dataclasses.field(
        default=False,
        metadata={
            "help": "Keep labels that differ only by case or surrounding whitespace ('Positive', 'positive ') as "
            "separate labels: refused without it."
        },
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.max_length < 4:
            raise UsageError(f"--max_length must be at least 4, got {self.max_length}.")
        check_positive(self, "pad_to_multiple_of")

    def check_task_flags(self, task: str) -> None:
        """A `UsageError` for a flag set that the task `task` does not read (a field of another task's `flags`), or
        a value it cannot use (its entry's `check`)."""
        entry = TASKS[task]
        for field in (field for flags in TASK_FLAGS for field in dataclasses.fields(flags)):
            if getattr(self, field.name) != field.default and field.name not in entry.flag_names:
                raise UsageError(f"--{field.name} is for {' and '.join(reading(field.name))}, not {task}.")
        if entry.check is not None:
            entry.check(self)


@dataclasses.dataclass(frozen=True, kw_only=True)
class FinetuningConfig(DataConfig, LanguageConfig, TaskDataConfig, TrainingConfig):
    """Fine-tune a sinusoidal encoder with accelerate: sequence or token classification, extractive question
    answering, multiple choice.

        # the offline downstream task: which library a passage of the built-in corpus documents
        python training/finetune.py --model_name_or_path outputs/small-builtin --output_dir outputs/library-classifier

        # your data: text or text pairs, single-label, multi-label (a list of labels) or regression (float labels)
        accelerate launch training/finetune.py --model_name_or_path outputs/small-builtin \\
            --dataset_name glue --dataset_config_name mrpc --text_column_name sentence1 \\
            --text_pair_column_name sentence2 --output_dir out
        # token classification: a column of words and a column of tags per word
        python training/finetune.py --task token-classification --model_name_or_path M \\
            --train_file train.jsonl --validation_file dev.jsonl --text_column_name tokens \\
            --label_column_name ner_tags --output_dir out
        # question answering on SQuAD-format rows (question, context, answers), multiple choice on SWAG's
        # (sent1, sent2, ending0, ending1, ..., label)
        python training/finetune.py --task question-answering --model_name_or_path M \\
            --dataset_name rajpurkar/squad --max_length 384 --doc_stride 128 --output_dir out
        python training/finetune.py --task multiple-choice --model_name_or_path M \\
            --train_file docs/examples/multiple_choice.jsonl \\
            --validation_file docs/examples/multiple_choice_validation.jsonl --output_dir out

    Labels become `id2label`/`label2id` in the saved config; metrics are computed locally (accuracy and macro-F1;
    micro/macro-F1 for multi-label; Pearson/Spearman for regression; entity-level F1 for tokens; SQuAD's exact match
    and F1 for question answering; accuracy for multiple choice). The output folder is Hub-ready and loads with the
    task's Auto class (and in the text- / token-classification pipeline).

    The run configuration: `model_name_or_path` and `output_dir` are required; fine-tuning has its own defaults for
    the learning rate and the epochs. Derived: `builtin` (no data setting: the offline downstream task, whose columns
    are "text" and "label") and `with_baselines` (`--baselines`, on for the built-in task).
    """

    # how the command line names the model the run starts from, in the run's one-line errors (the evaluate command,
    # which evaluates a fine-tuned folder through this configuration, names it MODEL)
    model_flag: ClassVar[str] = "--model_name_or_path"

    _argument_group_name = "task and model"

    task: str = dataclasses.field(
        default="text-classification", metadata={"help": "What to fine-tune for.", "choices": FINETUNED}
    )
    model_name_or_path: str = dataclasses.field(
        metadata={"help": "A sinusoidal-encoder folder or Hub id (pretrained or not).", "reads": True}
    )
    tokenizer_name: str | None = dataclasses.field(
        default=None, metadata={"help": "Tokenizer folder or Hub id (default: the model's).", "reads": True}
    )
    config_overrides: str | None = dataclasses.field(
        default=None,
        metadata={
            "help": "Comma-separated fields of the model's config to change before fine-tuning, e.g. "
            "'classifier_pooling=mean,classifier_dropout=0.2'; fields that change a weight's shape are refused."
        },
    )
    ignore_mismatched_sizes: bool = dataclasses.field(
        default=False,
        metadata={
            "help": "Start a new head on the encoder of --model_name_or_path when its head of this task was trained "
            "for other labels (another count, other names): refused without it."
        },
    )
    base_model_id: str | None = dataclasses.field(
        default=None,
        metadata={
            "help": "The Hub id of the pretrained model, for the model card's base_model (default: "
            "--model_name_or_path when that is a Hub id)."
        },
    )
    max_train_samples: int | None = dataclasses.field(
        default=None,
        metadata={
            "help": "Train on N training examples drawn at random (seeded by --seed); the labels are still those of "
            "the whole training split."
        },
    )
    max_eval_samples: int | None = dataclasses.field(
        default=None, metadata={"help": "Evaluate on N evaluation examples drawn at random (seeded by --seed)."}
    )
    group_by_length: bool = dataclasses.field(
        default=False,
        metadata={
            "help": "Draw each training batch from examples of similar length (transformers' LengthGroupedSampler, "
            "Trainer's group_by_length): random groups of 50 steps' examples, each sorted by length, so that batches "
            "padded to their longest row carry less padding; the run's header says how much. The order still "
            "changes every epoch. Evaluation batches are grouped too: the validation split longest example first."
        },
    )
    baselines: bool = dataclasses.field(
        default=False,
        metadata={
            "help": "Also score a majority-class and a TF-IDF + logistic-regression baseline on the same split "
            "(single-label sequence classification; needs scikit-learn). On by default for the built-in task."
        },
    )
    learning_rate: float = redefault(TrainingConfig, "learning_rate", 1e-4)
    num_train_epochs: int = redefault(TrainingConfig, "num_train_epochs", 3)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.streaming:
            raise UsageError("--streaming is for pretraining; fine-tuning reads its (smaller) datasets whole.")
        self.check_task_flags(self.task)
        self.check_best_metric(TASKS[self.task])
        check_positive(self, "max_train_samples", "max_eval_samples")
        check_model_source("--model_name_or_path", self.model_name_or_path)
        check_model_source("--tokenizer_name", self.tokenizer_name)
        if self.baselines:
            require_extra("sklearn", "baselines", "--baselines")
        if self.builtin and self.task != "text-classification":
            raise UsageError(f"The built-in downstream task is text classification: pass data for {self.task}.")
        if self.builtin and (self.text_column_name or self.text_pair_column_name or self.label_column_name):
            raise UsageError(
                "--text_column_name, --text_pair_column_name and --label_column_name name columns of your data "
                "(--dataset_name or --train_file); the built-in task's are 'text' and 'label'."
            )

    @property
    def builtin(self) -> bool:
        """No data setting: the offline downstream task on the built-in corpus."""
        return not (self.dataset_name or self.train_file)

    @property
    def with_baselines(self) -> bool:
        """Whether the run scores the baselines: `--baselines`, or the built-in task where scikit-learn is installed
        (without it, the built-in task goes without them, and says so)."""
        return self.baselines or (self.builtin and importlib.util.find_spec("sklearn") is not None)


COMMAND = CommandEntry(
    "finetune", "stages.finetuning", FinetuningConfig, "fine-tune a model on a task", ("training",), launched=True
)
