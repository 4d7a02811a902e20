"""What a run reads is never deleted or changed by that run: a switch that empties or replaces a folder or file
(`--overwrite_output_dir`, the export's `--overwrite`) and the folder distillation writes into are refused, in one
line and before anything is touched, when they are or hold what the run reads: the model or tokenizer it starts
from, a data file, the checkpoint it resumes; and a run's output folder never lies inside a folder it reads (a
local dataset folder, a model folder) (`arguments.check_reads_kept`, called by every configuration)."""

from __future__ import annotations

import json
import os
import re

import pytest
from conftest import folder_digest, run_command, tiny_config, write_text_corpus

import sinusoidal_encoder as se
from sinusoidal_encoder_training.cli.command_line import UsageError


def model_folder(folder, tokenizer):
    config = tiny_config(vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id)
    se.SinusoidalEncoderForMaskedLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def rows_file(path):
    rows = [{"text": f"passage {i} about {word}", "label": word} for i, word in enumerate(["x", "y"] * 10)]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def command(name, tmp_path, tokenizer, monkeypatch):
    """(main, program, argv, the folder that must be kept, what the line names) of a command whose switch would
    clear what it reads."""
    from sinusoidal_encoder_training.publishing import onnx_export
    from sinusoidal_encoder_training.stages import distillation, finetuning, pretraining, tokenizer_training

    out = tmp_path / "out"
    if name == "finetune into its model folder":
        model = model_folder(out, tokenizer)
        argv = ["--model_name_or_path", model, "--output_dir", model, "--overwrite_output_dir"]
        return finetuning.main, "finetune.py", argv, model, f"which is --model_name_or_path {model}"
    if name == "finetune, data in the output folder":
        model = model_folder(tmp_path / "model", tokenizer)
        data = rows_file(out / "rows.jsonl")
        argv = ["--model_name_or_path", model, "--train_file", data, "--output_dir", out, "--overwrite_output_dir"]
        return finetuning.main, "finetune.py", argv, out, f"which holds --train_file {data}"
    train, validation = write_text_corpus(tmp_path / "corpus")
    data = ["--train_file", train, "--validation_file", validation]
    if name == "pretrain from a model in the output folder":
        model = model_folder(out / "start", tokenizer)
        argv = [*data, "--model_name_or_path", model, "--output_dir", out, "--overwrite_output_dir"]
        return pretraining.main, "pretrain.py", argv, out, f"which holds --model_name_or_path {model}"
    if name == "pretrain with a tokenizer in the output folder":
        tokenizer.save_pretrained(out / "tokenizer")
        argv = [*data, "--tokenizer_name", out / "tokenizer", "--output_dir", out, "--overwrite_output_dir"]
        return pretraining.main, "pretrain.py", argv, out, "which holds --tokenizer_name"
    if name == "pretrain, the output folder another name of the data's":
        link = tmp_path / "link"
        os.symlink(tmp_path / "corpus", link)
        argv = [*data, "--output_dir", link, "--overwrite_output_dir"]
        return pretraining.main, "pretrain.py", argv, tmp_path / "corpus", f"which holds --train_file {train}"
    if name == "pretrain resuming the checkpoint it would delete":
        checkpoint = out / "checkpoints" / "step_2"
        checkpoint.mkdir(parents=True)
        (checkpoint / "manifest.json").write_text("{}")
        argv = [*data, "--output_dir", out, "--overwrite_output_dir", "--resume_from_checkpoint", "latest"]
        return pretraining.main, "pretrain.py", argv, out, "the checkpoint --resume_from_checkpoint latest resumes"
    if name == "pretrain into a checkout, with its shipped tokenizer":
        from sinusoidal_encoder_training.configs import pretraining as pretraining_configs

        checkout = tmp_path / "checkout"  # a copy: were the rule broken, the test would empty the real one
        tokenizer.save_pretrained(checkout / "tokenizer_config")
        monkeypatch.setattr(pretraining_configs, "SHIPPED_TOKENIZER", str(checkout / "tokenizer_config"))
        argv = [*data, "--output_dir", checkout, "--overwrite_output_dir"]
        return pretraining.main, "pretrain.py", argv, checkout, "which holds the shipped tokenizer"
    if name == "train a tokenizer on data in its output folder":
        corpus = out / "corpus.txt"
        out.mkdir()
        corpus.write_text(train.read_text())
        argv = ["--train_file", corpus, "--output_dir", out, "--overwrite_output_dir"]
        return tokenizer_training.main, "train_tokenizer.py", argv, out, f"which holds --train_file {corpus}"
    if name == "export over the model's weights":
        model = model_folder(out, tokenizer)
        argv = [model, "--output", model / "model.safetensors", "--overwrite"]
        return onnx_export.main, "export_onnx.py", argv, model, "which is MODEL's model.safetensors"
    if name == "distill into the teacher's folder":
        student = model_folder(tmp_path / "student", tokenizer)
        teacher = model_folder(out, tokenizer)
        argv = [student, "--teacher", teacher, "--output_dir", teacher]
        return distillation.main, "distill.py", argv, teacher, f"which is --teacher {teacher}"
    raise AssertionError(name)


