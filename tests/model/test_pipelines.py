"""transformers pipelines from a saved folder (model + tokenizer)."""

from __future__ import annotations

import re

import pytest
import torch
from conftest import run_command, tiny_config
from transformers import pipeline

import sinusoidal_encoder as se

LABELS = {0: "NEGATIVE", 1: "POSITIVE"}
TAGS = {0: "O", 1: "B-THING", 2: "I-THING"}


def save(tmp_path, cls, tokenizer, **config_overrides):
    config = tiny_config(vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id, **config_overrides)
    cls(config).save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    return str(tmp_path)


def test_fill_mask(tmp_path, tokenizer):
    folder = save(tmp_path, se.SinusoidalEncoderForMaskedLM, tokenizer)
    fill = pipeline("fill-mask", model=folder)
    results = fill(f"The function returns a {tokenizer.mask_token} value.", top_k=3)
    assert len(results) == 3
    assert all(r["token"] < len(tokenizer) and "[MASK]" not in r["sequence"] for r in results)
    assert results[0]["score"] >= results[1]["score"] >= results[2]["score"]


def test_fill_mask_sequences_have_single_spaces(tmp_path, tokenizer):
    """A word filled in after a space comes with that one space ("a the value", never "a  the value")."""
    folder = save(tmp_path, se.SinusoidalEncoderForMaskedLM, tokenizer)
    fill = pipeline("fill-mask", model=folder)
    text = f"The function returns a {tokenizer.mask_token} value."
    results = fill(text, targets=[" the", " of", " list"])
    assert len(results) == 3
    for r in results:
        assert "  " not in r["sequence"], r
        assert r["sequence"] == text.replace(tokenizer.mask_token, r["token_str"]), r  # token_str: "the"


def test_feature_extraction(tmp_path, tokenizer):
    folder = save(tmp_path, se.SinusoidalEncoderModel, tokenizer)
    extract = pipeline("feature-extraction", model=folder)
    text = "Sinusoidal position encodings."
    features = torch.tensor(extract(text))
    n_tokens = len(tokenizer(text)["input_ids"])
    assert features.shape == (1, n_tokens, 32)
    model = se.SinusoidalEncoderModel.from_pretrained(folder).eval()
    with torch.no_grad():
        direct = model(**tokenizer(text, return_tensors="pt")).last_hidden_state
    torch.testing.assert_close(features, direct)


def test_text_classification(tmp_path, tokenizer):
    folder = save(
        tmp_path,
        se.SinusoidalEncoderForSequenceClassification,
        tokenizer,
        id2label=LABELS,
        label2id={v: k for k, v in LABELS.items()},
    )
    classify = pipeline("text-classification", model=folder)
    results = classify(["A fine day.", "Errors everywhere, and a much longer sentence to pad the batch."], top_k=None)
    for scores in results:
        assert {r["label"] for r in scores} == set(LABELS.values())
        assert sum(r["score"] for r in scores) == pytest.approx(1.0, abs=1e-5)


def save_tagger(tmp_path, tokenizer) -> str:
    """A randomly initialised token classifier with the tags TAGS, saved with the shipped tokenizer."""
    labels = {"id2label": TAGS, "label2id": {v: k for k, v in TAGS.items()}}
    return save(tmp_path, se.SinusoidalEncoderForTokenClassification, tokenizer, **labels)


def test_token_classification(tmp_path, tokenizer):
    folder = save_tagger(tmp_path, tokenizer)
    tag = pipeline("token-classification", model=folder, aggregation_strategy="none", ignore_labels=[])
    text = "import the module"
    entities = tag(text)
    assert entities and {e["entity"] for e in entities} <= set(TAGS.values())
    assert len(entities) >= 3  # one per word piece of "import the module" at least
    for e in entities:  # offsets point into the text
        assert 0 <= e["start"] < e["end"] <= len(text)
        assert text[e["start"] : e["end"]].strip()


@pytest.mark.parametrize("aggregation", ["simple", "first"])
def test_token_classification_entities_start_at_words(tmp_path, tokenizer, aggregation):
    """Aggregated entities start at their word, not at the space before it: their `start` is the word's first
    character and text[start:end] is the word; `word` is the tokens decoded ("today", the decoder
    takes off the space the first token stands for). With "first", transformers decodes each word, then joins the
    decoded words as if they were tokens: a group of several words comes without the spaces between them."""
    folder = save_tagger(tmp_path, tokenizer)
    tag = pipeline("token-classification", model=folder, aggregation_strategy=aggregation, ignore_labels=[])
    for text in ("Where is Paris today", "The function returns the encoding of every position."):
        entities = tag(text)
        assert entities
        for e in entities:
            assert not text[e["start"]].isspace(), e
            span = text[e["start"] : e["end"]]
            assert (span if aggregation == "simple" else span.replace(" ", "")) == e["word"], e


