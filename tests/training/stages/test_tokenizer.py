"""The shipped tokenizer (tokenizer_config/) and the tokenizer trainer."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys

import pytest
from conftest import REPO, SHIPPED_TOKENIZER, write_text_corpus
from transformers import AutoTokenizer, tokenization_utils_base
from transformers.testing_utils import CaptureLogger
from transformers.tokenization_utils_base import VERY_LARGE_INTEGER

TEXTS = {
    "ascii": "The sinusoidal encoding is added to the token embeddings.",
    "emoji": "Family: 👩‍👩‍👧‍👦, flags 🇫🇷🇯🇵, skin tones 👍🏽 and a lone surrogate-free 🙂",
    "cjk": "位置编码使用正弦和余弦。位置エンコーディングは正弦波を使う。위치 인코딩",
    "combining": "e\u0301 a\u0308\u0301 Z\u0335\u0321\u0337 n\u0303 \u0915\u094d\u0937",
    "control": "tab\there\r\nbell\x07 null\x00 escape\x1b[31m red\x1b[0m \x7f del \u200b\u200d\ufeff",
    "empty": "",
    "spaces": "   leading, double  spaces, trailing   ",
    "rtl": "مرحبا بالعالم שלום עולם",
}


def test_shipped_tokenizer_loads_with_auto_tokenizer(tokenizer):
    assert tokenizer.is_fast
    for name in ("mask_token", "pad_token", "cls_token", "sep_token", "unk_token"):
        assert getattr(tokenizer, name) is not None, name
        assert getattr(tokenizer, f"{name}_id") is not None, name
    assert len(tokenizer) == 16384
    assert tokenizer.model_max_length == VERY_LARGE_INTEGER  # the model has no length cap
    assert "model_max_length" not in json.loads((SHIPPED_TOKENIZER / "tokenizer_config.json").read_text())
    assert tokenizer.model_input_names == ["input_ids", "attention_mask"]
    encoded = tokenizer("a b")
    assert encoded["input_ids"][0] == tokenizer.cls_token_id and encoded["input_ids"][-1] == tokenizer.sep_token_id
    assert "token_type_ids" not in encoded
    # trained on the built-in corpus: common words of it are single tokens
    assert len(tokenizer.tokenize(" function returns the")) == 3
    provenance = json.loads((SHIPPED_TOKENIZER / "training_args.json").read_text())
    assert "built-in corpus" in provenance["trained_on"]


@pytest.mark.parametrize("name", list(TEXTS))
def test_no_text_is_rejected_or_lost(tokenizer, name):
    """Every text comes back from its ids, but for one thing: the space a text is given before its first word (so
    that the word has its running-text ids) is taken off by the decoder, so a text that starts with a space itself
    comes back with one space fewer there."""
    text = TEXTS[name]
    expected = text[1:] if text.startswith(" ") else text
    ids = tokenizer(text)["input_ids"]
    assert tokenizer.unk_token_id not in ids
    assert tokenizer.decode(ids, skip_special_tokens=True) == expected
    assert tokenizer.decode(tokenizer(text, add_special_tokens=False)["input_ids"]) == expected


@pytest.mark.parametrize("cap", [None, 128])
def test_long_inputs_raise_no_length_warning(tokenizer, cap):
    """The tokenizer of a model without a length cap prints no 'Token indices sequence length is longer than the
    specified maximum sequence length' warning for long inputs (a capped copy shows the check can see it)."""
    if cap is not None:
        tokenizer = copy.deepcopy(tokenizer)
        tokenizer.model_max_length = cap
    with CaptureLogger(tokenization_utils_base.logger) as captured:
        ids = tokenizer(" word" * 700)["input_ids"]
    assert len(ids) > 700
    assert ("longer than the specified maximum" in captured.out) == (cap is not None)


def test_a_one_megabyte_line_round_trips(tokenizer):
    line = "".join(TEXTS[k] + " " for k in TEXTS) * 4000
    line = line[: 1_000_000 - 3] + "end"
    ids = tokenizer(line, add_special_tokens=False, verbose=False)["input_ids"]
    assert len(line) == 1_000_000
    assert tokenizer.decode(ids) == line


def assert_offsets_start_at_words(encoding, text: str, sequence: int = 0) -> None:
    """Every token of `sequence` spans text that starts with no space (the 'Ġ' of a token is trimmed away), but a
    lone 'Ġ' at the start, the space the text is given before its first word (a vocabulary without 'Ġ' merged
    with that word's first letter), which spans nothing."""
    tokens = encoding.tokens()
    for token, offset, sequence_id in zip(tokens, encoding["offset_mapping"], encoding.sequence_ids(), strict=True):
        if sequence_id == sequence:
            start, end = offset
            if token == "Ġ" and start == end == 0:
                continue
            assert start < end and not text[start].isspace(), (offset, text[start:end])


