"""Tokenizer training: a byte-level BPE trained with the `tokenizers` library on the corpus a
`TokenizerTrainingConfig` (`configs`) names.

In code: `train_tokenizer(TokenizerTrainingConfig(output_dir=...))`. This module holds the tokenizer
it builds and the command line (`run`, `main`).
"""

from __future__ import annotations

import dataclasses
import os

from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import PreTrainedTokenizerFast
from transformers.tokenization_utils_base import VERY_LARGE_INTEGER

from sinusoidal_encoder_training.cli.arguments import parse_config
from sinusoidal_encoder_training.cli.command_line import front
from sinusoidal_encoder_training.configs import MODEL_INPUT_NAMES, SPECIAL_TOKENS, TokenizerTrainingConfig
from sinusoidal_encoder_training.data.pipeline import (
    iterate_texts,
    load_raw_datasets,
    text_column,
)
from sinusoidal_encoder_training.publishing.export import save_tokenizer
from sinusoidal_encoder_training.runs.atomic import clean_leftovers, staged
from sinusoidal_encoder_training.runs.metrics_log import write_json
from sinusoidal_encoder_training.runs.run_folder import empty_folder


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
        model_input_names=list(MODEL_INPUT_NAMES),
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
    tokenizer = build_tokenizer(
        iterate_texts(raw, column), config.vocab_size, config.min_frequency, config.model_max_length
    )
    source = (
        config.dataset_name
        or config.train_file
        or "the built-in corpus (training/sinusoidal_encoder_training/data/corpus.py)"
    )
    provenance = {**dataclasses.asdict(config), "trained_on": source, "vocab_size_trained": len(tokenizer)}
    if config.overwrite_output_dir and os.path.isdir(config.output_dir):  # only now: a run that failed left it whole
        empty_folder(config.output_dir)
    clean_leftovers(config.output_dir, recursive=False)  # a save killed before
    with staged(config.output_dir) as temporary:  # the tokenizer and its record, moved into place together
        save_tokenizer(tokenizer, temporary)
        write_json(os.path.join(temporary, "training_args.json"), provenance)
    return TokenizerTrainingResult(tokenizer=tokenizer, source=source)


def run(config: TokenizerTrainingConfig) -> None:
    """The command: train and save the tokenizer, and say what was built (`sinusoidal-encoder-train-tokenizer`,
    `training/train_tokenizer.py` in a checkout, once `console.py` has parsed the flags)."""
    result = train_tokenizer(config)
    size, folder = len(result.tokenizer), config.output_dir
    print(f"trained a byte-level BPE of {size:,} tokens on {result.source}; saved to {folder}")
    if size < config.vocab_size:
        print(
            f"note: {size:,} tokens, not the {config.vocab_size:,} of --vocab_size: the corpus has no more pairs "
            f"seen at least --min_frequency ({config.min_frequency}) times to merge"
        )


def main(argv: list[str] | None = None) -> None:
    """`python -m sinusoidal_encoder_training.stages.tokenizer_training`: the command of `argv` (`sys.argv[1:]` by
    default)."""
    run(parse_config(TokenizerTrainingConfig, argv))


if __name__ == "__main__":
    with front():
        main()
