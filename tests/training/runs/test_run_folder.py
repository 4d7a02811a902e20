"""The output folder is the user's (run_folder.py): a folder holding anything but this run's files is refused before
any work unless `--overwrite_output_dir` empties it; a resume is the same run or refused, naming every setting that
differs; one run writes a folder at a time (SIGTERM, which ends training like Ctrl-C:
tests/training/stages/test_pretraining.py)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys

import pytest
from conftest import (
    env,
    folder_digest,
    metrics,
    pretrain_cmd,
    run_command,
    tiny_pretraining,
    write_text_corpus,
)

from sinusoidal_encoder_training.cli.command_line import UsageError
from sinusoidal_encoder_training.runs.atomic import temporaries
from sinusoidal_encoder_training.runs.run_folder import MAY_CHANGE, release_lock, settings_differences, take_lock


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return write_text_corpus(tmp_path_factory.mktemp("corpus"), n_train=25, n_validation=6)


def one_line(status: int, stderr: str) -> str:
    """The one line (status 2, no traceback) a refused command writes."""
    lines = stderr.strip().splitlines()
    assert status == 2 and len(lines) == 1 and "Traceback" not in stderr, stderr[-3000:]
    return lines[0]


def one_line_error(proc: subprocess.CompletedProcess) -> str:
    return one_line(proc.returncode, proc.stderr)


def finetune_cmd(model_dir, output_dir, *extra):
    """The built-in fine-tuning task on a model folder, a few steps."""
    from conftest import REPO

    return [
        sys.executable,
        str(REPO / "training" / "finetune.py"),
        "--model_name_or_path",
        str(model_dir),
        "--output_dir",
        str(output_dir),
        "--max_train_steps",
        "2",
        "--max_length",
        "32",
        *extra,
    ]


def test_a_folder_with_other_files_is_refused_before_any_work_and_left_as_it_was(tmp_path, corpus):
    """A fine-tuned classifier's folder with a user's file: pretraining into it is refused in one line naming its
    files and the way to overwrite; nothing in it changes."""
    from sinusoidal_encoder_training.stages.pretraining import pretrain

    folder = tmp_path / "classifier"
    folder.mkdir()
    for name in ("model.safetensors", "config.json", "eval_results.json", "my_notes.txt"):
        (folder / name).write_text("{}")
    before = folder_digest(folder)
    with pytest.raises(UsageError, match="already holds files that are not this run's") as error:
        pretrain(tiny_pretraining(corpus, folder, max_train_steps=2))
    assert "config.json, eval_results.json, model.safetensors, my_notes.txt" in str(error.value)
    assert "--overwrite_output_dir" in str(error.value)
    assert folder_digest(folder) == before
    file = tmp_path / "a-file"
    file.write_text("")
    with pytest.raises(UsageError, match="is a file, not a folder"):
        pretrain(tiny_pretraining(corpus, file, max_train_steps=2))


@pytest.mark.slow
def test_overwrite_empties_the_folder_and_a_finished_run_is_not_started_again_by_accident(
    tmp_path, corpus, monkeypatch, capsys
):
    """(The command runs in-process: `run_command`.)"""
    from sinusoidal_encoder_training.stages import pretraining

    def pretrain(*argv):
        return run_command(
            pretraining.main, "pretrain.py", pretrain_cmd(corpus, folder, *argv)[2:], monkeypatch, capsys
        )

    folder = tmp_path / "out"
    folder.mkdir()
    (folder / "eval_results.json").write_text("{}")  # a classifier's results, stale for the new model
    status, _, err = pretrain("--max_train_steps", "2", "--overwrite_output_dir")
    assert status == 0, err[-3000:]
    assert not (folder / "eval_results.json").exists() and (folder / "model.safetensors").exists()
    line = one_line(*pretrain("--max_train_steps", "2")[::2])
    assert "holds a pretraining run: pass --resume_from_checkpoint latest to continue it" in line


@pytest.mark.slow
def test_a_resume_with_other_settings_is_refused_naming_every_difference(tmp_path, corpus, monkeypatch, capsys):
    """A run checkpointed at step 2; resumed with another batch size and sequence length: one line naming both
    (the old and the new value) before the data is read; resumed with more steps (a setting a resume may change):
    it continues from step 2. Fine-tuning never resumes the pretraining folder. (The commands run in-process.)"""
    from sinusoidal_encoder_training.stages import finetuning, pretraining

    def pretrain(*argv):
        return run_command(
            pretraining.main, "pretrain.py", pretrain_cmd(corpus, folder, *argv)[2:], monkeypatch, capsys
        )

    folder = tmp_path / "out"
    common = ("--checkpointing_steps", "2", "--config_overrides", "hidden_size=32,num_hidden_layers=2")
    assert pretrain("--max_train_steps", "2", *common)[0] == 0
    assert json.loads((folder / "checkpoints" / "step_2" / "run.json").read_text())["stage"] == "pretraining"
    status, out, err = pretrain(
        *common,
        "--max_train_steps",
        "4",
        "--per_device_train_batch_size",
        "4",
        "--max_seq_length",
        "64",
        "--resume_from_checkpoint",
        "latest",
    )
    line = one_line(status, err)
    assert "checkpoints/step_2 was written by a run with other settings" in line
    assert "--max_seq_length 32 (now 64)" in line and "--per_device_train_batch_size 8 (now 4)" in line
    assert "--max_train_steps" not in line  # a resume may train further
    assert "Running training" not in out
    status, out, _ = pretrain(*common, "--max_train_steps", "4", "--resume_from_checkpoint", "latest")
    assert status == 0 and "Resuming from" in out
    assert [m["step"] for m in metrics(folder) if "train_loss" in m] == [1, 2, 3, 4]
    # fine-tuning into the pretraining folder
    argv = finetune_cmd(folder, folder, "--resume_from_checkpoint", "latest")[2:]
    status, _, err = run_command(finetuning.main, "finetune.py", argv, monkeypatch, capsys)
    assert "holds a pretraining run; this is fine-tuning" in one_line(status, err)


def test_settings_a_resume_may_change_are_not_differences():
    recorded = {"stage": "pretraining", "settings": {"learning_rate": 1e-3, "max_train_steps": 10, "processes": 1}}
    current = {"stage": "pretraining", "settings": {"learning_rate": 2e-3, "max_train_steps": 20, "processes": 2}}
    assert settings_differences(recorded, current) == ["--learning_rate 0.001 (now 0.002)", "processes 1 (now 2)"]
    assert {
        "max_train_steps",
        "eval_steps",
        "checkpointing_steps",
        "output_dir",
        "early_stopping_patience",
    } <= MAY_CHANGE
    assert not {"seed", "per_device_train_batch_size", "learning_rate", "config_overrides"} & MAY_CHANGE
    assert not {"load_best_model_at_end", "metric_for_best_model"} & MAY_CHANGE  # the best so far is by them


def test_a_flag_added_since_a_run_was_recorded_differs_only_when_it_is_on():
    """A checkpoint of an earlier version resumes: a setting its record lacks ran as though off (flags are added
    off); turned on now, it is a difference."""
    recorded = {"stage": "fine-tuning", "settings": {"seed": 42}}
    off = {"stage": "fine-tuning", "settings": {"seed": 42, "load_best_model_at_end": False, "metric_name": None}}
    on = {"stage": "fine-tuning", "settings": {"seed": 42, "load_best_model_at_end": True}}
    assert settings_differences(recorded, off) == []
    assert settings_differences(recorded, on) == ["--load_best_model_at_end unset (now True)"]
    assert settings_differences(on, recorded) == ["--load_best_model_at_end True (now unset)"]


def test_one_writer_a_folder_at_a_time_and_a_dead_runs_lock_is_taken_over(tmp_path):
    folder = tmp_path / "out"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from sinusoidal_encoder_training.runs.run_folder import take_lock; "
            f"assert take_lock({str(folder)!r}) is None; print('locked', flush=True); time.sleep(60)",
        ],
        stdout=subprocess.PIPE,
        text=True,
        env=env(),
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        problem = take_lock(str(folder))
        assert problem is not None and f"is in use by another run (process {holder.pid} on" in problem
    finally:
        holder.kill()
        holder.wait()
    said = []
    assert take_lock(str(folder), report=said.append) is None  # the lock died with its process
    assert said == [
        f"Taking over the lock of {folder} from process {holder.pid} on {socket.gethostname()}, which ended "
        "without releasing it"
    ]
    release_lock(str(folder))  # as at the end of a run
    assert take_lock(str(folder), report=said.append) is None and len(said) == 1  # nothing to take over
    release_lock(str(folder))


def test_a_killed_runs_lock_is_free_while_the_workers_it_forked_live_on(tmp_path):
    """A run killed while its DataLoader workers (forked processes, which keep its open files) still live: the folder
    is free at once, not when they notice (seconds later). Asked by another process, and by the holder itself."""
    import os
    import signal

    from sinusoidal_encoder_training.runs.run_folder import lock_holder

    folder = tmp_path / "out"
    script = (
        "import os, signal, time; from sinusoidal_encoder_training.runs.run_folder import take_lock\n"
        f"assert take_lock({str(folder)!r}) is None\n"
        "worker = os.fork()\n"
        "if worker == 0:\n    time.sleep(60)\n    os._exit(0)\n"
        "print(worker, flush=True)\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    killed = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, env=env())
    worker = int(killed.stdout.readline())
    assert killed.wait(timeout=60) == -signal.SIGKILL
    killed.stdout.close()
    try:
        os.kill(worker, 0)  # the worker lives on, the killed run's lock file open
        assert lock_holder(str(folder)) is None
        assert take_lock(str(folder), report=lambda line: None) is None
        assert lock_holder(str(folder)) == f"process {os.getpid()} on {socket.gethostname()}"
        assert take_lock(str(folder)) is None  # still held: asking did not give it back
    finally:
        os.kill(worker, signal.SIGKILL)
        release_lock(str(folder))


@pytest.mark.slow
def test_machines_of_a_launch_that_formed_no_group_stop_before_training(tmp_path, corpus):
    """`accelerate launch --cpu --num_machines 2` starts each machine's script as one plain process: alone, it would
    train to the end and write the folder the other machine writes. Stopped in one line, before any work."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    launcher = (sys.executable, "-m", "accelerate.commands.accelerate_cli", "launch", "--cpu", "--num_machines", "2")
    launcher += ("--num_processes", "2", "--machine_rank", "0", "--main_process_ip", "127.0.0.1")
    launcher += ("--main_process_port", str(port), "--mixed_precision", "no", "--dynamo_backend", "no")
    proc = subprocess.run(
        pretrain_cmd(corpus, tmp_path / "out", "--max_train_steps", "2", launcher=launcher),
        capture_output=True,
        text=True,
        env=env(),
        timeout=300,
    )
    assert proc.returncode != 0 and "Running training" not in proc.stdout
    assert "this process runs alone (no process group" in proc.stderr
    assert not (tmp_path / "out" / "model.safetensors").exists()


