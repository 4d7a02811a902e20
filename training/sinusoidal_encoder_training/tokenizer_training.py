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

In code: `train_tokenizer(TokenizerTrainingConfig(output_dir=...))`. This module holds the configuration, the
tokenizer it builds and the command line (`main`).
"""

from __future__ import annotations

import dataclasses
import json
import os

from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import PreTrainedTokenizerFast
from transformers.tokenization_utils_base import VERY_LARGE_INTEGER

from sinusoidal_encoder_training.arguments import parse_config
from sinusoidal_encoder_training.command_line import UsageError, command
from sinusoidal_encoder_training.data import (
    DataConfig,
    iterate_texts,
    load_raw_datasets,
    text_column,
)
from sinusoidal_encoder_training.export import save_tokenizer
from sinusoidal_encoder_training.run_folder import empty_folder

SPECIAL_TOKENS = {
    "pad_token": "[PAD]",
    "unk_token": "[UNK]",
    "cls_token": "[CLS]",
    "sep_token": "[SEP]",
    "mask_token": "[MASK]",
}


@dataclasses.dataclass(frozen=True, kw_only=True)
class TokenizerTrainingConfig(DataConfig):
    """The settings of tokenizer training (the data settings, the output and the vocabulary), checked when built."""

    output_dir: str = dataclasses.field(metadata={"help": "Where the tokenizer folder is written."})
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
            "help": "Empty --output_dir first when it holds other files than a tokenizer this command trained (a "
            "model folder, your own files): without it such a folder is refused."
        },
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.overwrite_output_dir:
            problem = tokenizer_folder_problem(self.output_dir)
            if problem is not None:
                raise UsageError(problem)
        if self.vocab_size <= len(SPECIAL_TOKENS) + 256:
            raise UsageError(f"--vocab_size must exceed {len(SPECIAL_TOKENS) + 256} (specials and the 256 bytes).")


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
    entries = sorted(os.listdir(output_dir)) if os.path.isdir(output_dir) else []
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


def build_tokenizer(
    texts, vocab_size: int, min_frequency: int, model_max_length: int | None = None
) -> PreTrainedTokenizerFast:
    """Train byte-level BPE on an iterator of text batches and wrap it as a transformers fast tokenizer."""
    bpe = Tokenizer(models.BPE(unk_token=SPECIAL_TOKENS["unk_token"]))
    # A text's first word, and every word of pre-split input (`is_split_into_words=True`, which encodes each word as
    # a text), starts with the space a word has inside running text ('Ġ' once byte-level): "Ahmed joined" is
    # 'ĠA h med Ġjoined' whole or word by word, so token classification trains on the ids a pipeline meets.
    # Metaspace with a space for its marker adds that space to the start of a text only ("first"), not after a
    # special token: "of [MASK]." keeps its '.' as running text has it. The decoder takes the added space off again
    # (a text that itself starts with a space decodes with one space fewer).
    bpe.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Metaspace(replacement=" ", prepend_scheme="first", split=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ]
    )
    bpe.decoder = decoders.Sequence([decoders.ByteLevel(), decoders.Strip(content=" ", left=1, right=0)])
    # [MASK] takes in the space before it, as RoBERTa's <mask> does: "a [MASK]" is "a" then "[MASK]", with no lone
    # 'Ġ' between, so a filled-in word (" the") lands with one space ("a the"), not two
    specials = [
        AddedToken(token, lstrip=name == "mask_token", rstrip=False, normalized=False, special=True)
        for name, token in SPECIAL_TOKENS.items()
    ]
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    bpe.train_from_iterator(texts, trainer=trainer)
    cls, sep = SPECIAL_TOKENS["cls_token"], SPECIAL_TOKENS["sep_token"]
    # ByteLevel first trims the space a token carries ('Ġ') out of its offsets, as RoBERTa's processor does: "Paris" in
    # "Where is Paris" spans (9, 14), not (8, 14), so question-answering answers and token-classification starts
    # begin at the word (`add_prefix_space`: the space added before a text has no extent to trim). Offsets only: the
    # ids are those of the template alone.
    bpe.post_processor = processors.Sequence(
        [
            processors.ByteLevel(add_prefix_space=True, trim_offsets=True, use_regex=True),
            processors.TemplateProcessing(
                single=f"{cls} $A {sep}",
                pair=f"{cls} $A {sep} $B:1 {sep}:1",
                special_tokens=[(cls, bpe.token_to_id(cls)), (sep, bpe.token_to_id(sep))],
            ),
        ]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=bpe,
        model_max_length=model_max_length or VERY_LARGE_INTEGER,
        model_input_names=["input_ids", "attention_mask"],
        clean_up_tokenization_spaces=False,
        **SPECIAL_TOKENS,
    )


@dataclasses.dataclass(frozen=True)
class TokenizerTrainingResult:
    """What `train_tokenizer()` returns: the trained tokenizer and a description of the corpus it was trained on."""

    tokenizer: PreTrainedTokenizerFast
    source: str


def train_tokenizer(config: TokenizerTrainingConfig) -> TokenizerTrainingResult:
    """Train on the corpus `config` names and save the tokenizer to `config.output_dir`, with `training_args.json`
    (the configuration, the corpus, the vocabulary size reached)."""
    raw = load_raw_datasets(config, config.seed)
    column = text_column(raw["train"], config.text_column_name)
    if config.overwrite_output_dir and os.path.isdir(config.output_dir):
        empty_folder(config.output_dir)
    tokenizer = build_tokenizer(
        iterate_texts(raw, column), config.vocab_size, config.min_frequency, config.model_max_length
    )
    save_tokenizer(tokenizer, config.output_dir)
    source = (
        config.dataset_name
        or config.train_file
        or "the built-in corpus (training/sinusoidal_encoder_training/corpus.py)"
    )
    provenance = {**dataclasses.asdict(config), "trained_on": source, "vocab_size_trained": len(tokenizer)}
    with open(os.path.join(config.output_dir, "training_args.json"), "w") as handle:
        json.dump(provenance, handle, indent=2)
    return TokenizerTrainingResult(tokenizer=tokenizer, source=source)


def parse_args(argv: list[str] | None = None) -> TokenizerTrainingConfig:
    """The configuration of a command line (`sys.argv[1:]` by default), checked."""
    return parse_config(TokenizerTrainingConfig, argv, __doc__)


def main(argv: list[str] | None = None) -> None:
    """The command line: `sinusoidal-encoder-train-tokenizer`, `python -m
    sinusoidal_encoder_training.tokenizer_training`, or `training/train_tokenizer.py` in a checkout."""
    config = parse_args(argv)
    result = train_tokenizer(config)
    size, folder = len(result.tokenizer), config.output_dir
    print(f"trained a byte-level BPE of {size:,} tokens on {result.source}; saved to {folder}")
    if size < config.vocab_size:
        print(
            f"note: {size:,} tokens, not the {config.vocab_size:,} of --vocab_size: the corpus has no more pairs "
            f"seen at least --min_frequency ({config.min_frequency}) times to merge"
        )


cli = command(main)  # the console script: main behind the command-line front (`command_line.py`)

if __name__ == "__main__":
    cli()
