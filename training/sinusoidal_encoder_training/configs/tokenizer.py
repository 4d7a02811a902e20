"""The configuration of `sinusoidal-encoder-train-tokenizer` (`TokenizerTrainingConfig`) and its checks of
memory and of the output folder."""

from __future__ import annotations

import dataclasses
import json
import os

from sinusoidal_encoder_training.cli.arguments import CommandEntry, check_positive, check_seeds
from sinusoidal_encoder_training.cli.command_line import UsageError
from sinusoidal_encoder_training.configs.data import DataConfig
from sinusoidal_encoder_training.runs.atomic import is_temporary
from sinusoidal_encoder_training.runs.run_folder import creation_failure, existing_parent

SPECIAL_TOKENS = {
    "pad_token": "[PAD]",
    "unk_token": "[UNK]",
    "cls_token": "[CLS]",
    "sep_token": "[SEP]",
    "mask_token": "[MASK]",
}
# what a tokenizer gives the model: no `token_type_ids` (the model has no segment embeddings and refuses them), which
# a BERT tokenizer would otherwise add to every `tokenizer(text)`, pipeline and sentence-transformers call
MODEL_INPUT_NAMES = ("input_ids", "attention_mask")


@dataclasses.dataclass(frozen=True, kw_only=True)
class TokenizerTrainingConfig(DataConfig):
    """Train a byte-level BPE tokenizer with the `tokenizers` library on any corpus the pretraining script accepts.

        python training/train_tokenizer.py --output_dir tokenizer_config                  # the built-in corpus
        python training/train_tokenizer.py --dataset_name wikitext --dataset_config_name wikitext-103-raw-v1 \\
            --vocab_size 30522 --output_dir my-tokenizer

    Byte-level BPE never rejects or loses text: every Unicode string is encoded through its UTF-8 bytes, and
    decode(encode(text)) gives it back (no normalisation, no cleanup of spaces), but for the space every text is given
    before its first word, so that the word and the words of pre-split input get their running-text ids: the decoder
    takes it off, and so a text that starts with a space comes back with one space fewer. The result is a transformers
    fast tokenizer folder (tokenizer.json, tokenizer_config.json, special tokens) that `AutoTokenizer.from_pretrained`
    loads, with [CLS] ... [SEP] (and [CLS] A [SEP] B [SEP] for pairs) added around inputs.

    The configuration: the data settings, the output and the vocabulary; only `output_dir` is required.
    """

    output_dir: str = dataclasses.field(metadata={"help": "Where the tokenizer folder is written.", "writes": True})
    vocab_size: int = dataclasses.field(default=16384, metadata={"help": "Vocabulary size, special tokens included."})
    min_frequency: int = dataclasses.field(default=2, metadata={"help": "Minimum count of a pair to be merged."})
    model_max_length: int | None = dataclasses.field(
        default=None,
        metadata={
            "help": "A length cap to write into the tokenizer (default: none; the sinusoidal encoder runs at any "
            "length, and the length a model was trained at is its config's max_position_embeddings)."
        },
    )
    seed: int = dataclasses.field(
        default=42, metadata={"help": "Seed of the validation split of a dataset without one."}
    )
    overwrite_output_dir: bool = dataclasses.field(
        default=False,
        metadata={
            "help": "Empty --output_dir, once the tokenizer is trained, when it holds other files than a tokenizer "
            "this command trained (a model folder, your own files): without it such a folder is refused. Refused "
            "itself when the folder holds the data the run reads.",
            "clears": "output_dir",
        },
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        check_seeds(self, "seed")
        if not self.overwrite_output_dir:
            problem = tokenizer_folder_problem(self.output_dir)
            if problem is not None:
                raise UsageError(problem)
        folder = existing_parent(self.output_dir)
        failure = creation_failure(folder) if os.path.isdir(folder) else None
        if failure is not None:
            raise UsageError(
                f"--output_dir {self.output_dir}: cannot write {folder} ({failure}): choose a folder you can write to."
            )
        if self.vocab_size <= len(SPECIAL_TOKENS) + 256:
            raise UsageError(f"--vocab_size must exceed {len(SPECIAL_TOKENS) + 256} (specials and the 256 bytes).")
        reserved, memory = self.vocab_size * TRAINER_BYTES_PER_TOKEN, physical_memory()
        if memory is not None and reserved > memory:  # the trainer's allocation fails in Rust: an abort, no message
            raise UsageError(
                f"--vocab_size {self.vocab_size:,}: the tokenizer trainer reserves memory for every token asked "
                f"(about {reserved / 1e9:,.0f} GB), more than this machine's {memory / 1e9:,.0f} GB; vocabularies in "
                "use hold 30,000 to 260,000 tokens."
            )
        check_positive(self, "model_max_length")


COMMAND = CommandEntry(
    "train-tokenizer",
    "stages.tokenizer_training",
    TokenizerTrainingConfig,
    "train a byte-level BPE tokenizer",
    ("training",),
)


TRAINER_BYTES_PER_TOKEN = 56  # what the `tokenizers` BPE trainer reserves per token of --vocab_size (0.23: 56.7)


def physical_memory() -> int | None:
    """This machine's memory in bytes, or None where the system does not say."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


# what a folder written by this command holds: a folder of only these (with its training_args.json) is retrained
TOKENIZER_FILES = frozenset(
    {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "training_args.json"}
)


def tokenizer_folder_problem(output_dir: str) -> str | None:
    """Why a tokenizer may not be written to `output_dir`, or None: a file; a folder that holds more than a
    tokenizer this command trained (a model folder, whose tokenizer would be replaced under its weights; your own
    files)."""
    if os.path.exists(output_dir) and not os.path.isdir(output_dir):
        return f"--output_dir {output_dir} is a file, not a folder: choose a folder."
    entries = (
        sorted(name for name in os.listdir(output_dir) if not is_temporary(name)) if os.path.isdir(output_dir) else []
    )
    if not entries:
        return None
    trained_here = False
    try:
        with open(os.path.join(output_dir, "training_args.json")) as handle:
            trained_here = "trained_on" in json.load(handle)
    except (OSError, ValueError):
        pass
    if trained_here and set(entries) <= TOKENIZER_FILES:
        return None
    shown = ", ".join(entries[:5]) + (f" and {len(entries) - 5} more" if len(entries) > 5 else "")
    return (
        f"--output_dir {output_dir} holds other files than a tokenizer this command trained ({shown}): choose "
        "another --output_dir (then pass it as --tokenizer_name), or --overwrite_output_dir to empty it first."
    )