def test_a_run_the_disk_cannot_hold_stops_before_training(tmp_path, corpus, monkeypatch):
    """The checkpoints a run keeps and its model, estimated before the first step against the disk's free space; with
    `--overwrite_output_dir`, before the folder is emptied, the space of its files counted as free."""
    import shutil

    from sinusoidal_encoder_training.stages.pretraining import pretrain

    usage, real = shutil.disk_usage(tmp_path), shutil.disk_usage
    full = lambda path: usage._replace(free=1_000_000) if str(path).startswith(str(tmp_path)) else real(path)  # noqa: E731
    monkeypatch.setattr(shutil, "disk_usage", full)  # the output's disk; datasets' cache has room
    config = tiny_pretraining(corpus, tmp_path / "out", max_train_steps=4, checkpointing_steps=1)
    with pytest.raises(UsageError, match=r"has 0.00 GB free, and this run writes about 0.0\d GB \(4 checkpoint"):
        pretrain(config)
    assert not list((tmp_path / "out" / "checkpoints").glob("step_*"))
    # --overwrite_output_dir: checked before the folder is emptied (refused: left as it was), its files' space free
    old = tmp_path / "old"
    old.mkdir()
    (old / "notes.txt").write_text("mine")
    config = tiny_pretraining(corpus, old, max_train_steps=4, checkpointing_steps=1, overwrite_output_dir=True)
    with pytest.raises(UsageError, match=r"has 0.00 GB free"):
        pretrain(config)
    assert (old / "notes.txt").read_text() == "mine"
    with open(old / "model.safetensors", "wb") as handle:  # an old model of 1 GB (sparse): room enough, once emptied
        handle.truncate(10**9)
    pretrain(config)
    assert sorted(path.name for path in old.glob("*.txt")) == [] and not (old / "model.safetensors").exists()


