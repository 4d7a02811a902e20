"""Nothing half-written is ever picked up (`atomic`): what a command writes is renamed into place once whole; a
command killed while writing (SIGKILL) leaves only temporaries, which the next run of a command on the folder
removes, and `publish` refuses a folder holding any, or one a live run is writing (its lock held)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
from conftest import env, exported_folder, folder_digest, run_command, tiny_pretraining, write_text_corpus

from sinusoidal_encoder_training.runs import atomic


def killed_while_writing(folder) -> None:
    """A process that writes a new model.safetensors into `folder` through `atomic.staged` and is killed (SIGKILL)
    before the block ends."""
    script = textwrap.dedent(
        f"""
        import os, signal
        from sinusoidal_encoder_training.runs.atomic import staged
        with staged({str(folder)!r}) as temporary:
            with open(os.path.join(temporary, "model.safetensors"), "wb") as handle:
                handle.write(b"half of the new weights")
            os.kill(os.getpid(), signal.SIGKILL)
        """
    )
    proc = subprocess.run([sys.executable, "-c", script], env=env(), capture_output=True, text=True)
    assert proc.returncode == -9, proc.stderr


def test_a_write_killed_midway_leaves_the_folder_as_it_was_and_a_leftover_the_next_run_removes(tmp_path):
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "model.safetensors").write_bytes(b"the old weights")
    killed_while_writing(folder)
    assert (folder / "model.safetensors").read_bytes() == b"the old weights"
    (leftover,) = atomic.leftovers(str(folder))
    assert leftover.startswith(str(folder / atomic.MARK))
    lines = []
    assert atomic.clean_leftovers(str(folder), report=lines.append) == [leftover]
    assert len(lines) == 1 and "removed what a killed run left half-written" in lines[0]
    assert sorted(p.name for p in folder.iterdir()) == ["model.safetensors"]


def test_staged_moves_what_was_written_or_nothing(tmp_path):
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "model.onnx.data").write_bytes(b"the weights of an earlier, larger export")
    with atomic.staged(str(folder), replaces=("model.onnx.data",)) as temporary:
        assert atomic.temporaries(str(folder)) == [temporary]  # a live writer's: not a leftover
        assert atomic.leftovers(str(folder)) == []
        (tmp_path / "folder" / temporary).joinpath("model.onnx").write_bytes(b"graph and weights")
    assert sorted(p.name for p in folder.iterdir()) == ["model.onnx"]  # the stale companion is gone
    before = folder_digest(folder)
    with pytest.raises(OSError), atomic.staged(str(folder)) as temporary:
        (tmp_path / "folder" / temporary).joinpath("model.onnx").write_bytes(b"half")
        raise OSError("disk full")
    assert folder_digest(folder) == before and atomic.temporaries(str(folder)) == []


def test_publish_refuses_half_written_files_naming_them(tmp_path, tokenizer, monkeypatch, capsys):
    from sinusoidal_encoder_training.publishing import hub

    folder = exported_folder(tmp_path, tokenizer, "fill-mask")
    killed_while_writing(folder)
    argv = [folder, "--hub_model_id", "me/model", "--dry_run"]
    status, _, err = run_command(hub.main, "publish.py", argv, monkeypatch, capsys)
    assert status == 2 and len(err.strip().splitlines()) == 1, err
    assert "holds half-written files (.incomplete-" in err and "model.safetensors)" in err


def test_publish_refuses_a_folder_a_live_run_is_writing_naming_the_process(tmp_path, tokenizer, monkeypatch, capsys):
    from sinusoidal_encoder_training.publishing import hub

    folder = exported_folder(tmp_path, tokenizer, "fill-mask")
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\nfrom sinusoidal_encoder_training.runs.run_folder import take_lock\n"
            f"take_lock({str(folder)!r}); print('held', flush=True); time.sleep(60)",
        ],
        env=env(),
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        argv = [folder, "--hub_model_id", "me/model", "--dry_run"]
        status, _, err = run_command(hub.main, "publish.py", argv, monkeypatch, capsys)
        assert status == 2 and len(err.strip().splitlines()) == 1, err
        assert f"is being written by a run (process {holder.pid} on " in err
    finally:
        holder.kill()
        holder.wait()
    status, _, err = run_command(hub.main, "publish.py", argv, monkeypatch, capsys)
    assert status == 0, err  # the lock of a process that ended blocks nothing


def test_the_next_training_run_removes_what_a_killed_one_left(tmp_path):
    """A pretraining run killed while saving a checkpoint (its `.incomplete-step_N`) and while moving its model into
    place: the rerun on the folder says it removes both, and trains."""
    from sinusoidal_encoder_training.runs.checkpoints import checkpoints_dir
    from sinusoidal_encoder_training.runs.run_folder import run_settings, write_run
    from sinusoidal_encoder_training.stages.pretraining import MaskedLMTask, pretrain

    corpus = write_text_corpus(tmp_path / "corpus", n_train=20, n_validation=6)
    out = tmp_path / "out"
    config = tiny_pretraining(corpus, out, max_train_steps=1)
    write_run(checkpoints_dir(str(out)), run_settings(config, MaskedLMTask.name, 1, "no"))  # the killed run's record
    (out / "checkpoints" / ".incomplete-step_4").mkdir()
    killed_while_writing(out)
    assert len(atomic.leftovers(str(out))) == 2
    pretrain(config)
    assert atomic.temporaries(str(out)) == []


def test_the_next_tokenizer_training_removes_what_a_killed_one_left(tmp_path, monkeypatch, capsys):
    from sinusoidal_encoder_training.stages import tokenizer_training

    train, _ = write_text_corpus(tmp_path / "corpus", n_train=20, n_validation=6)
    out = tmp_path / "tokenizer"
    out.mkdir()
    killed_while_writing(out)
    argv = ["--train_file", train, "--output_dir", out, "--vocab_size", "300"]
    status, printed, err = run_command(tokenizer_training.main, "train_tokenizer.py", argv, monkeypatch, capsys)
    assert status == 0, err
    assert "removed what a killed run left half-written" in printed
    assert atomic.temporaries(str(out)) == [] and (out / "tokenizer.json").is_file()


def test_the_next_export_removes_what_a_killed_one_left_and_replaces_an_export_whole(
    tmp_path, tokenizer, monkeypatch, capsys
):
    from sinusoidal_encoder_training.publishing import onnx_export

    folder = exported_folder(tmp_path, tokenizer, "fill-mask")
    (folder / "model.onnx.data").write_bytes(b"the weights of an earlier export")
    killed_while_writing(folder)
    argv = [folder, "--overwrite", "--no_check"]
    status, printed, err = run_command(onnx_export.main, "export_onnx.py", argv, monkeypatch, capsys)
    assert status == 0, err
    assert "removed what a killed run left half-written" in printed
    assert atomic.temporaries(str(folder)) == [] and (folder / "model.onnx").is_file()
    stale = folder / "model.onnx.data"  # replaced by this export's weights, or removed if it wrote none
    assert not stale.exists() or stale.read_bytes() != b"the weights of an earlier export"


def test_a_metrics_line_cut_short_by_a_kill_is_dropped_on_resume(tmp_path):
    """The log's last line, cut short by a kill while it was appended, is not JSON: the resume drops it (with the
    lines after its checkpoint) instead of failing to parse it."""
    from types import SimpleNamespace

    from sinusoidal_encoder_training.runs.metrics_log import MetricsLog, read_metrics

    log = tmp_path / "metrics.jsonl"
    log.write_text('{"step": 1, "train_loss": 9.0}\n{"step": 2, "train_loss": 8.0}\n{"step": 3, "train_lo')
    assert [record["step"] for record in read_metrics(str(tmp_path))] == [1, 2]
    MetricsLog(SimpleNamespace(is_main_process=True), str(tmp_path), resumed_step=2, tracking=False)
    assert log.read_text() == '{"step": 1, "train_loss": 9.0}\n{"step": 2, "train_loss": 8.0}\n'
    assert atomic.temporaries(str(tmp_path)) == []
