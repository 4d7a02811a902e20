"""Several machines, rehearsed on one: the two `accelerate launch` command lines of docs/pretraining.md's "Several
machines" section (read from the page, so the page shows what is tested), one per "machine" (`--machine_rank` 0 and
1, node 0 at 127.0.0.1, gloo on the CPU), form one process group of two. They train the steps of one process of
twice the batch, and, both killed after a checkpoint and both resumed, end with the weights of the uninterrupted
run."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import torch
from conftest import REPO, TINY, assert_same_training, env, metrics, pretrain_cmd, write_text_corpus
from safetensors.torch import load_file
from test_docs import fenced_blocks

PAGE = REPO / "docs" / "pretraining.md"
SECTION = "### Several machines"
ACCELERATE = str(Path(sys.executable).with_name("accelerate"))
SCRIPT = "training/pretrain.py"
DEADLINE_S = 240  # a launch that outlives this fails the test (a rank waiting for its peer forever)


def rehearsal_commands() -> list[tuple[dict[str, str], list[str]]]:
    """The rehearsal block of the "Several machines" section (the block whose `not run` marker names this file), as
    one (environment assignments, words) pair per command: its `\\`-continued lines joined, comments, a trailing `&`
    and `wait` left out."""
    lines = PAGE.read_text(encoding="utf-8").splitlines()
    assert SECTION in lines, f"{PAGE.name} has no section {SECTION!r}"
    start = lines.index(SECTION)
    end = next((n for n in range(start + 1, len(lines)) if re.match(r"#{1,3} ", lines[n])), len(lines))
    blocks = [
        block
        for block in fenced_blocks(PAGE)
        if start < block.line <= end and block.skip_reason and Path(__file__).name in block.skip_reason
    ]
    assert len(blocks) == 1, f"{PAGE.name}: no single block in {SECTION!r} whose marker names {Path(__file__).name}"
    assert blocks[0].language == "bash"
    commands = []
    for line in blocks[0].code.replace("\\\n", " ").splitlines():
        words = shlex.split(line, comments=True)
        if words in ([], ["wait"]):
            continue
        if words[-1] == "&":
            words.pop()
        assignments = {}
        while re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", words[0]):
            name, value = words.pop(0).split("=", 1)
            assignments[name] = value
        commands.append((assignments, words))
    return commands


def value_of(words: list[str], flag: str) -> str:
    return words[words.index(flag) + 1]


def with_value(words: list[str], flag: str, value: str) -> list[str]:
    index = words.index(flag) + 1
    return [*words[:index], value, *words[index + 1 :]]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Machines:
    """The page's two launch commands, started as two "machines" (each launcher in a session of its own), with the
    flags of a run in place of `...` and a free port in place of the page's; each rank's output goes to
    `{log_prefix}-rank{R}.log`."""

    def __init__(self):
        self.procs: list[subprocess.Popen] = []
        self.logs: list[Path] = []
        self.seen: dict[int, psutil.Process] = {}  # the launchers and every descendant seen so far

    def start(self, corpus, output_dir: Path, log_prefix: Path, *flags: str) -> Machines:
        port = str(free_port())
        for assignments, words in rehearsal_commands():
            script = words.index(SCRIPT)
            launcher = [ACCELERATE, *with_value(words[1:script], "--main_process_port", port)]
            log = log_prefix.with_name(f"{log_prefix.name}-rank{value_of(words, '--machine_rank')}.log")
            self.logs.append(log)
            with log.open("w") as handle:
                self.procs.append(
                    subprocess.Popen(
                        pretrain_cmd(corpus, output_dir, *flags, launcher=launcher),
                        cwd=REPO,  # the page's paths are relative to the repository root
                        env=env(**assignments),
                        stdin=subprocess.DEVNULL,
                        stdout=handle,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                    )
                )
        return self

    def running(self) -> bool:
        """Whether a launcher still runs; remembers their descendants (to kill them even after their launcher)."""
        for proc in self.procs:
            try:
                launcher = psutil.Process(proc.pid)
                for process in (launcher, *launcher.children(recursive=True)):
                    self.seen.setdefault(process.pid, process)
            except psutil.NoSuchProcess:
                pass
        return any(proc.poll() is None for proc in self.procs)

    def output(self, rank: int) -> str:
        return self.logs[rank].read_text()

    def tails(self) -> str:
        return "".join(f"\n--- rank {rank} (end)\n{self.output(rank)[-3000:]}" for rank in range(len(self.logs)))

    def wait(self) -> None:
        """Until both end with status 0; a rank that fails, or outlives the deadline, fails the test."""
        deadline = time.monotonic() + DEADLINE_S
        while self.running():
            failed = [proc.returncode for proc in self.procs if proc.returncode not in (None, 0)]
            assert not failed, f"a machine failed with status {failed}" + self.tails()
            assert time.monotonic() < deadline, f"still running after {DEADLINE_S} s" + self.tails()
            time.sleep(0.1)
        assert all(proc.returncode == 0 for proc in self.procs), self.tails()

    def kill(self) -> None:
        """SIGKILL to every process of both machines, as when they lose power: each launcher's process group and the
        group of each of its descendants (torchrun starts the training process in a session of its own: killing the
        launcher alone would leave it training); returns once all are gone."""
        self.running()
        victims = [process for process in self.seen.values() if alive(process)]
        groups = set()
        for victim in victims:
            try:
                groups.add(os.getpgid(victim.pid))
            except ProcessLookupError:
                pass
        for group in groups - {os.getpgrp()}:
            try:
                os.killpg(group, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for proc in self.procs:
            proc.wait(timeout=60)
        deadline = time.monotonic() + 60
        while any(alive(victim) for victim in victims):
            assert time.monotonic() < deadline, "a killed process is still running"
            time.sleep(0.05)


def alive(process: psutil.Process) -> bool:
    """Running, and not a zombie (a killed process whose launcher died is reaped by init, maybe not at once)."""
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def weights(output_dir: Path) -> dict[str, torch.Tensor]:
    return load_file(str(output_dir / "model.safetensors"))


def checkpoint_steps(output_dir: Path) -> list[int]:
    return sorted(int(path.name.split("_")[1]) for path in (output_dir / "checkpoints").glob("step_*"))


def last_logged_step(output_dir: Path) -> int:
    """The newest step of a running run's metrics.jsonl (a line being written is not counted)."""
    path, step = output_dir / "metrics.jsonl", 0
    if path.exists():
        for line in path.read_text().splitlines():
            if line.endswith("}"):
                step = max(step, json.loads(line)["step"])
    return step