def test_a_failed_final_save_leaves_nothing_half_written_and_says_how_to_save_again(tmp_path, corpus, monkeypatch):
    """A disk that fills at the final save: no half-written folder, one line naming the newest checkpoint and the
    resume that saves the model; that resume then saves it."""
    import errno

    from sinusoidal_encoder_training.publishing import export as export_module
    from sinusoidal_encoder_training.stages.pretraining import export, pretrain

    out = tmp_path / "out"
    config = tiny_pretraining(corpus, out, max_train_steps=4, checkpointing_steps=2)
    result = pretrain(config)
    real = export_module.save_tokenizer

    def full_disk(tokenizer, folder, *args):
        real(tokenizer, folder, *args)
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(export_module, "save_tokenizer", full_disk)
    with pytest.raises(UsageError) as error:
        export(config, result)
    message = str(error.value)
    assert "failed (OSError: [Errno 28] No space left on device)" in message, message
    assert f"the newest checkpoint is {out / 'checkpoints' / 'step_4'}" in message
    assert "--resume_from_checkpoint latest" in message
    assert not (out / "model.safetensors").exists() and temporaries(str(out)) == []
    monkeypatch.setattr(export_module, "save_tokenizer", real)
    resumed = tiny_pretraining(corpus, out, max_train_steps=4, checkpointing_steps=2, resume_from_checkpoint="latest")
    export(resumed, pretrain(resumed))
    assert (out / "model.safetensors").exists() and (out / "tokenizer.json").exists()


