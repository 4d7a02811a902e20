"""Damaged files of the user's (a truncated config.json, an empty or garbled weights file, a folder
without a tokenizer) are one line naming the flag, the folder and the file, status 2, before any work and with
nothing written, in every command that loads a model or a tokenizer (`command_line.loading`, `check_local_files`).
Each family once per command: the same translator serves them all."""

from __future__ import annotations

import json

import pytest
from conftest import run_command, tiny_config, write_text_corpus

import sinusoidal_encoder as se


def damage(folder, kind: str) -> str:
    """Damages the saved model folder `folder` as `kind` says; returns what the line names."""
    if kind == "truncated config":
        text = (folder / "config.json").read_text()
        (folder / "config.json").write_text(text[: len(text) // 2])
        return "config.json is not valid JSON ("
    if kind == "empty weights":
        (folder / "model.safetensors").write_bytes(b"")
        return "model.safetensors is empty (0 bytes): the weights are missing; save or download the folder again."
    if kind == "no config":  # a folder of something else
        (folder / "config.json").unlink()
        return "the folder has no config.json: it is not a model folder; name a folder that save_pretrained wrote"
    if kind == "garbled weights":
        weights = folder / "model.safetensors"
        weights.write_bytes(b"\xff" * 8 + weights.read_bytes()[8:])
        return "model.safetensors cannot be read ("
    (folder / "tokenizer.json").unlink()
    return "the folder has no tokenizer (no tokenizer.json): save the tokenizer into it"


def model_folder(root, tokenizer, cls=se.SinusoidalEncoderForMaskedLM):
    folder = root / "model"
    config = tiny_config(vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id)
    cls(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def command(name, folder, tmp_path):
    """(main, program, argv, flag) of command `name` on the model folder `folder`, writing under tmp_path/out."""
    from sinusoidal_encoder_training.publishing import onnx_export
    from sinusoidal_encoder_training.stages import fill_mask, finetuning, pretraining

    out = tmp_path / "out"
    if name == "fill_mask":
        return fill_mask.main, "fill_mask.py", [folder, "A [MASK] test."], "MODEL"
    if name == "export_onnx":
        return onnx_export.main, "export_onnx.py", [folder, "--output", out / "model.onnx"], "MODEL"
    train, validation = write_text_corpus(tmp_path / "corpus", n_train=4, n_validation=2)
    if name == "finetune":
        rows = [{"text": "a b c", "label": "x"}, {"text": "d e f", "label": "y"}]
        data = tmp_path / "rows.jsonl"
        data.write_text("".join(json.dumps(row) + "\n" for row in rows))
        argv = ["--model_name_or_path", folder, "--train_file", data, "--validation_file", data]
        return (
            finetuning.main,
            "finetune.py",
            [*argv, "--output_dir", out, "--max_train_steps", "1"],
            "--model_name_or_path",
        )
    argv = ["--train_file", train, "--validation_file", validation, "--output_dir", out, "--max_train_steps", "1"]
    if name == "pretrain --tokenizer_name":
        return pretraining.main, "pretrain.py", [*argv, "--tokenizer_name", folder], "--tokenizer_name"
    return pretraining.main, "pretrain.py", [*argv, "--model_name_or_path", folder], "--model_name_or_path"


CASES = [
    (name, kind)
    for name in ("fill_mask", "export_onnx", "finetune", "pretrain --model_name_or_path")
    for kind in ("truncated config", "empty weights", "garbled weights")
] + [
    (name, "no tokenizer")
    for name in ("fill_mask", "finetune", "pretrain --tokenizer_name", "pretrain --model_name_or_path")
]
CASES += [(name, "no config") for name in ("finetune", "pretrain --model_name_or_path")]  # the others: their own line


@pytest.mark.parametrize(("name", "kind"), CASES)
def test_a_damaged_folder_is_one_line_naming_the_file_before_any_work(
    tmp_path, tokenizer, monkeypatch, capsys, name, kind
):
    if name == "export_onnx":
        pytest.importorskip("onnxscript", reason="the onnx extra is not installed")
    folder = model_folder(tmp_path, tokenizer)
    expected = damage(folder, kind)
    main, program, argv, flag = command(name, folder, tmp_path)
    status, _, err = run_command(main, program, argv, monkeypatch, capsys)
    lines = err.strip().splitlines()
    assert status == 2 and len(lines) == 1 and "Traceback" not in err, err[-3000:]
    assert lines[0].startswith(f"{program}: error: {flag} {str(folder)!r}: "), lines[0]
    assert expected in lines[0], lines[0]
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir()), "written before the check"


def data_command(name, train, validation, tmp_path, *extra):
    """(main, program, argv) of a data-reading command on the two files, writing under tmp_path/out."""
    from sinusoidal_encoder_training.stages import finetuning, pretraining, tokenizer_training

    files = ["--train_file", train, "--validation_file", validation, "--output_dir", tmp_path / "out", *extra]
    if name == "pretrain":
        return pretraining.main, "pretrain.py", [*files, "--max_train_steps", "1"]
    if name == "train_tokenizer":
        return tokenizer_training.main, "train_tokenizer.py", [*files, "--vocab_size", "300"]
    model = model_folder(tmp_path, _shipped_tokenizer())
    return finetuning.main, "finetune.py", [*files, "--model_name_or_path", model, "--max_train_steps", "1"]


def _shipped_tokenizer():
    from transformers import AutoTokenizer

    from sinusoidal_encoder_training.data.pipeline import SHIPPED_TOKENIZER

    return AutoTokenizer.from_pretrained(SHIPPED_TOKENIZER)


GOOD = [{"text": "a fine row of text", "label": "pos"}, {"text": "another row", "label": "neg"}]
LATIN_1 = '{"text": "café"}\n'.encode("latin-1")


def jsonl(path, rows, raw: bytes = b""):
    path.write_bytes("".join(json.dumps(row) + "\n" for row in rows).encode() + raw)
    return path


DATA_CASES = {
    "malformed JSON line": (
        lambda d: (jsonl(d / "train.jsonl", GOOD, b'{"text": "cut short", "label\n'), jsonl(d / "valid.jsonl", GOOD)),
        "--train_file {train!r}: line 3 is not valid JSON (",
    ),
    "Latin-1 text": (
        lambda d: (
            jsonl(d / "train.jsonl", GOOD),
            jsonl(d / "valid.jsonl", GOOD, '{"text": "café"}\n'.encode("latin-1")),
        ),
        "--validation_file {validation!r}: line 3 is not UTF-8 (byte 0xe9 at column 14): save the file as UTF-8",
    ),
    "columns differ": (
        lambda d: (jsonl(d / "train.jsonl", GOOD), jsonl(d / "valid.jsonl", [{"body": "x", "label": "pos"}])),
        "--validation_file {validation!r} has the columns ['body', 'label'], --train_file {train!r} has ['label', "
        "'text']",
    ),
    "empty training file": (
        lambda d: (jsonl(d / "train.jsonl", [], b"\n\n"), jsonl(d / "valid.jsonl", GOOD)),
        "--train_file {train!r} holds no rows: every line is empty.",
    ),
    "a number among text labels": (
        lambda d: (jsonl(d / "train.jsonl", [*GOOD, {"text": "odd", "label": 1}]), jsonl(d / "valid.jsonl", GOOD)),
        "--train_file {train!r}: column 'label' holds text ('pos', line 1) and numbers (1, line 3): give every row",
    ),
}


@pytest.mark.parametrize("name", ["pretrain", "finetune", "train_tokenizer"])
@pytest.mark.parametrize("case", list(DATA_CASES))
def test_a_bad_data_file_is_one_line_naming_the_file_and_line(tmp_path, monkeypatch, capsys, name, case):
    """A malformed JSON line, a file in another encoding than UTF-8, a validation file with other columns than the
    training file's, an empty file, an integer among string labels: each is one line naming the flag, the file and
    the line, before any work (never datasets' "An error occurred while generating the dataset")."""
    (tmp_path / "data").mkdir()
    train, validation = DATA_CASES[case][0](tmp_path / "data")
    expected = DATA_CASES[case][1].format(train=str(train), validation=str(validation))
    main, program, argv = data_command(name, train, validation, tmp_path)
    status, _, err = run_command(main, program, argv, monkeypatch, capsys)
    lines = err.strip().splitlines()
    assert status == 2 and len(lines) == 1 and "Traceback" not in err, err[-3000:]
    assert lines[0].startswith(f"{program}: error: {expected}"), lines[0]
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


@pytest.mark.parametrize("name", ["pretrain", "finetune", "train_tokenizer"])
def test_a_file_too_small_to_split_asks_for_a_validation_file(tmp_path, monkeypatch, capsys, name):
    """One row and no --validation_file ended in datasets' ValueError from train_test_split (found 2026-11-27)."""
    train = jsonl(tmp_path / "train.jsonl", GOOD[:1])
    main, program, argv = data_command(name, train, train, tmp_path)
    at = argv.index("--validation_file")
    del argv[at : at + 2]
    status, _, err = run_command(main, program, argv, monkeypatch, capsys)
    last = err.strip().splitlines()[-1]
    assert status == 2 and "Traceback" not in err, err[-3000:]
    assert last == (
        f"{program}: error: --train_file {str(train)!r} holds 1 row(s): too few to hold out "
        "--validation_split_percentage 5% for validation and train on the rest; add rows or pass --validation_file."
    ), last
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_a_missing_text_is_one_line_naming_the_row(tmp_path, monkeypatch, capsys):
    """A null text in a classification file ended in the tokenizer's TypeError (found 2026-11-27)."""
    train = jsonl(tmp_path / "train.jsonl", [*GOOD, {"text": None, "label": "pos"}])
    main, program, argv = data_command("finetune", train, jsonl(tmp_path / "valid.jsonl", GOOD), tmp_path)
    status, _, err = run_command(main, program, argv, monkeypatch, capsys)
    last = err.strip().splitlines()[-1]
    assert status == 2 and "Traceback" not in err, err[-3000:]
    expected = "The train split, row 3 {'label': 'pos'}: 'text' is None, not text: give every row a text "
    assert last == f"{program}: error: {expected}" + '("" for none), or remove the row.', last
    assert not (tmp_path / "out" / "model.safetensors").exists()


def test_token_classification_needs_every_word_as_text(tmp_path, tokenizer, monkeypatch, capsys):
    """A null among a row's words ended in the tokenizer's TypeError (found 2026-11-27)."""
    from sinusoidal_encoder_training.stages import finetuning

    rows = [{"tokens": ["Ada", "wrote", "code"], "tags": ["B-PER", "O", "O"]}] * 3
    train = jsonl(tmp_path / "train.jsonl", [*rows, {"tokens": ["Grace", None], "tags": ["B-PER", "O"]}])
    folder = model_folder(tmp_path, tokenizer)
    argv = ["--task", "token-classification", "--model_name_or_path", folder, "--train_file", train]
    argv += ["--validation_file", jsonl(tmp_path / "valid.jsonl", rows), "--output_dir", tmp_path / "out"]
    status, _, err = run_command(finetuning.main, "finetune.py", argv, monkeypatch, capsys)
    last = err.strip().splitlines()[-1]
    assert status == 2 and "Traceback" not in err, err
    assert last == f"finetune.py: error: --train_file {str(train)!r}, row 4: 'tokens' holds None among its words: " + (
        "give every word as text."
    ), last


def test_token_classification_needs_one_tag_per_word(tmp_path, tokenizer, monkeypatch, capsys):
    """A row whose tags are fewer than its words is one line naming the file and the row, before training."""
    from sinusoidal_encoder_training.stages import finetuning

    rows = [{"tokens": ["Ada", "wrote", "code"], "tags": ["B-PER", "O", "O"]}] * 3
    train = jsonl(tmp_path / "train.jsonl", [*rows, {"tokens": ["Grace", "Hopper", "sailed"], "tags": ["B-PER", "O"]}])
    validation = jsonl(tmp_path / "valid.jsonl", rows)
    folder = model_folder(tmp_path, tokenizer)
    argv = ["--task", "token-classification", "--model_name_or_path", folder, "--train_file", train]
    argv += ["--validation_file", validation, "--output_dir", tmp_path / "out", "--max_train_steps", "1"]
    status, _, err = run_command(finetuning.main, "finetune.py", argv, monkeypatch, capsys)
    last = err.strip().splitlines()[-1]  # after datasets' progress lines: the check needs the rows read
    assert status == 2 and "Traceback" not in err and not (tmp_path / "out" / "model.safetensors").exists(), err
    assert last.startswith(
        f"finetune.py: error: --train_file {str(train)!r}, row 4: 3 words in 'tokens' and 2 tags in 'tags': give one "
        "tag per word."
    ), last


def test_a_folder_without_config_json_is_a_model_folder_only_in_sentence_transformers_layout(tmp_path):
    """A folder of something else is not a model folder; one of sentence-transformers' old layout (modules.json, the
    transformer in a folder of its own, no config.json beside it) is, as `SentenceTransformer` loads it."""
    from sinusoidal_encoder_training.cli.command_line import local_damage

    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    assert local_damage(str(other), "model").startswith("the folder has no config.json: it is not a model folder")
    layout = tmp_path / "sentence-transformers"
    (layout / "0_Transformer").mkdir(parents=True)
    (layout / "modules.json").write_text("[]")
    assert local_damage(str(layout), "model") is None


def tokenizer_without(folder, token: str):
    """The shipped tokenizer saved into `folder` without its `token` ("mask_token", "pad_token"), as a tokenizer
    made for another model (GPT-2's has neither)."""
    from transformers import AutoTokenizer

    from sinusoidal_encoder_training.data.pipeline import SHIPPED_TOKENIZER

    tokenizer = AutoTokenizer.from_pretrained(SHIPPED_TOKENIZER, **{token: None})
    tokenizer.save_pretrained(folder)
    return tokenizer


@pytest.mark.parametrize(
    ("name", "token"),
    [("pretrain", "mask_token"), ("evaluate", "mask_token"), ("fill_mask", "mask_token"), ("finetune", "pad_token")],
)
def test_a_tokenizer_without_the_token_a_run_needs_is_one_line_before_any_work(
    tmp_path, tokenizer, monkeypatch, capsys, name, token
):
    """A masked-LM run masks with the tokenizer's mask token, fine-tuning pads with its pad token: without one, the
    run ended in a traceback from the collator (`torch.where(..., None, ...)`, numpy's `full(..., None)`) once the
    data was read, after writing its log."""
    from sinusoidal_encoder_training.stages import evaluate, fill_mask, finetuning, pretraining

    train, validation = write_text_corpus(tmp_path / "corpus", n_train=4, n_validation=2)
    data = ["--train_file", train, "--validation_file", validation]
    model = model_folder(tmp_path, tokenizer)
    if name == "fill_mask":
        tokenizer_without(model, token)
        status, _, err = run_command(fill_mask.main, "fill_mask.py", [model, "A [MASK] test."], monkeypatch, capsys)
        assert status == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err[-3000:]
        assert f"the tokenizer of MODEL {str(model)!r} has no mask token (tokenizer.mask_token is None)" in err, err
        return
    if name == "finetune":
        tokenizer_without(model, token)
        rows = tmp_path / "rows.jsonl"
        rows.write_text("".join(json.dumps({"text": t, "label": t[0]}) + "\n" for t in ["a b", "c d"] * 4))
        argv = ["--model_name_or_path", model, "--train_file", rows, "--output_dir", tmp_path / "out"]
        main, program, said = finetuning.main, "finetune.py", f"the tokenizer of --model_name_or_path {str(model)!r}"
    else:
        tokenizer_without(tmp_path / "tokenizer", token)
        argv = [*data, "--tokenizer_name", tmp_path / "tokenizer"]
        if name == "pretrain":
            main, program = pretraining.main, "pretrain.py"
            argv += ["--output_dir", tmp_path / "out", "--max_train_steps", "1"]
        else:
            main, program = evaluate.main, "evaluate.py"
            argv = [model, *argv]
        said = f"--tokenizer_name {str(tmp_path / 'tokenizer')!r}"
    status, _, err = run_command(
        main, program, [*argv, "--max_seq_length" if name != "finetune" else "--max_length", "16"], monkeypatch, capsys
    )
    assert status == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err[-3000:]
    assert f"{said} has no {token.removesuffix('_token')} token (tokenizer.{token} is None)" in err, err
    assert not (tmp_path / "out").exists()


def test_continued_pretraining_reads_with_the_models_own_tokenizer(tmp_path, tokenizer):
    """Continuing a model (--model_name_or_path) without --tokenizer_name: the model's own tokenizer, as fine-tuning
    takes it (the shipped one was taken, whose ids a model trained with another tokenizer of the same size read as
    other tokens, without a word)."""
    from sinusoidal_encoder_training.configs import PretrainingConfig
    from sinusoidal_encoder_training.stages.pretraining import load_tokenizer

    model = model_folder(tmp_path, tokenizer)
    config = PretrainingConfig(output_dir=str(tmp_path / "out"), model_name_or_path=str(model))
    assert load_tokenizer(config).name_or_path == str(model)
    assert "the shipped tokenizer" not in " ".join(config.read_paths())


def test_a_dataset_folder_that_fails_to_load_says_why_in_one_line(tmp_path, monkeypatch, capsys):
    """`datasets` wraps what failed in a `DatasetGenerationError` that says nothing ("An error occurred while
    generating the dataset"): the line adds its cause, and for a local folder that every data file under it is
    read (here a run's metrics in a subfolder, as runs written inside the folder by earlier versions left)."""
    from sinusoidal_encoder_training.stages import pretraining

    data = tmp_path / "data"
    (data / "part").mkdir(parents=True)
    jsonl(data / "part" / "a.jsonl", GOOD)
    jsonl(data / "part" / "b.jsonl", GOOD)
    (data / "run").mkdir()
    jsonl(data / "run" / "metrics.jsonl", [{"step": 1, "loss": 2.5}, {"step": 2, "loss": 2.0}] * 3)
    argv = ["--dataset_name", data, "--output_dir", tmp_path / "out", "--max_train_steps", "1"]
    status, _, err = run_command(pretraining.main, "pretrain.py", argv, monkeypatch, capsys)
    lines = [line for line in err.strip().splitlines() if "Generating train split" not in line]  # datasets' bar
    assert status == 2 and len(lines) == 1 and "Traceback" not in err, err[-3000:]
    assert "DatasetGenerationError" in err and "(CastError: " in err, err
    assert "A local folder is loaded with every data file under it, subfolders too" in err, err
    assert not (tmp_path / "out").exists()