def best_span(start_logits, end_logits, allowed, max_answer_tokens=15):
    """The (start, end) token pair maximising start + end logits with start <= end, inside `allowed` tokens."""
    scores = start_logits[:, None] + end_logits[None, :]  # (T, T)
    n = scores.shape[0]
    valid = torch.ones(n, n, dtype=torch.bool).triu() & ~torch.ones(n, n, dtype=torch.bool).triu(max_answer_tokens)
    valid &= allowed[:, None] & allowed[None, :]
    flat = scores.masked_fill(~valid, float("-inf")).argmax()
    return divmod(flat.item(), n)


def test_question_answering(tmp_path, tokenizer):
    """transformers 5 removed the question-answering pipeline (`REMOVED_TASKS` in transformers/pipelines): this
    does what it did, with the fast tokenizer's offsets, and runs the pipeline too where transformers still has it."""
    folder = save(tmp_path, se.SinusoidalEncoderForQuestionAnswering, tokenizer)
    model = se.SinusoidalEncoderForQuestionAnswering.from_pretrained(folder).eval()
    question, context = "What does the encoding use?", "The encoding uses sines and cosines of different frequencies."
    encoded = tokenizer(question, context, return_offsets_mapping=True, return_tensors="pt")
    offsets = encoded.pop("offset_mapping")[0]
    in_context = torch.tensor([s == 1 for s in encoded.sequence_ids(0)])
    with torch.no_grad():
        out = model(**encoded)
    assert out.start_logits.shape == out.end_logits.shape == encoded["input_ids"].shape
    start, end = best_span(out.start_logits[0], out.end_logits[0], in_context)
    answer = context[offsets[start][0] : offsets[end][1]]
    assert in_context[start] and in_context[end] and start <= end
    assert answer and answer in context

    from transformers.pipelines import SUPPORTED_TASKS

    if "question-answering" in SUPPORTED_TASKS:  # transformers 4.x
        result = pipeline("question-answering", model=folder)(question=question, context=context)
        assert result["answer"] == context[result["start"] : result["end"]]


QA_EXAMPLES = [
    ("What does the encoding use?", "The encoding uses sines and cosines of different frequencies."),
    ("Where is Paris?", "Paris is the capital of France, on the Seine."),
    ("What is returned?", "The function returns a list of tokens and their offsets in the text."),
    ("Who wrote it?", "It was written by a small team of researchers in a few weeks."),
]


def test_question_answering_answers_start_at_words(tmp_path, tokenizer):
    """Answers extracted with the tokenizer's offsets (as the question-answering pipeline and scripts do) start at
    a word: no context token's span starts with a space, so no answer does."""
    folder = save(tmp_path, se.SinusoidalEncoderForQuestionAnswering, tokenizer)
    model = se.SinusoidalEncoderForQuestionAnswering.from_pretrained(folder).eval()
    for question, context in QA_EXAMPLES:
        encoded = tokenizer(question, context, return_offsets_mapping=True, return_tensors="pt")
        offsets = encoded.pop("offset_mapping")[0].tolist()
        in_context = torch.tensor([s == 1 for s in encoded.sequence_ids(0)])
        for (start, end), inside in zip(offsets, in_context, strict=True):
            if inside:
                assert not context[start].isspace(), (question, context[start:end])
        with torch.no_grad():
            out = model(**encoded)
        start, end = best_span(out.start_logits[0], out.end_logits[0], in_context)
        answer = context[offsets[start][0] : offsets[end][1]]
        assert answer and answer == answer.strip()

    from transformers.pipelines import SUPPORTED_TASKS

    if "question-answering" in SUPPORTED_TASKS:  # transformers 4.x; transformers 5 removed the pipeline
        answer = pipeline("question-answering", model=folder)
        for question, context in QA_EXAMPLES:
            result = answer(question=question, context=context)
            assert result["answer"] == result["answer"].strip() == context[result["start"] : result["end"]]


def fill_mask_command(argv, monkeypatch, capsys):
    """`training/fill_mask.py ARGV` in-process, behind the command-line front: (exit status, stdout, stderr)."""
    from sinusoidal_encoder_training.stages import fill_mask

    return run_command(fill_mask.main, "fill_mask.py", argv, monkeypatch, capsys)


@pytest.mark.parametrize(
    ("cls", "hint"),
    [
        (se.SinusoidalEncoderForSequenceClassification, "export_onnx --task text-classification"),
        (se.SinusoidalEncoderForTokenClassification, "export_onnx --task token-classification"),
        (se.SinusoidalEncoderModel, "export_onnx --task feature-extraction"),
    ],
)
def test_fill_mask_refuses_a_folder_without_a_trained_masked_lm_head(
    tmp_path, tokenizer, monkeypatch, capsys, cls, hint
):
    """ "The right head or none": fill_mask on a fine-tuned classifier printed the predictions of a masked-LM head
    initialised at random, with status 0. Now one line, status 2, before any work: the folder's architecture, what
    to use instead."""
    folder = save(tmp_path, cls, tokenizer, num_labels=3)
    status, out, err = fill_mask_command([folder, f"A {tokenizer.mask_token} test."], monkeypatch, capsys)
    assert status == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert err.startswith("fill_mask.py: error: MODEL ") and f"is a {cls.__name__}, without a trained masked-LM" in err
    assert "pretraining" in err and hint in err, err
    assert out == ""  # nothing loaded, nothing predicted