def test_offsets_leave_out_the_space_before_a_word(tokenizer):
    """Offsets leave out the space a token carries ("ĠParis" spans "Paris"), so question-answering answers and
    token-classification entities start at their word."""
    text = "Where is Paris today"
    encoding = tokenizer(text, return_offsets_mapping=True)
    tokens = tokenizer.convert_ids_to_tokens(encoding["input_ids"])
    assert encoding["offset_mapping"][tokens.index("ĠParis")] == (9, 14)
    assert_offsets_start_at_words(encoding, text)
    question, context = "Where is Paris?", "Paris is the capital of France, on the Seine."
    pair = tokenizer(question, context, return_offsets_mapping=True)
    assert_offsets_start_at_words(pair, question, 0)
    assert_offsets_start_at_words(pair, context, 1)


def test_mask_token_takes_in_the_space_before_it(tokenizer):
    """[MASK] takes in the space before it ("a [MASK]" has no lone 'Ġ'), so a filled-in word gets one space."""
    assert tokenizer.convert_ids_to_tokens(tokenizer("a [MASK]")["input_ids"]) == ["[CLS]", "Ġa", "[MASK]", "[SEP]"]
    # a special token starts no text: what follows it keeps its running-text ids ('.', not 'Ġ.')
    assert tokenizer.convert_ids_to_tokens(tokenizer("capital of [MASK].")["input_ids"])[-3:] == [
        "[MASK]",
        ".",
        "[SEP]",
    ]
    assert tokenizer.added_tokens_decoder[tokenizer.mask_token_id].lstrip
    encoding = tokenizer("The function returns a [MASK] value.", return_offsets_mapping=True)
    ids = encoding["input_ids"]
    assert tokenizer.convert_ids_to_tokens(ids[ids.index(tokenizer.mask_token_id) - 1]) == "Ġa"
    assert encoding["offset_mapping"][ids.index(tokenizer.mask_token_id)] == (23, 29)  # "[MASK]", no space
    filled = [tokenizer.convert_tokens_to_ids("Ġthe") if i == tokenizer.mask_token_id else i for i in ids]
    assert tokenizer.decode(filled, skip_special_tokens=True) == "The function returns a the value."


def test_pre_split_words_get_their_running_text_ids(tokenizer):
    """Words passed pre-split (`is_split_into_words=True`, as transformers' token-classification scripts do) get
    the ids they have in running text, the space marker included, so that NER trains on the ids pipelines meet: the
    words of 200 sentences get exactly the ids of the sentence, the first word too; offsets stay inside their word
    and decoding gives the text back."""
    from pydoc_data.topics import topics

    lines = (line.split() for text in sorted(topics.values()) for line in text.splitlines())
    sentences = [words for words in lines if len(words) >= 3][:200]
    assert len(sentences) == 200
    for words in sentences:
        text = " ".join(words)
        whole = tokenizer(text)
        split = tokenizer(words, is_split_into_words=True, return_offsets_mapping=True)
        assert split["input_ids"] == whole["input_ids"], text
        for word, (start, end) in zip(split.word_ids(), split["offset_mapping"], strict=True):
            if word is not None:
                assert 0 <= start < end <= len(words[word]), (text, words[word], start, end)
        assert tokenizer.decode(whole["input_ids"], skip_special_tokens=True) == text
    tokens = tokenizer.convert_ids_to_tokens(tokenizer(["Ahmed", "joined"], is_split_into_words=True)["input_ids"])
    assert tokens[1].startswith("Ġ") and "Ġjoined" in tokens, tokens


def test_trained_tokenizer_has_the_shipped_pipeline(tmp_path):
    """The trainer writes the pipeline the shipped tokenizer has (trimmed offsets among it), and an exported
    folder (save_tokenizer, then AutoTokenizer) keeps it."""
    from pydoc_data.topics import topics

    from sinusoidal_encoder_training.publishing.export import save_tokenizer
    from sinusoidal_encoder_training.stages.tokenizer_training import build_tokenizer

    texts = [" ".join(text.split()) for _, text in sorted(topics.items())[:40]]
    trained = build_tokenizer([texts], vocab_size=600, min_frequency=2)
    save_tokenizer(trained, str(tmp_path))
    written = json.loads((tmp_path / "tokenizer.json").read_text())
    shipped = json.loads((SHIPPED_TOKENIZER / "tokenizer.json").read_text())
    for part in ("normalizer", "pre_tokenizer", "post_processor", "decoder", "added_tokens"):
        assert written[part] == shipped[part], part
    reloaded = AutoTokenizer.from_pretrained(tmp_path)
    text = "Where is the function defined today"
    assert_offsets_start_at_words(reloaded(text, return_offsets_mapping=True), text)


