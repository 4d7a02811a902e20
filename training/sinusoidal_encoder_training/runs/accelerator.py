"""The Accelerator of a run and the loaders it prepares: processes, mixed precision, compilation (accelerate's
dynamo plugin), trackers, seeds, and the DataLoaders' batch sizes, workers and page-locked memory by device; and
whether bf16 pays on this machine."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from typing import Any, TypeVar

import torch
from accelerate import Accelerator

from sinusoidal_encoder_training.cli.command_line import UsageError
from sinusoidal_encoder_training.configs import TrainingConfig
from sinusoidal_encoder_training.runs.compilation import compile_once_per_mode
from sinusoidal_encoder_training.runs.trackers import TRACKER_LOGS, trackers

T = TypeVar("T")


def make_loaders(
    config: TrainingConfig,
    train_set,
    eval_set,
    generator: torch.Generator,
    train_collate,
    eval_collate,
    train_sampler: torch.utils.data.Sampler | None = None,
    *,
    drop_last: bool,
    eval_order: list[int] | None = None,
) -> tuple[torch.utils.data.DataLoader, torch.utils.data.DataLoader]:
    """The training loader (its order a permutation drawn from `generator`, which the task reseeds every epoch,
    unless the set is a stream; or that of `train_sampler`, over that generator; the last partial batch of an epoch
    dropped if `drop_last`, else a batch of its own) and the evaluation loader (every example, in the split's order
    or in that of `eval_order`, their positions), of the config's batch sizes, with the workers, their persistence
    and page-locked memory of `loader_settings`; `accelerator.prepare` them with the model.

    The loaders' own draws (the seed of their workers, at every new iterator) come from generators of their own:
    neither the order nor the global RNG (dropout) depends on how many iterators a run made, which differs between
    workers kept from one epoch to the next, new ones, and a resumed run's."""
    if train_sampler is None and not isinstance(train_set, torch.utils.data.IterableDataset):
        train_sampler = torch.utils.data.RandomSampler(train_set, generator=generator)
    train_loader = torch.utils.data.DataLoader(
        train_set,
        batch_size=config.per_device_train_batch_size,
        sampler=train_sampler,
        generator=torch.Generator(),
        collate_fn=train_collate,
        drop_last=drop_last,
        **loader_settings(config, train_set),
    )
    eval_loader = torch.utils.data.DataLoader(
        eval_set,
        batch_size=config.per_device_eval_batch_size,
        sampler=eval_order,
        generator=torch.Generator(),
        collate_fn=eval_collate,
        **loader_settings(config, eval_set),
    )
    return train_loader, eval_loader


def main_process_first(accelerator: Accelerator, work: Callable[[], T]) -> T:
    """`work()` (reading and preparing the data) on the main process, then on the others, which read what it cached:
    accelerate's `main_process_first`, but a `UsageError` the main process raises (bad data) is raised by every
    process, before the others do the work. With accelerate's, the others were left at a barrier the main process
    never reached, and each ended in a traceback when it exited."""
    if accelerator.num_processes == 1:
        return work()
    from accelerate.utils import broadcast_object_list

    found = None
    if accelerator.is_main_process:
        try:
            result = work()
        except UsageError as error:
            found = error
    accelerator.wait_for_everyone()
    problem = broadcast_object_list([None if found is None else str(found)])[0]
    if found is not None:
        found.shared = True
        raise found
    if problem is not None:
        raise UsageError(problem, shared=True)
    if not accelerator.is_main_process:
        result = work()
    return result


def prepare_training(
    accelerator: Accelerator, config: TrainingConfig, model, optimizer, train_loader, eval_loader
) -> tuple:
    """`accelerator.prepare` of a run's model, optimizer and loaders (`make_loaders`), the model's activation
    checkpointing on first with `--activation_checkpointing`. A stream's loader comes back as accelerate's
    `DataLoaderDispatcher`, which drops the DataLoader's own generator: each new iterator of it (a resumed run's
    first, every evaluation's) then drew its workers' seed from the global RNG, the dropout's, and a resumed run left
    the uninterrupted one's dropout. Such a loader is given a generator of its own again."""
    if config.activation_checkpointing:
        enable_activation_checkpointing(model)
    prepared = accelerator.prepare(model, optimizer, train_loader, eval_loader)
    for loader in prepared[2:]:
        if loader.generator is None:
            loader.generator = torch.Generator()
    return prepared