def test_fill_mask_refuses_a_masked_lm_head_transformers_would_initialise(tmp_path, tokenizer, monkeypatch, capsys):
    """A folder whose config.json names a masked-LM but whose weights lack its head (here a classifier's): what
    transformers would initialise at random is refused, in one line, not used (by the weights check every command
    makes, `command_line.weights_misfit`, before anything is loaded)."""
    import json

    folder = save(tmp_path, se.SinusoidalEncoderForSequenceClassification, tokenizer)
    config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, "architectures": ["SinusoidalEncoderForMaskedLM"]}))
    status, out, err = fill_mask_command([folder, f"A {tokenizer.mask_token} test."], monkeypatch, capsys)
    assert status == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    misfit = "5 of its weights do not fit the SinusoidalEncoderForMaskedLM of its config.json: 5 missing ('lm_head."
    assert misfit in err, err
    assert out == ""


def test_fill_mask_predicts_from_a_folder_whose_tokenizer_gives_segment_ids(tmp_path, tokenizer, monkeypatch, capsys):
    """A folder saved with a tokenizer that gives `token_type_ids` (a BERT tokenizer, by an earlier version): the
    command gives the model only what it takes (it ended in the model's ValueError)."""
    from transformers import AutoTokenizer

    folder = save(tmp_path, se.SinusoidalEncoderForMaskedLM, tokenizer)
    names = ["input_ids", "token_type_ids", "attention_mask"]
    AutoTokenizer.from_pretrained(folder, model_input_names=names).save_pretrained(folder)
    status, out, err = fill_mask_command([folder, f"A {tokenizer.mask_token} test."], monkeypatch, capsys)
    assert status == 0, err
    assert "    -> " in out


def test_fill_mask_predicts_from_a_masked_lm_folder(tmp_path, tokenizer, monkeypatch, capsys):
    """The guard of the refusals above: a pretraining folder (a masked-LM with its head) still predicts."""
    folder = save(tmp_path, se.SinusoidalEncoderForMaskedLM, tokenizer)
    status, out, err = fill_mask_command(
        [folder, f"A {tokenizer.mask_token} test.", "--top_k", "2"], monkeypatch, capsys
    )
    assert status == 0, err
    assert out.startswith("loaded SinusoidalEncoderForMaskedLM") and "    -> " in out
    assert "LOAD REPORT" not in err and "MISSING" not in err


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("No mask in this text.", "has no [MASK]: put [MASK] where the word to predict goes."),
        ("A [mask] in lower case.", "has no [MASK] (the mask token is case-sensitive): put [MASK] where"),
        ("[MASK] and [MASK] and [MASK].", "has 3 [MASK] tokens: give one per text (pass several texts"),
    ],
)
def test_fill_mask_needs_one_mask_per_text(tmp_path, tokenizer, monkeypatch, capsys, text, message):
    """A text without [MASK], or with several, is one line naming the text, status 2, before the model is loaded
    (not transformers' PipelineException traceback, nor a TypeError)."""
    folder = save(tmp_path, se.SinusoidalEncoderForMaskedLM, tokenizer)
    status, out, err = fill_mask_command([folder, "A [MASK] is fine.", text], monkeypatch, capsys)
    assert status == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert err.startswith(f"fill_mask.py: error: {text!r} {message}"), err
    assert "loaded" not in out


def test_fill_mask_refuses_more_predictions_than_the_vocabulary_holds(tmp_path, tokenizer, monkeypatch, capsys):
    """--top_k past the vocabulary ended in torch's "selected index k out of range" traceback (found 2026-11-27)."""
    folder = save(tmp_path, se.SinusoidalEncoderForMaskedLM, tokenizer)
    top_k = str(len(tokenizer) + 1)
    status, out, err = fill_mask_command([folder, "A [MASK] test.", "--top_k", top_k], monkeypatch, capsys)
    assert status == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert err.startswith(f"fill_mask.py: error: --top_k {top_k} is more than the {len(tokenizer):,} tokens"), err
    assert "loaded" not in out
    status, out, err = fill_mask_command(
        [folder, "A [MASK] test.", "--top_k", str(len(tokenizer))], monkeypatch, capsys
    )
    shown = re.findall(r"""['"] \d\.\d\d(?:, |$)""", out.splitlines()[-1])
    assert status == 0 and len(shown) == len(tokenizer), err  # the whole vocabulary, ranked
