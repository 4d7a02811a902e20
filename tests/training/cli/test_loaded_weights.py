"""What a command loads from a model folder is what the folder holds, or nothing: weights that do not fit the
folder's config.json are refused in one line by every command that loads a folder (`command_line.weights_misfit`);
a fine-tune never reuses a task head by accident (`finetuning.plan_head`): a head of another task is replaced by a
new one, with one line saying so, a head of other labels is refused unless --ignore_mismatched_sizes, the same
labels in another order keep their outputs; labels written two ways are named; a tokenizer larger than the model's
vocabulary is refused before any work."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import run_command, tiny_config
from safetensors.torch import load_file, save_file
from test_user_files import command, model_folder

import sinusoidal_encoder as se
from sinusoidal_encoder_training.cli import command_line
from sinusoidal_encoder_training.cli.command_line import UsageError
from sinusoidal_encoder_training.stages import finetuning
from sinusoidal_encoder_training.tasks.classification import recipe as classification
from sinusoidal_encoder_training.tasks.registry import TASKS

ENCODER_WEIGHT = "model.encoder.layers.0.attention.qkv.weight"


def change_weights(folder, kind: str) -> str:
    """Removes an encoder weight from the folder's weights, or adds one the model does not have; returns how the
    refusal counts it."""
    path = str(folder / "model.safetensors")
    tensors = load_file(path)
    if kind == "missing":
        tensors.pop(ENCODER_WEIGHT)
        shown = f"1 missing ({ENCODER_WEIGHT!r})"
    else:
        tensors["model.encoder.layers.9.extra.weight"] = torch.zeros(2)
        shown = "1 unexpected ('model.encoder.layers.9.extra.weight')"
    save_file(tensors, path, metadata={"format": "pt"})
    return shown


def weights_command(name, folder, tmp_path):
    """(main, program, argv, flag) of command `name` on the model folder `folder`, writing under tmp_path/out."""
    from sinusoidal_encoder_training.publishing import hub
    from sinusoidal_encoder_training.stages import distillation

    if name == "distill":
        return distillation.main, "distill.py", [folder, "--output_dir", tmp_path / "out"], "MODEL"
    if name == "publish":
        (folder / "README.md").write_text("# a model\n")
        return hub.main, "publish.py", [folder, "--hub_model_id", "me/tiny", "--dry_run"], None
    return command(name, folder, tmp_path)


COMMANDS = ("finetune", "pretrain --model_name_or_path", "export_onnx", "fill_mask", "distill", "publish")


@pytest.mark.parametrize("kind", ["missing", "unexpected"])
@pytest.mark.parametrize("name", COMMANDS)
def test_weights_that_do_not_fit_the_config_are_refused_by_every_command(
    tmp_path, tokenizer, monkeypatch, capsys, name, kind
):
    if name == "export_onnx":
        pytest.importorskip("onnxscript", reason="the onnx extra is not installed")
    if name == "distill":
        pytest.importorskip("sentence_transformers", reason="the integrations extra is not installed")
    folder = model_folder(tmp_path, tokenizer)
    shown = change_weights(folder, kind)
    main, program, argv, flag = weights_command(name, folder, tmp_path)
    status, _, err = run_command(main, program, argv, monkeypatch, capsys)
    lines = err.strip().splitlines()
    assert status == 2 and len(lines) == 1 and "Traceback" not in err, err[-3000:]
    named = f"{flag} {str(folder)!r}" if flag else repr(str(folder))
    fit = "of its weights do not fit the SinusoidalEncoderForMaskedLM of its config.json: "
    assert lines[0].startswith(f"{program}: error: {named}: 1 {fit}{shown}. "), lines[0]
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir()), "written before the check"


@pytest.mark.parametrize("head", sorted({task.head for task in TASKS.values()}))
def test_the_weights_of_every_saved_model_fit_its_config(tmp_path, head):
    """Tied weights (the masked-LM decoder) are saved once and are not missing; every head's own weights count."""
    getattr(se, f"SinusoidalEncoder{head}")(tiny_config(num_labels=3)).save_pretrained(tmp_path)
    assert command_line.weights_misfit(str(tmp_path)) is None