def test_the_page_shows_one_launch_per_machine_that_differ_only_in_the_rank():
    """The block that `test_two_machines_train_as_one_process_and_resume_after_a_kill` runs: two commands, `accelerate
    launch` of training/pretrain.py with the shipped multi-node configuration, machine ranks 0 and 1, one process
    each, node 0 on this machine, the CPU's backend."""
    commands = rehearsal_commands()
    assert len(commands) == 2
    (first_env, first), (second_env, second) = commands
    assert first_env == second_env == {"ACCELERATE_USE_CPU": "1"}
    assert [value_of(words, "--machine_rank") for _, words in commands] == ["0", "1"]
    assert with_value(first, "--machine_rank", "R") == with_value(second, "--machine_rank", "R")
    assert first[:2] == ["accelerate", "launch"] and first[first.index(SCRIPT) :] == [SCRIPT, "..."]
    assert value_of(first, "--config_file") == "training/accelerate_configs/multi_node.yaml"
    for flag, value in (("--num_machines", "2"), ("--num_processes", "2"), ("--main_process_ip", "127.0.0.1")):
        assert value_of(first, flag) == value, flag
    assert "--cpu" not in first  # with --cpu, accelerate starts each machine's script alone (no process group)


@pytest.mark.slow
def test_two_machines_train_as_one_process_and_resume_after_a_kill(tmp_path):
    """The page's two launches (per-device batch 4) form one group of two and give the train losses, learning rates
    and evaluation of one plain process of batch 8 (within 1e-4; the plain process is this one: its run trains
    in-process); both killed with SIGKILL after a checkpoint and resumed with `--resume_from_checkpoint latest`, they
    end with the weights and metrics of their uninterrupted run, bit for bit."""
    from sinusoidal_encoder_training.cli.arguments import parse_config
    from sinusoidal_encoder_training.configs import PretrainingConfig
    from sinusoidal_encoder_training.stages import pretraining

    # 266 training blocks (the 240 of 30 steps in one epoch) and 23 validation blocks: the last evaluation batch of
    # the two machines (4 + 4) is not full, so accelerate repeats a block there, and each must be counted once
    corpus = write_text_corpus(tmp_path / "corpus", n_train=12, n_validation=6)
    steps = 30
    common = (
        "--max_train_steps",
        str(steps),
        "--eval_steps",
        "15",
        "--checkpointing_steps",
        "5",
        "--config_overrides",
        TINY + ",hidden_dropout_prob=0.0,attention_probs_dropout_prob=0.0",  # dropout streams differ per process
    )
    per_device = ("--per_device_train_batch_size", "4", "--per_device_eval_batch_size", "4")
    started: list[Machines] = []

    def launch(output_dir: Path, log_prefix: str, *flags: str) -> Machines:
        started.append(Machines())
        return started[-1].start(corpus, output_dir, tmp_path / log_prefix, *common, *per_device, *flags)

    try:
        one = tmp_path / "one"
        plain = ("--per_device_train_batch_size", "8", "--per_device_eval_batch_size", "8")
        # the command line's settings, trained here (metrics.jsonl is all this run is for: no export)
        pretraining.pretrain(parse_config(PretrainingConfig, pretrain_cmd(corpus, one, *common, *plain)[2:]))

        two = tmp_path / "two"
        uninterrupted = launch(two, "two")
        uninterrupted.wait()
        for rank in (0, 1):
            assert "Processes = 2" in uninterrupted.output(rank), uninterrupted.tails()
        a, b = metrics(one), metrics(two)
        assert [m["step"] for m in b if "train_loss" in m] == list(range(1, steps + 1))  # each step logged once
        assert [(m["step"], sorted(m)) for m in a] == [(m["step"], sorted(m)) for m in b]
        assert_same_training(a, b)

        killed = tmp_path / "killed"
        interrupted = launch(killed, "killed")
        deadline = time.monotonic() + DEADLINE_S
        # the kill comes after step 5's checkpoint, once a few more steps are trained
        while not ((killed / "checkpoints" / "step_5").exists() and last_logged_step(killed) >= 7):
            assert interrupted.running(), "a machine ended before the kill" + interrupted.tails()
            assert time.monotonic() < deadline, interrupted.tails()
            time.sleep(0.02)
        interrupted.kill()
        newest = checkpoint_steps(killed)[-1]
        assert not (killed / "model.safetensors").exists() and newest < steps  # killed midway

        resumed = launch(killed, "resumed", "--resume_from_checkpoint", "latest")
        resumed.wait()
        for rank in (0, 1):
            assert f"Resuming from {killed / 'checkpoints' / f'step_{newest}'}" in resumed.output(rank), (
                resumed.tails()
            )
            assert "Processes = 2" in resumed.output(rank), resumed.tails()
        expected, got = weights(two), weights(killed)
        assert expected.keys() == got.keys()
        for name in expected:
            assert torch.equal(expected[name], got[name]), name
        # the metrics log reads as the uninterrupted run's, bit for bit (but for the clock)
        clock = ("time", "tokens_per_second")
        assert [{k: v for k, v in m.items() if k not in clock} for m in metrics(killed)] == [
            {k: v for k, v in m.items() if k not in clock} for m in metrics(two)
        ]
    finally:  # whatever happened: no process of any machine outlives the test
        for machines in started:
            machines.kill()