NAMES = [
    "finetune into its model folder",
    "finetune, data in the output folder",
    "pretrain from a model in the output folder",
    "pretrain with a tokenizer in the output folder",
    "pretrain, the output folder another name of the data's",
    "pretrain resuming the checkpoint it would delete",
    "pretrain into a checkout, with its shipped tokenizer",
    "train a tokenizer on data in its output folder",
    "export over the model's weights",
    "distill into the teacher's folder",
]


def inside_command(name, tmp_path, tokenizer):
    """(main, program, argv, the folder read, what the line names) of a command writing inside what it reads."""
    from sinusoidal_encoder_training.stages import distillation, evaluate, finetuning, pretraining, tokenizer_training

    data = tmp_path / "data"
    write_text_corpus(data)
    if name == "pretrain into its dataset folder":
        argv = ["--dataset_name", data, "--output_dir", data / "run", "--max_train_steps", "1"]
        return pretraining.main, "pretrain.py", argv, data, f"--output_dir {data / 'run'} is inside --dataset_name"
    if name == "pretrain into its dataset folder, by a link":
        os.symlink(data, tmp_path / "link")
        argv = ["--dataset_name", data, "--output_dir", tmp_path / "link" / "a" / "run", "--max_train_steps", "1"]
        return pretraining.main, "pretrain.py", argv, data, f"is inside --dataset_name {data}"
    if name == "train a tokenizer into its dataset folder":
        argv = ["--dataset_name", data, "--output_dir", data / "tokenizer"]
        return tokenizer_training.main, "train_tokenizer.py", argv, data, "is inside --dataset_name"
    model = model_folder(tmp_path / "model", tokenizer)
    if name == "evaluate, its results into its dataset folder":
        argv = [model, "--dataset_name", data, "--output_file", data / "results.json"]
        return evaluate.main, "evaluate", argv, data, f"--output_file {data / 'results.json'} is inside --dataset_name"
    if name == "finetune into its model folder's subfolder":
        argv = ["--model_name_or_path", model, "--output_dir", model / "finetuned", "--max_train_steps", "1"]
        return finetuning.main, "finetune.py", argv, model, f"is inside --model_name_or_path {model}"
    if name == "distill into the student's subfolder":
        argv = [model, "--output_dir", model / "sentences"]
        return distillation.main, "distill.py", argv, model, f"is inside MODEL {model}"
    raise AssertionError(name)


INSIDE = [
    "pretrain into its dataset folder",
    "pretrain into its dataset folder, by a link",
    "train a tokenizer into its dataset folder",
    "evaluate, its results into its dataset folder",
    "finetune into its model folder's subfolder",
    "distill into the student's subfolder",
]


@pytest.mark.parametrize("name", NAMES + INSIDE)
def test_a_run_never_clears_nor_writes_inside_what_it_reads(name, tmp_path, tokenizer, monkeypatch, capsys):
    """Cleared: refused before anything is touched. Written inside: a dataset folder loads every data file under it
    (the run's JSON files would be loaded as data next time, or make the folder unloadable); a model folder is
    published with all it holds."""
    if name in NAMES:
        main, program, argv, kept, named = command(name, tmp_path, tokenizer, monkeypatch)
        why = "read by this run: nothing was changed"
    else:
        main, program, argv, kept, named = inside_command(name, tmp_path, tokenizer)
        which = "it" if "results" in name else "its files"
        why = f"read by this run: {which} would become part of what it reads. Nothing was changed"
    before = folder_digest(kept)
    status, out, err = run_command(main, program, argv, monkeypatch, capsys)
    assert status == 2, out + err
    assert named in err and why in err, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert folder_digest(kept) == before


def test_what_a_run_does_not_read_may_still_be_cleared(tmp_path, tokenizer):
    """The rule refuses only what is read: a re-export over the folder's own model.onnx, `--overwrite_output_dir`
    on a folder holding a model the run does not start from, and `--resume_from_checkpoint latest` with no
    checkpoint to resume are built."""
    from sinusoidal_encoder_training.configs import EvaluationConfig, OnnxExportConfig, PretrainingConfig

    model = model_folder(tmp_path / "model", tokenizer)
    (model / "model.onnx").write_bytes(b"an earlier export")
    OnnxExportConfig(model=str(model), overwrite=True)
    train, _ = write_text_corpus(tmp_path / "corpus")
    for resume in (None, "latest"):
        PretrainingConfig(
            output_dir=str(model), overwrite_output_dir=True, train_file=str(train), resume_from_checkpoint=resume
        )
    PretrainingConfig(output_dir=str(tmp_path / "model-next"), model_name_or_path=str(model))  # beside it, a prefix
    PretrainingConfig(output_dir=str(tmp_path / "corpus" / "run"), train_file=str(train))  # beside a data file
    # results beside the model they score, as the docs write them: a model folder is not read as data
    EvaluationConfig(model=str(model), train_file=str(train), output_file=str(model / "results.json"))


def test_the_rule_is_the_configurations_so_the_python_api_keeps_it(tmp_path, tokenizer):
    from sinusoidal_encoder_training.configs import FinetuningConfig

    model = model_folder(tmp_path / "model", tokenizer)
    spelled = str(model) + "/./"
    with pytest.raises(UsageError, match=re.escape("--overwrite_output_dir would empty --output_dir")):
        FinetuningConfig(model_name_or_path=str(model), output_dir=spelled, overwrite_output_dir=True)