def enable_activation_checkpointing(model) -> None:
    """transformers' activation checkpointing of `model`'s layers, non-reentrant (torch's advice: it works under
    DDP and torch.compile, and keeps the dropout of the first forward pass): `activation_checkpointing_enable`, or
    `gradient_checkpointing_enable` where transformers is older. A model without it is one line."""
    if not getattr(model, "supports_gradient_checkpointing", False):
        raise UsageError(f"--activation_checkpointing: {type(model).__name__} does not support it; leave it out.")
    arguments = {"use_reentrant": False}
    if hasattr(model, "activation_checkpointing_enable"):  # transformers >= 5.2x
        model.activation_checkpointing_enable(activation_checkpointing_kwargs=arguments)
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=arguments)


GPU_LOADER_WORKERS = 2  # per process, beside a GPU: batches are built while it steps


def loader_settings(config: TrainingConfig, dataset=None) -> dict[str, Any]:
    """The DataLoader's workers (`--dataloader_num_workers`, else by the device: none on a CPU, whose cores the step
    needs; `GPU_LOADER_WORKERS` beside a GPU, but no more than a streamed `dataset` has shards, the most that can
    read it), kept from one epoch or evaluation to the next unless `--no_persistent_workers` (no new processes, no
    wait for their first batches at each epoch's start), and page-locked memory (beside a GPU, so that the copy to
    it does not wait: accelerate copies with `non_blocking`, `make_accelerator`)."""
    gpu = torch.cuda.is_available()
    workers = config.dataloader_num_workers
    if workers is None:
        workers = GPU_LOADER_WORKERS if gpu else 0
        if hasattr(dataset, "shards"):  # a stream (`IndexedStream`): datasets stops the workers past its shards
            workers = min(workers, dataset.shards)
    persistent = workers > 0 and not config.no_persistent_workers
    return {"num_workers": workers, "pin_memory": gpu, "persistent_workers": persistent}


UNIX_SOCKET_PATH_MAX = 107  # bytes of a Unix socket's path: `sun_path` holds 108 with the closing NUL


def check_worker_handover(config: TrainingConfig) -> None:
    """A `UsageError` where DataLoader workers could not hand their batches over, which would hang the run: torch
    passes a batch's tensors as file descriptors, which Python's multiprocessing sends over a Unix socket it makes in
    the temporary folder (TMPDIR); with a path longer than a socket takes, the worker's queue thread fails, drops the
    batch with a traceback, and the run waits for it forever."""
    if loader_settings(config)["num_workers"] == 0:
        return
    if torch.multiprocessing.get_sharing_strategy() != "file_descriptor":
        return
    from multiprocessing.connection import arbitrary_address

    # the path a worker's socket would take (in this process's pymp-* folder)
    length = len(os.fsencode(arbitrary_address("AF_UNIX")))
    if length > UNIX_SOCKET_PATH_MAX:
        raise UsageError(
            f"DataLoader workers hand their batches over through a Unix socket in the temporary folder, and under "
            f"TMPDIR={tempfile.gettempdir()} its path would be {length} characters, over the "
            f"{UNIX_SOCKET_PATH_MAX} a socket takes (the run would wait forever for its first batch): set TMPDIR to a "
            "shorter folder (such as /tmp), or pass --dataloader_num_workers 0."
        )


def bf16_is_fast() -> bool:
    """Whether bf16 autocast pays here: a CUDA GPU, or a CPU with AVX512-BF16 or AMX instructions (elsewhere bf16 is
    emulated and slower than fp32)."""
    if torch.cuda.is_available():
        return True
    return any(
        getattr(torch.cpu, name, lambda: False)() for name in ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
    )