@pytest.mark.slow
def test_train_tokenizer_on_a_local_file(tmp_path):
    train, validation = write_text_corpus(tmp_path / "data")
    out = tmp_path / "tok"
    cmd = [
        sys.executable,
        str(REPO / "training" / "train_tokenizer.py"),
        "--train_file",
        str(train),
        "--validation_file",
        str(validation),
        "--vocab_size",
        "600",
        "--output_dir",
        str(out),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    trained = AutoTokenizer.from_pretrained(out)
    assert len(trained) == 600 and trained.mask_token == "[MASK]"
    saved = json.loads((out / "tokenizer_config.json").read_text())
    assert saved["tokenizer_class"] == "PreTrainedTokenizerFast"  # a name transformers 4.x knows too
    assert saved == {**json.loads((SHIPPED_TOKENIZER / "tokenizer_config.json").read_text())}
    for text in TEXTS.values():  # as the shipped tokenizer (test_no_text_is_rejected_or_lost)
        expected = text[1:] if text.startswith(" ") else text
        assert trained.decode(trained(text)["input_ids"], skip_special_tokens=True) == expected


@pytest.mark.slow
def test_train_tokenizer_rejects_a_tiny_vocabulary(tmp_path):
    cmd = [
        sys.executable,
        str(REPO / "training" / "train_tokenizer.py"),
        "--vocab_size",
        "100",
        "--output_dir",
        str(tmp_path),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0 and "--vocab_size" in proc.stderr


def test_train_tokenizer_refuses_a_model_folder_and_retrains_its_own(tmp_path, tokenizer):
    """A model folder's tokenizer is never replaced under its weights: refused before any work (the folder as it
    was) unless --overwrite_output_dir; a folder this command trained (the shipped one's files) is retrained."""
    from conftest import folder_digest

    from sinusoidal_encoder_training.cli.command_line import UsageError
    from sinusoidal_encoder_training.stages.tokenizer_training import TokenizerTrainingConfig

    model = tmp_path / "model"
    model.mkdir()
    for name in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"):
        (model / name).write_text("{}")
    before = folder_digest(model)
    with pytest.raises(UsageError, match="holds other files than a tokenizer this command trained") as error:
        TokenizerTrainingConfig(output_dir=str(model))
    assert "config.json, model.safetensors, tokenizer.json, tokenizer_config.json" in str(error.value)
    assert "--overwrite_output_dir" in str(error.value) and folder_digest(model) == before
    TokenizerTrainingConfig(output_dir=str(model), overwrite_output_dir=True)  # told to: accepted
    ours = tmp_path / "ours"
    ours.mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json", "training_args.json"):
        (ours / name).write_bytes((SHIPPED_TOKENIZER / name).read_bytes())
    TokenizerTrainingConfig(output_dir=str(ours))  # a tokenizer this command trained: retrained in place
    (tmp_path / "file").write_text("")
    with pytest.raises(UsageError, match="is a file, not a folder"):
        TokenizerTrainingConfig(output_dir=str(tmp_path / "file"))
    if os.path.isdir("/proc"):  # no file can be created there, superuser or not: it ended in makedirs' traceback
        with pytest.raises(UsageError, match=r"^--output_dir /proc/tok: cannot write /proc \("):
            TokenizerTrainingConfig(output_dir="/proc/tok")


def test_train_tokenizer_says_when_the_corpus_gives_fewer_tokens_than_asked(tmp_path, monkeypatch, capsys):
    """A corpus that gives fewer tokens than `--vocab_size` asks for says so in a note naming both counts."""
    from conftest import run_command

    from sinusoidal_encoder_training.stages import tokenizer_training

    corpus = tmp_path / "tiny.txt"
    corpus.write_text("the cat sat on the mat\n" * 50)
    argv = ["--train_file", corpus, "--vocab_size", 400, "--output_dir", tmp_path / "tok"]
    status, out, _ = run_command(tokenizer_training.main, "train_tokenizer.py", argv, monkeypatch, capsys)
    size = len(AutoTokenizer.from_pretrained(tmp_path / "tok"))
    assert status == 0 and size < 400
    assert f"note: {size:,} tokens, not the 400 of --vocab_size: the corpus has no more pairs seen at least " in out
