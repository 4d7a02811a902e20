"""The run configuration of every command: one frozen dataclass per command, one field per flag, each with its default
and help, checked when built (`__post_init__`, a `UsageError` naming the flag). `parse_config` (`arguments`) makes
the command line of a class, whose docstring heads `--help`.

Importing this module imports neither torch, transformers, datasets nor tokenizers: a command parses its flags,
answers `--help` and refuses a bad value at once, before the libraries that do the work are loaded
(`console.py`). The stages import their configuration from here: `pretraining.PretrainingConfig` is
`configs.PretrainingConfig`.
"""

from __future__ import annotations

from sinusoidal_encoder_training.configs.data import DataConfig, LanguageConfig, MaskingConfig
from sinusoidal_encoder_training.configs.distillation import (
    DEFAULT_TEACHER,
    DEFAULT_TEACHER_PACKAGE,
    DistillationConfig,
)
from sinusoidal_encoder_training.configs.evaluation import EvaluationConfig
from sinusoidal_encoder_training.configs.fill_mask import FillMaskConfig
from sinusoidal_encoder_training.configs.finetuning import FinetuningConfig, TaskDataConfig
from sinusoidal_encoder_training.configs.onnx_export import (
    OLDEST_ONNX_OPSET,
    OnnxExportConfig,
    check_opset,
    check_output,
)
from sinusoidal_encoder_training.configs.output import COMPILE_MODES, LR_SCHEDULERS, OutputConfig, TrainingConfig
from sinusoidal_encoder_training.configs.pretraining import MODEL_SIZES, PretrainingConfig, parse_length_schedule
from sinusoidal_encoder_training.configs.tokenizer import (
    MODEL_INPUT_NAMES,
    SPECIAL_TOKENS,
    TOKENIZER_FILES,
    TRAINER_BYTES_PER_TOKEN,
    TokenizerTrainingConfig,
    physical_memory,
    tokenizer_folder_problem,
)
from sinusoidal_encoder_training.tasks.classification import ProblemType

__all__ = [
    "COMPILE_MODES",
    "DEFAULT_TEACHER",
    "DEFAULT_TEACHER_PACKAGE",
    "LR_SCHEDULERS",
    "MODEL_INPUT_NAMES",
    "MODEL_SIZES",
    "OLDEST_ONNX_OPSET",
    "SPECIAL_TOKENS",
    "TOKENIZER_FILES",
    "TRAINER_BYTES_PER_TOKEN",
    "DataConfig",
    "DistillationConfig",
    "EvaluationConfig",
    "FillMaskConfig",
    "FinetuningConfig",
    "LanguageConfig",
    "MaskingConfig",
    "OnnxExportConfig",
    "OutputConfig",
    "PretrainingConfig",
    "ProblemType",
    "TaskDataConfig",
    "TokenizerTrainingConfig",
    "TrainingConfig",
    "check_opset",
    "check_output",
    "parse_length_schedule",
    "physical_memory",
    "tokenizer_folder_problem",
]
