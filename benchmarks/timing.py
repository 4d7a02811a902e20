"""Timing two workloads side by side: each in a worker process of its own, measured alternately.

Each model gets its own process, hence its own allocator heap, as it would in a user's program. In one shared process
the two models' allocations change each other's page faults (glibc returns large freed buffers to the system, and
whichever model allocates next maps and faults them again), which skews a comparison by 10-30% either way depending
on the order of the calls. A worker is any command that prints one JSON line when its workload is built, then one
JSON line with "seconds" for every line it reads on stdin (`serve`).
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence


class Worker:
    """A process that builds one workload, then times one call of it per request."""

    def __init__(self, command: Sequence[str]):
        self.command = list(command)
        self.proc = subprocess.Popen(self.command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.ready = self._read()  # the workload is built (and compiled) before the clock starts

    def _read(self) -> dict:
        while True:
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError(f"benchmark worker {self.command[-4:]} exited with {self.proc.wait()}")
            if line.startswith("{"):
                return json.loads(line)

    def seconds(self) -> float:
        self.proc.stdin.write("run\n")
        self.proc.stdin.flush()
        return self._read()["seconds"]

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait()


def interleaved(commands: Sequence[Sequence[str]], repeats: int, warmup: int = 2) -> list[float]:
    """Median seconds of each worker's call, the workers measured in turn (A, B, A, B, ...) so that machine noise hits
    them alike."""
    return [statistics.median(series) for series in interleaved_series(commands, repeats, warmup)]


def interleaved_series(commands: Sequence[Sequence[str]], repeats: int, warmup: int = 2) -> list[list[float]]:
    """Every timed call's seconds, one list per worker, the workers measured in turn as `interleaved` does."""
    workers = [Worker(command) for command in commands]
    try:
        for _ in range(warmup):
            for worker in workers:
                worker.seconds()
        times: list[list[float]] = [[] for _ in workers]
        for _ in range(repeats):
            for worker, series in zip(workers, times, strict=True):
                series.append(worker.seconds())
        return times
    finally:
        for worker in workers:
            worker.close()


def serve(run: Callable[[], None], **ready) -> None:
    """The worker's side: announce that the workload is built, then time one call per line read from stdin."""
    print(json.dumps({"ready": True, **ready}), flush=True)
    for _ in sys.stdin:
        start = time.perf_counter()
        run()
        print(json.dumps({"seconds": time.perf_counter() - start}), flush=True)