def new_accelerator(**kwargs: Any) -> Accelerator:
    """`Accelerator(**kwargs)` with these settings whatever an earlier run in this process chose. accelerate keeps
    mixed precision and the compile plugin in one state for the whole process (`AcceleratorState`): a second
    Accelerator of other settings would refuse them (`AcceleratorState has already been initialized`) or, left
    unset, silently take the first run's (a plain run after a `torch_compile` one compiled; an evaluation after a
    bf16 run in bf16). As transformers' `TrainingArguments` does, that state is cleared first; the processes and
    device (`PartialState`) are kept."""
    from accelerate.state import AcceleratorState

    AcceleratorState._reset_state()
    return Accelerator(**kwargs)


def make_accelerator(config: TrainingConfig) -> Accelerator:
    """An Accelerator whose gradient accumulation follows our step windows (never the end of a DataLoader), with
    trackers when asked, quiet library logs on non-main processes, and every RNG seeded; before it, a `UsageError`
    where the loaders' workers could not hand their batches over (`check_worker_handover`)."""
    from accelerate.utils import (
        DataLoaderConfiguration,
        GradientAccumulationPlugin,
        ProjectConfiguration,
        TorchDynamoPlugin,
        set_seed,
    )

    check_worker_handover(config)
    compile_plugin = None  # without --torch_compile, accelerate's own configuration decides
    if config.torch_compile:
        compile_plugin = TorchDynamoPlugin(
            backend=config.torch_compile_backend, mode=config.torch_compile_mode, dynamic=True
        )
        compile_once_per_mode()
    accelerator = new_accelerator(
        gradient_accumulation_plugin=GradientAccumulationPlugin(
            num_steps=config.gradient_accumulation_steps, sync_with_dataloader=False
        ),
        log_with=trackers(config.report_to) if config.with_tracking else None,
        # trackers' logs in runs/ (transformers' Trainer's place for them), which an upload leaves local
        project_config=ProjectConfiguration(
            project_dir=config.output_dir, logging_dir=os.path.join(config.output_dir, TRACKER_LOGS)
        ),
        mixed_precision=config.mixed_precision,
        dynamo_plugin=compile_plugin,
        dataloader_config=DataLoaderConfiguration(non_blocking=torch.cuda.is_available()),  # with pinned batches
    )
    from accelerate.utils import DistributedType

    fsdp_asked = os.environ.get("ACCELERATE_USE_FSDP", "false").lower() in ("1", "true")
    launched = max(accelerator.num_processes, int(os.environ.get("WORLD_SIZE", "1")))  # processes started
    if fsdp_asked and launched > 1 and accelerator.distributed_type != DistributedType.FSDP:
        # accelerate enables FSDP for GPU-like devices only; elsewhere it runs the processes as plain data parallel
        raise UsageError(
            f"The accelerate configuration asks for FSDP, but accelerate runs this job as "
            f"{accelerator.distributed_type.value} on {accelerator.device.type} (it enables FSDP on GPUs and similar "
            "devices only): the model would be replicated, not sharded. Launch with a data-parallel configuration "
            "(training/accelerate_configs/multi_gpu_ddp.yaml, or `--multi_gpu` with ACCELERATE_USE_CPU=1 on a CPU)."
        )
    alone = accelerator.num_processes == 1 and "WORLD_SIZE" not in os.environ
    if alone and "ACCELERATE_USE_CPU" in os.environ and "MASTER_ADDR" in os.environ:
        # accelerate's plain launcher sets MASTER_ADDR only when asked for several processes or machines
        raise UsageError(
            "accelerate launch was asked for several processes or machines, but this process runs alone (no process "
            "group: each would train alone and all write one --output_dir). `accelerate launch --cpu` starts one "
            "plain process whatever --num_machines says: on CPUs launch with --multi_gpu and ACCELERATE_USE_CPU=1 "
            "(docs/pretraining.md, 'Several machines')."
        )
    import datasets
    import transformers

    if accelerator.is_main_process:
        datasets.utils.logging.set_verbosity_warning()
        transformers.utils.logging.set_verbosity_warning()
    else:
        datasets.utils.logging.set_verbosity_error()
        transformers.utils.logging.set_verbosity_error()
        datasets.disable_progress_bars()
    set_seed(config.seed)
    return accelerator
