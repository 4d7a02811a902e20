"""The machine's faults are one line too (`command_line.front`): an unwritable or missing datasets cache is refused
before any work (`data_files.check_datasets_cache`); a disk that fills or turns read-only while a command writes,
memory running out, a data worker the system kills, an interrupt while the data is prepared: each one sentence saying
what and what to do, with nothing that blocks the rerun."""

from __future__ import annotations

import errno
import json

import pytest
from conftest import exported_folder, pretrain_cmd, run_command, write_text_corpus

from sinusoidal_encoder_training.runs import atomic


@pytest.fixture
def corpus(tmp_path):
    return write_text_corpus(tmp_path / "corpus", n_train=20, n_validation=6)


def one_line(status, err, expected_status=2) -> str:
    lines = err.strip().splitlines()
    assert status == expected_status and len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def pretrain_argv(corpus, out):
    return [str(arg) for arg in pretrain_cmd(corpus, out, "--max_train_steps", "1")[2:]]


@pytest.mark.parametrize("cache", ["/proc/no-such-cache", "FILE"])
@pytest.mark.parametrize("name", ["pretrain", "finetune", "train_tokenizer", "distill"])
def test_a_datasets_cache_that_cannot_be_written_is_refused_before_any_work(
    name, cache, corpus, tmp_path, tokenizer, monkeypatch, capsys
):
    from sinusoidal_encoder_training.stages import distillation, finetuning, pretraining, tokenizer_training

    if cache == "FILE":
        (tmp_path / "a-file").write_text("")
        cache = str(tmp_path / "a-file" / "datasets")
    monkeypatch.setenv("HF_DATASETS_CACHE", cache)
    out = tmp_path / "out"
    model = exported_folder(tmp_path, tokenizer, "fill-mask")
    train = corpus[0]
    main, argv = {
        "pretrain": (pretraining.main, pretrain_argv(corpus, out)),
        "finetune": (finetuning.main, ["--model_name_or_path", model, "--output_dir", out]),
        "train_tokenizer": (tokenizer_training.main, ["--train_file", train, "--output_dir", out]),
        "distill": (distillation.main, [model, "--train_file", train, "--output_dir", out]),
    }[name]
    line = one_line(*run_command(main, f"{name}.py", argv, monkeypatch, capsys)[::2])
    assert f"error: datasets' cache {cache} cannot be written (" in line
    assert "point HF_DATASETS_CACHE (or HF_HOME) at a folder with room" in line
    assert not out.exists()


def test_an_interrupt_while_the_data_is_prepared_is_a_sentence_and_the_rerun_starts(
    corpus, tmp_path, monkeypatch, capsys
):
    from sinusoidal_encoder_training.stages import pretraining

    out = tmp_path / "out"
    real = pretraining.load_raw_datasets

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(pretraining, "load_raw_datasets", interrupted)
    status, _, err = run_command(pretraining.main, "pretrain.py", pretrain_argv(corpus, out), monkeypatch, capsys)
    line = one_line(status, err, expected_status=130)
    assert line.startswith("pretrain.py: interrupted (Ctrl-C or a signal) before the work was done;"), line
    assert line.endswith("run again starts over."), line
    monkeypatch.setattr(pretraining, "load_raw_datasets", real)
    status, _, err = run_command(pretraining.main, "pretrain.py", pretrain_argv(corpus, out), monkeypatch, capsys)
    assert status == 0, err
    assert (out / "config.json").is_file()


@pytest.mark.parametrize(
    ("fault", "expected"),
    [
        (
            OSError(errno.ENOSPC, "No space left on device", "/cache/huggingface/datasets/x.arrow"),
            "cannot write /cache/huggingface/datasets/x.arrow (No space left on device): point HF_HOME, "
            "HF_DATASETS_CACHE at a folder with room",
        ),
        (
            OSError(errno.EROFS, "Read-only file system", "/mnt/out/model.onnx"),
            "cannot write /mnt/out/model.onnx (Read-only file system): free space on that disk, or choose a folder",
        ),
        (
            PermissionError(errno.EACCES, "Permission denied", "/srv/shared/model.safetensors"),
            "cannot access /srv/shared/model.safetensors (Permission denied): give this user access to it",
        ),
        (MemoryError(), "this machine ran out of memory (MemoryError)"),
        (
            RuntimeError("DataLoader worker (pid 4242) is killed by signal: Killed. "),
            "DataLoader worker (pid 4242) is killed by signal: Killed (the system ends a process this way when memory "
            "runs out while batches are built): pass a smaller --dataloader_num_workers",
        ),
    ],
)
def test_a_fault_of_the_machine_while_writing_is_one_line_and_leaves_nothing_half_written(
    fault, expected, tmp_path, tokenizer, monkeypatch, capsys
):
    from sinusoidal_encoder_training.publishing import onnx_export

    folder = exported_folder(tmp_path, tokenizer, "fill-mask")

    def failing(model, path, *args, **kwargs):
        with open(path, "wb") as handle:
            handle.write(b"the first half of a graph")
        raise fault

    monkeypatch.setattr(onnx_export, "export_onnx", failing)
    line = one_line(*run_command(onnx_export.main, "export_onnx.py", [folder], monkeypatch, capsys)[::2])
    assert expected in line, line
    assert atomic.temporaries(str(folder)) == [] and not (folder / "model.onnx").exists()


def test_other_errors_keep_their_traceback(tmp_path, tokenizer, monkeypatch, capsys):
    """A bug is not the machine's fault: an `OSError` of another kind, or another `RuntimeError`, is not hidden."""
    from sinusoidal_encoder_training.publishing import onnx_export

    folder = exported_folder(tmp_path, tokenizer, "fill-mask")
    for error in (OSError(errno.EBADF, "Bad file descriptor"), RuntimeError("shape mismatch")):

        def failing(*args, error=error, **kwargs):
            raise error

        monkeypatch.setattr(onnx_export, "export_onnx", failing)
        with pytest.raises(type(error)):
            run_command(onnx_export.main, "export_onnx.py", [folder], monkeypatch, capsys)
    assert json.loads((folder / "config.json").read_text())["model_type"] == "sinusoidal_encoder"