def test_an_unwritable_folder_is_refused_before_any_work(tmp_path, corpus, monkeypatch):
    """A folder the user cannot write to (os.access: permissions, a read-only mount), a path under a file, and a
    write that fails all the same (a full or read-only disk found by the first file): one line each, nothing left
    locked. (Permission bits cannot be tried as root, who may write anyway: os.access answers as the kernel would.)"""
    import errno
    import os

    from sinusoidal_encoder_training.runs import run_folder
    from sinusoidal_encoder_training.stages.pretraining import pretrain

    file = tmp_path / "a-file"
    file.write_text("")
    with pytest.raises(UsageError, match=f"{file} is a file, not a folder: choose a folder"):
        pretrain(tiny_pretraining(corpus, file / "out", max_train_steps=2))

    folder = tmp_path / "read-only"
    folder.mkdir()
    real_access = os.access
    monkeypatch.setattr(
        os, "access", lambda path, mode: False if str(path) == str(folder) else real_access(path, mode)
    )
    with pytest.raises(UsageError, match=f"{folder} is not writable: choose a folder you can write to"):
        pretrain(tiny_pretraining(corpus, folder / "out", max_train_steps=2))
    assert list(folder.iterdir()) == []
    monkeypatch.undo()

    def full_disk(folder, run):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), os.path.join(folder, run_folder.RUN_FILE))

    monkeypatch.setattr(run_folder, "write_run", full_disk)
    out = tmp_path / "out"
    with pytest.raises(UsageError) as error:
        pretrain(tiny_pretraining(corpus, out, max_train_steps=2))
    assert str(error.value) == (
        f"--output_dir {out}: cannot write {out / 'checkpoints' / 'run.json'} (No space left on device): choose a "
        "folder you can write to."
    )
    assert str(out) not in run_folder._held_locks


@pytest.mark.parametrize("holds", ["a finished run", "the user's files"])
def test_overwrite_empties_nothing_when_the_run_stops_on_bad_data(holds, tmp_path, corpus, pretrained):
    """`--overwrite_output_dir` empties the folder only once the run's data and model are ready: a run that stops on
    bad data (a validation file without one block, a batch larger than the data, training labels of one class)
    leaves the folder as it was, a finished run's model and the user's own files alike, and no lock of its own
    behind as it stops."""
    from accelerate.state import AcceleratorState

    from sinusoidal_encoder_training.configs import FinetuningConfig
    from sinusoidal_encoder_training.runs import run_folder
    from sinusoidal_encoder_training.stages import finetuning
    from sinusoidal_encoder_training.stages.pretraining import pretrain

    folder = tmp_path / "out"
    folder.mkdir()
    (folder / "notes.txt").write_text("mine")
    if holds == "a finished run":
        (folder / "model.safetensors").write_bytes(b"weights")
        (folder / "checkpoints" / "step_2").mkdir(parents=True)
        (folder / "checkpoints" / "step_2" / "run.json").write_text("{}")
        (folder / "checkpoints" / ".lock").write_text("")  # as a run leaves it: released, empty
    before = folder_digest(folder)
    short = tmp_path / "short.txt"
    short.write_text("Too short for a block.\n")
    try:
        with pytest.raises(UsageError, match="The validation split holds no complete block"):
            pretrain(tiny_pretraining(corpus, folder, validation_file=str(short), overwrite_output_dir=True))
        AcceleratorState._reset_state(reset_partial_state=True)
        fewer = r"^One epoch of \d+ training examples holds 0 batch\(es\) of --per_device_train_batch_size=4096 "
        with pytest.raises(UsageError, match=fewer):
            pretrain(tiny_pretraining(corpus, folder, per_device_train_batch_size=4096, overwrite_output_dir=True))
        assert folder_digest(folder) == before  # each refused run gave the folder back as it stopped
        AcceleratorState._reset_state(reset_partial_state=True)
        one_class = tmp_path / "one_class.jsonl"
        one_class.write_text("".join(json.dumps({"text": f"text {i}", "label": "a"}) + "\n" for i in range(40)))
        config = FinetuningConfig(
            model_name_or_path=pretrained,
            train_file=str(one_class),
            output_dir=str(folder),
            overwrite_output_dir=True,
            max_train_steps=1,
        )
        with pytest.raises(UsageError, match="The training labels hold a single class"):
            finetuning.finetune(config)
    finally:
        run_folder.release_all_locks()  # as when the process ends
        AcceleratorState._reset_state(reset_partial_state=True)
    assert folder_digest(folder) == before
    assert (folder / "checkpoints").exists() == (holds == "a finished run")  # no lock of this run's left behind