def test_a_head_the_user_replaces_is_not_judged(tmp_path):
    se.SinusoidalEncoderForSequenceClassification(tiny_config()).save_pretrained(tmp_path)
    path = str(tmp_path / "model.safetensors")
    tensors = load_file(path)
    tensors.pop("classifier.bias")
    save_file(tensors, path, metadata={"format": "pt"})
    assert "1 missing ('classifier.bias')" in command_line.weights_misfit(str(tmp_path))
    assert command_line.weights_misfit(str(tmp_path), replaced_head=True) is None


# --- the head of a fine-tune ---------------------------------------------------------------------------------------

SENTENCES = ["a fine row of text", "another row", "the third one", "and a fourth"]


class Stopped(Exception):
    """Raised in place of training: what would be trained is in `Stopped.seen`."""


def stop_before_training(monkeypatch) -> dict:
    """Replaces the training loop: the model and task it would train are recorded, then `Stopped` is raised."""
    seen = {}

    def train(accelerator, config, model, optimizer, train_loader, eval_loader, task, header):
        seen.update(model=accelerator.unwrap_model(model), task=task, header=header)
        raise Stopped

    monkeypatch.setattr(finetuning, "train", train)
    return seen


def head_folder(root, cls, labels: list[str] | None = None):
    """A tiny model folder of `cls` with the shipped tokenizer and a head for `labels` (in that order)."""
    from transformers import AutoTokenizer

    from sinusoidal_encoder_training.data.pipeline import SHIPPED_TOKENIZER

    tokenizer = AutoTokenizer.from_pretrained(SHIPPED_TOKENIZER)
    named = (
        {}
        if labels is None
        else {"id2label": dict(enumerate(labels)), "label2id": {n: i for i, n in enumerate(labels)}}
    )
    config = tiny_config(vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id, **named)
    folder = root / "model"
    cls(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def rows_file(path, labels: list[str]) -> str:
    rows = [{"text": text, "label": labels[i % len(labels)]} for i, text in enumerate(SENTENCES * 2)]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return str(path)


def fine_tune(folder, train, tmp_path, **settings):
    config = finetuning.FinetuningConfig(
        model_name_or_path=str(folder), train_file=train, output_dir=str(tmp_path / "out"), **settings
    )
    with pytest.raises(Stopped):
        finetuning.finetune(config)


def test_a_head_of_another_task_is_replaced_by_a_new_one_with_one_line(tmp_path, monkeypatch, capsys):
    folder = head_folder(tmp_path, se.SinusoidalEncoderForTokenClassification, ["x", "y"])  # the same names
    seen = stop_before_training(monkeypatch)
    fine_tune(folder, rows_file(tmp_path / "rows.jsonl", ["x", "y"]), tmp_path)
    line = (
        f"--model_name_or_path {str(folder)!r} has a token-classification head "
        "(SinusoidalEncoderForTokenClassification), trained for another task: a new text-classification head "
        "starts on its encoder."
    )
    assert line in capsys.readouterr().out.splitlines()
    saved = load_file(str(folder / "model.safetensors"))
    model = seen["model"]
    assert not torch.equal(model.classifier.weight.detach(), saved["classifier.weight"])  # not reused by index
    assert torch.equal(model.model.encoder.layers[0].attention.qkv.weight.detach(), saved[ENCODER_WEIGHT])


@pytest.mark.parametrize(
    ("cls", "labels", "head"),
    [
        (
            se.SinusoidalEncoderForMaskedLM,
            None,
            "new on the folder's encoder, initialised at random: classifier, pooler.dense",
        ),
        (
            se.SinusoidalEncoderForTokenClassification,
            ["x", "y"],
            "new on the folder's encoder, initialised at random: classifier, pooler.dense",
        ),
        (se.SinusoidalEncoderForSequenceClassification, ["x", "y"], "the folder's own, trained further"),
    ],
    ids=["pretrained", "another task's head", "its own head"],
)
def test_the_header_says_which_head_is_new_in_place_of_transformers_load_report(
    tmp_path, monkeypatch, capfd, cls, labels, head
):
    from transformers.utils import logging as transformers_logging

    verbosity = transformers_logging.get_verbosity()
    folder = head_folder(tmp_path, cls, labels)
    seen = stop_before_training(monkeypatch)
    fine_tune(folder, rows_file(tmp_path / "rows.jsonl", ["x", "y"]), tmp_path)
    assert seen["header"][-1] == f"Head = {head}"
    said = capfd.readouterr()
    assert "LOAD REPORT" not in said.out + said.err and "Loading weights" not in said.err
    assert transformers_logging.get_verbosity() == verbosity  # as it was


@pytest.mark.parametrize(
    ("theirs", "ours"),
    [(["neg", "pos"], ["bad", "good"]), (["neg", "pos"], ["a", "b", "c"])],
    ids=["the same count, other names", "another count"],
)
def test_a_head_of_other_labels_is_refused_naming_both_unless_replaced(tmp_path, monkeypatch, capsys, theirs, ours):
    folder = head_folder(tmp_path, se.SinusoidalEncoderForSequenceClassification, theirs)
    train = rows_file(tmp_path / "rows.jsonl", ours)

    def no_tokenising(*args, **kwargs):
        raise AssertionError("the data was tokenised before the head was refused")

    monkeypatch.setattr(classification, "encode", no_tokenising)
    with pytest.raises(UsageError) as refused:
        fine_tune(folder, train, tmp_path)
    assert str(refused.value) == (
        f"--model_name_or_path {str(folder)!r} has a text-classification head for 2 labels {theirs!r}, but the "
        f"data has {len(ours)} labels {ours!r}: pass --ignore_mismatched_sizes to start a new head on its encoder, "
        "or give data with the head's labels."
    )
    monkeypatch.undo()
    seen = stop_before_training(monkeypatch)
    fine_tune(folder, train, tmp_path, ignore_mismatched_sizes=True)
    line = (
        f"--model_name_or_path {str(folder)!r} has a text-classification head for 2 labels {theirs!r}: a new "
        f"head for {len(ours)} labels {ours!r} starts on its encoder (--ignore_mismatched_sizes)."
    )
    assert line in capsys.readouterr().out.splitlines()
    saved = load_file(str(folder / "model.safetensors"))["classifier.weight"]
    assert seen["model"].config.id2label == dict(enumerate(ours))
    assert not torch.equal(seen["model"].classifier.weight.detach(), saved)  # a new head, not the old by index


def test_a_head_of_the_same_labels_in_another_order_keeps_each_label_on_its_output(tmp_path, monkeypatch):
    folder = head_folder(tmp_path, se.SinusoidalEncoderForSequenceClassification, ["pos", "neg"])
    seen = stop_before_training(monkeypatch)
    fine_tune(folder, rows_file(tmp_path / "rows.jsonl", ["neg", "pos"]), tmp_path)
    model, task = seen["model"], seen["task"]
    assert model.config.id2label == {0: "pos", 1: "neg"} and task.label_names == ["pos", "neg"]
    saved = load_file(str(folder / "model.safetensors"))["classifier.weight"]
    assert torch.equal(model.classifier.weight.detach(), saved)  # the head fine-tuned further, by name


def test_labels_that_differ_only_by_case_or_whitespace_are_named_in_one_line(tmp_path, monkeypatch, capsys):
    folder = head_folder(tmp_path, se.SinusoidalEncoderForMaskedLM)
    train = rows_file(tmp_path / "rows.jsonl", ["Positive", "positive ", "neg"])
    argv = ["--model_name_or_path", folder, "--train_file", train, "--output_dir", tmp_path / "out"]
    status, _, err = run_command(finetuning.main, "finetune.py", argv, monkeypatch, capsys)
    assert status == 2 and "Traceback" not in err, err[-3000:]
    assert err.strip().splitlines()[-1] == (  # after the datasets' progress lines
        "finetune.py: error: The labels 'Positive' and 'positive ' differ only by case or surrounding whitespace: "
        "write each label one way in the data to make them one, or pass --keep_similar_labels to keep them apart."
    )
    seen = stop_before_training(monkeypatch)
    fine_tune(folder, train, tmp_path, keep_similar_labels=True)
    assert seen["task"].label_names == ["Positive", "neg", "positive "]


@pytest.mark.parametrize("name", ["finetune", "pretrain"])
def test_a_tokenizer_larger_than_the_models_vocabulary_is_refused_in_one_line(
    tmp_path, tokenizer, monkeypatch, capsys, name
):
    from conftest import SHIPPED_TOKENIZER

    from sinusoidal_encoder_training.stages import pretraining

    folder = tmp_path / "small"
    se.SinusoidalEncoderForMaskedLM(tiny_config()).save_pretrained(folder)  # 99 token embeddings
    data = rows_file(tmp_path / "rows.jsonl", ["neg", "pos"])
    argv = ["--model_name_or_path", folder, "--tokenizer_name", SHIPPED_TOKENIZER, "--train_file", data]
    argv += ["--validation_file", data, "--output_dir", tmp_path / "out", "--max_train_steps", "1"]
    main, program = (finetuning.main, "finetune.py") if name == "finetune" else (pretraining.main, "pretrain.py")
    if name == "pretrain":
        argv += ["--text_column_name", "text"]
    status, _, err = run_command(main, program, argv, monkeypatch, capsys)
    lines = err.strip().splitlines()
    assert status == 2 and len(lines) == 1 and "Traceback" not in err, err[-3000:]
    expected = (
        f"{program}: error: --tokenizer_name {str(SHIPPED_TOKENIZER)!r} has {len(tokenizer):,} tokens, more than "
        f"the 99 token embeddings of --model_name_or_path {str(folder)!r} (its vocab_size): "
    )
    assert lines[0].startswith(expected), lines[0]
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir()), "written before the check"


