"""One process of tests/training/runs/test_fsdp_cpu.py: trains the tiny masked-LM model under FSDP2 on CPU processes
(gloo), with the sharding of training/accelerate_configs/fsdp.yaml (full shard, each `SinusoidalEncoderLayer` its own
unit, then the root), saves and loads sharded checkpoints with torch.distributed.checkpoint, and exports the gathered
weights as a `save_pretrained` folder of the plain model.

accelerate 1.15 enables FSDP on GPU-like devices only (a CPU launch runs as plain data parallel, which the training
scripts refuse under an FSDP configuration), so this worker drives torch's FSDP2 itself: the same `fully_shard`
calls and state-dict functions accelerate uses for `fsdp_version: 2`.

    torchrun --nproc_per_node 2 tests/training/runs/fsdp_cpu_worker.py FLAGS    # FLAGS one of:
        --steps 6 --export OUT [--save_at 3 --checkpoint DIR]
        --steps 6 --export OUT --resume DIR
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

import sinusoidal_encoder as se

GLOBAL_BATCH = 8
SEQ_LEN = 16


def tiny_model() -> se.SinusoidalEncoderForMaskedLM:
    torch.manual_seed(0)
    config = se.SinusoidalEncoderConfig(
        vocab_size=96,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=SEQ_LEN,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    return se.SinusoidalEncoderForMaskedLM(config)


def batch(step: int, rank: int, world_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """This process's rows of the global batch of optimizer step `step`: ids `(B/W, T)` and labels (15% of tokens)."""
    generator = torch.Generator().manual_seed(1000 + step)
    ids = torch.randint(5, 96, (GLOBAL_BATCH, SEQ_LEN), generator=generator)
    chosen = torch.rand(GLOBAL_BATCH, SEQ_LEN, generator=generator) < 0.15
    chosen[:, 0] = True  # every row has a labelled token: each process's loss has the same weight
    labels = torch.where(chosen, ids, torch.full_like(ids, -100))
    return ids[rank::world_size], labels[rank::world_size]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--export", required=True, help="Folder for the gathered model (save_pretrained).")
    parser.add_argument("--save_at", type=int, default=None, help="Save a sharded checkpoint after this step, stop.")
    parser.add_argument("--checkpoint", default=None, help="Where --save_at writes the checkpoint.")
    parser.add_argument("--resume", default=None, help="A checkpoint to resume from.")
    args = parser.parse_args()

    dist.init_process_group("gloo")
    rank, world_size = dist.get_rank(), dist.get_world_size()
    mesh = init_device_mesh("cpu", (world_size,))
    model = tiny_model()
    for layer in model.model.encoder.layers:  # TRANSFORMER_BASED_WRAP on SinusoidalEncoderLayer
        fully_shard(layer, mesh=mesh, reshard_after_forward=True)
    fully_shard(model, mesh=mesh, reshard_after_forward=True)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)

    start = 0
    if args.resume:
        state = {"model": get_model_state_dict(model), "optimizer": get_optimizer_state_dict(model, optimizer)}
        dcp.load(state, checkpoint_id=args.resume)
        set_model_state_dict(model, state["model"])
        set_optimizer_state_dict(model, optimizer, state["optimizer"])
        with open(os.path.join(args.resume, "progress.json")) as handle:
            start = json.load(handle)["completed_steps"]

    losses = []
    for step in range(start, args.steps):
        ids, labels = batch(step, rank, world_size)
        loss = model(input_ids=ids, labels=labels).loss  # the mean over this process's labelled tokens
        loss.backward()  # FSDP reduce-scatters the gradients: their mean over the processes
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.detach().clone())
        if args.save_at is not None and step + 1 == args.save_at:
            state = {"model": get_model_state_dict(model), "optimizer": get_optimizer_state_dict(model, optimizer)}
            dcp.save(state, checkpoint_id=args.checkpoint)  # one file of shards per process
            if rank == 0:
                with open(os.path.join(args.checkpoint, "progress.json"), "w") as handle:
                    json.dump({"completed_steps": step + 1}, handle)
            break

    # every process takes part in gathering; the main one writes the plain model's folder
    full = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    sharded_sizes = [p.to_local().numel() for p in model.parameters()]
    if rank == 0:
        plain = tiny_model()
        plain.load_state_dict(full)
        plain.save_pretrained(args.export)
        mean_losses = [loss.item() for loss in losses]
        with open(os.path.join(args.export, "run.json"), "w") as handle:
            json.dump({"losses": mean_losses, "local_parameters": sum(sharded_sizes)}, handle)
    dist.barrier()  # neither process leaves while the other still communicates
    dist.destroy_process_group()


def leave() -> None:
    """End the process without the interpreter's finalization, once `main` has returned: every file is written and
    closed and both processes are through the final barrier.

    A plain exit aborts at random under load ("terminate called without an active exception", SIGABRT, torchrun fails
    the launch). gloo runs each collective on a worker thread, which lets go of the work a moment after the caller has
    returned from it; a barrier's work also holds on to the works still in flight when it was issued (here the
    all-gather just before it), and `destroy_process_group` does not join those threads (torch 2.13). Freeing such a
    work's tensors takes the GIL (their Python objects belong to the C++ tensors by then); if the main thread is
    already in `Py_FinalizeEx`, CPython ends the waiting thread with `pthread_exit`, whose unwinding through the
    work's noexcept destructor calls `std::terminate`. Skipping finalization leaves that thread nothing to race."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
    leave()
