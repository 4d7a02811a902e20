"""Stopping a run on a signal: Ctrl-C or SIGTERM asks the loop to stop after the step in progress (`StopRequest`),
every process of a run agrees on the same step without waiting for the device (`StopAgreement`), and the run tells
its user how to resume (`interruption_line`)."""

from __future__ import annotations

import os
import shlex
import signal
import sys
import threading
from typing import Any

import torch

from sinusoidal_encoder_training.cli.command_line import Interrupted, Terminated
from sinusoidal_encoder_training.configs import TrainingConfig
from sinusoidal_encoder_training.runs.checkpoints import resolve_checkpoint


class StopAgreement:
    """Whether the processes of a run agreed to stop, read one step late so that the host never waits for the
    device: each step's reduction sums every process's stop request (`post`), which the next step reads (`agreed`),
    when the device has long computed it (on a CUDA device, copied to the host behind the step and waited for by an
    event, not by the step in progress). Every process reads the same sum at the same step: all stop after the same
    step."""

    def __init__(self) -> None:
        self.pending: tuple[torch.Tensor, Any] | None = None  # the newest sum, and the event its copy waits for

    def post(self, requests: torch.Tensor) -> None:
        """The sum of the processes' stop requests at this step's reduction (a scalar on the device)."""
        if requests.device.type == "cuda":
            host = torch.empty((), dtype=requests.dtype, pin_memory=True)
            host.copy_(requests, non_blocking=True)
            copied = torch.cuda.Event()
            copied.record()
            self.pending = (host, copied)
        else:
            self.pending = (requests, None)

    def agreed(self) -> bool:
        """Whether a process had asked to stop by the newest posted reduction."""
        if self.pending is None:
            return False
        requests, copied = self.pending
        if copied is not None:
            copied.synchronize()
        return bool(requests.item())


class StopRequest:
    """Ctrl-C (SIGINT) and SIGTERM (Slurm's, Kubernetes', `docker stop`'s) while training: the first one asks the
    loop to stop after the optimizer step in progress; with several processes (`shared`), every one learns it from
    the next step's reduction, read a step later (`StopAgreement`), so that they stop after the same step, the one in
    progress or the next, and save its checkpoint together (when the run saves checkpoints); a second one stops at
    once (`Interrupted`, status 130, or `Terminated`, 143, raised from the handler). Handlers are installed
    on the main thread only (Python cannot install them elsewhere) and the previous ones put back by `uninstall`;
    forked DataLoader workers inherit them and leave the stopping to the training process."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self, announce: bool, checkpoints: bool, shared: bool = False):
        self.announce, self.checkpoints, self.shared = announce, checkpoints, shared
        self.signum: int | None = None
        self.previous: dict[int, Any] = {}
        self.pid = os.getpid()

    @property
    def requested(self) -> bool:
        return self.signum is not None

    @property
    def kind(self) -> type[Interrupted]:
        return Terminated if self.signum == signal.SIGTERM else Interrupted

    def install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        for signum in self.SIGNALS:
            if signal.getsignal(signum) is signal.SIG_IGN:  # e.g. SIGINT of a command started with `&`: leave it
                continue
            self.previous[signum] = signal.signal(signum, self._handle)

    def uninstall(self) -> None:
        for signum, handler in self.previous.items():
            signal.signal(signum, handler)
        self.previous.clear()

    def _handle(self, signum, frame) -> None:
        if os.getpid() != self.pid:  # a forked DataLoader worker: its process stops it
            return
        if self.requested:
            raise (Terminated if signum == signal.SIGTERM else Interrupted)()
        self.signum = signum
        if self.announce:
            saving = "saving a checkpoint of it, " if self.checkpoints else ""
            name = signal.Signals(signum).name
            when = "the step in progress or the next, with every process" if self.shared else "the step in progress"
            line = f"{name}: stopping after {when} ({saving}a second {name} stops at once)"
            sys.stderr.write(f"\n{line}\n")
            sys.stderr.flush()


def interruption_line(config: TrainingConfig, step: int) -> str:
    """What a run interrupted at optimizer step `step` tells its user: the newest complete checkpoint and the
    command that resumes from it (this command, with `--resume_from_checkpoint latest`)."""
    newest = resolve_checkpoint(config.output_dir, "latest")
    if newest is None:
        return f"interrupted at step {step}, before the first checkpoint (--checkpointing_steps): nothing to resume."
    script, *args = sys.argv
    command = ["python", script] if script.endswith(".py") else [os.path.basename(script)]
    if "--resume_from_checkpoint" not in args:
        args += ["--resume_from_checkpoint", "latest"]
    return f"interrupted at step {step}; the newest checkpoint is {newest}; resume with: {shlex.join(command + args)}"