@pytest.mark.parametrize(
    ("folder_problem", "problem", "refused"),
    [("regression", "regression", False), ("regression", "single_label_classification", True)],
    ids=["regression again", "regression to classes"],
)
def test_a_regression_head_is_kept_for_a_regression_target_only(tmp_path, folder_problem, problem, refused):
    folder_config = tiny_config(num_labels=1, problem_type=folder_problem)
    folder_config.architectures = ["SinusoidalEncoderForSequenceClassification"]
    (tmp_path / "model").mkdir()
    config = finetuning.FinetuningConfig(model_name_or_path=str(tmp_path / "model"), output_dir=str(tmp_path / "out"))
    labels = None if problem == "regression" else ["neg", "pos"]
    if refused:
        with pytest.raises(UsageError, match=r"for a regression target \(one number\), but the data has 2 labels"):
            finetuning.plan_head(config, folder_config, problem, labels)
    else:
        assert finetuning.plan_head(config, folder_config, problem, labels) == finetuning.HeadPlan(None)


def test_pretraining_from_a_folder_of_another_head_says_it_starts_a_masked_lm_head(tmp_path, tokenizer, capsys):
    from conftest import write_text_corpus

    from sinusoidal_encoder_training.configs import PretrainingConfig
    from sinusoidal_encoder_training.stages.pretraining import build_model

    folder = head_folder(tmp_path, se.SinusoidalEncoderForTokenClassification, ["x", "y"])
    train, _ = write_text_corpus(tmp_path / "corpus")
    config = PretrainingConfig(output_dir=str(tmp_path / "out"), model_name_or_path=str(folder), train_file=str(train))
    saved = load_file(str(folder / "model.safetensors"))
    model = build_model(config, tokenizer)
    line = (
        f"--model_name_or_path {str(folder)!r} has a token-classification head "
        "(SinusoidalEncoderForTokenClassification): pretraining continues its encoder with a new masked-LM head."
    )
    assert capsys.readouterr().out.splitlines() == [line]
    assert torch.equal(model.model.encoder.layers[0].attention.qkv.weight.detach(), saved[ENCODER_WEIGHT])