@pytest.mark.parametrize("stage", ["pretraining", "fine-tuning"])
@pytest.mark.parametrize("where", ["a new folder in a new folder", "an empty folder"])
def test_a_run_stopped_by_bad_data_after_its_claim_leaves_the_disk_as_it_found_it(
    stage, where, tmp_path, corpus, pretrained
):
    """Bad data shows once the data is read, after the run claimed its folder (locked it, wrote its record): as the
    run stops, it gives the folder back (another run may take it at once) and takes back what its claim made, the
    folders on the way too; a folder that was there stays, empty."""
    from accelerate.state import AcceleratorState

    from sinusoidal_encoder_training.configs import FinetuningConfig
    from sinusoidal_encoder_training.runs import run_folder
    from sinusoidal_encoder_training.stages.finetuning import finetune
    from sinusoidal_encoder_training.stages.pretraining import pretrain

    out = tmp_path / "new" / "out" if where == "a new folder in a new folder" else tmp_path / "out"
    if where == "an empty folder":
        out.mkdir()
    data = tmp_path / ("data.txt" if stage == "pretraining" else "data.jsonl")
    try:
        if stage == "pretraining":
            data.write_text("Too short for a block.\n")
            with pytest.raises(UsageError, match="The validation split holds no complete block"):
                pretrain(tiny_pretraining(corpus, out, validation_file=str(data)))
        else:
            data.write_text("".join(json.dumps({"text": f"text {i}", "label": "a"}) + "\n" for i in range(40)))
            config = FinetuningConfig(model_name_or_path=pretrained, train_file=str(data), output_dir=str(out))
            with pytest.raises(UsageError, match="The training labels hold a single class"):
                finetune(config)
        assert str(out) not in run_folder._held_locks
    finally:
        run_folder.release_all_locks()
        AcceleratorState._reset_state(reset_partial_state=True)
    left = sorted(path.relative_to(tmp_path).as_posix() for path in tmp_path.rglob("*"))
    assert left == [data.name] + (["out"] if where == "an empty folder" else [])


@pytest.mark.parametrize("written", ["nothing", "its log", "a checkpoint"])
def test_what_a_stopped_run_wrote_keeps_its_record(written, tmp_path, corpus):
    """Only a claim the run wrote nothing beside is taken back: a run that logged before it stopped keeps its record
    (the next run starts it again without `--overwrite_output_dir`), a checkpoint keeps everything."""
    from types import SimpleNamespace

    from sinusoidal_encoder_training.runs import run_folder

    out = tmp_path / "out"
    accelerator = SimpleNamespace(is_main_process=True, num_processes=1, mixed_precision="no")
    run_folder.claim_output_folder(accelerator, tiny_pretraining(corpus, out), "pretraining")
    assert sorted(path.name for path in (out / "checkpoints").iterdir()) == [".lock", "run.json"]
    if written == "its log":
        (out / "metrics.jsonl").write_text("{}\n")
    elif written == "a checkpoint":
        (out / "checkpoints" / "step_1").mkdir()
    with pytest.raises(UsageError):
        with run_folder.given_back_if_stopped(accelerator, str(out)):
            raise UsageError("bad data")
    assert str(out) not in run_folder._held_locks and str(out) not in run_folder._made
    assert out.exists() == (written != "nothing")
    if written != "nothing":
        assert (out / "checkpoints" / "run.json").exists() and (out / "checkpoints" / ".lock").read_text() == ""
