"""Pretrain a sinusoidal Transformer encoder by masked language modelling, with accelerate, on a `datasets` corpus.

    accelerate launch training/pretrain.py --output_dir outputs/small                     # built-in corpus, CPU ok
    accelerate launch --mixed_precision bf16 --num_processes 8 training/pretrain.py \\
        --dataset_name wikitext --dataset_config_name wikitext-103-raw-v1 --config_name base --output_dir out

With no data flag it trains on the built-in offline corpus (training/corpus.py) with the shipped tokenizer
(tokenizer_config/). The output folder ends Hub-ready: weights (safetensors), config with auto_map, the model code,
tokenizer, README.md (the model card) and metrics.jsonl. Resumable states go to output_dir/checkpoints/step_N.
"""

from __future__ import annotations

import argparse
import math
import time
from itertools import islice

import datasets
import torch
import transformers
from accelerate import Accelerator
from accelerate.logging import get_logger
from accelerate.utils import GradientAccumulationPlugin, set_seed
from torch.nn import functional as F
from tqdm.auto import tqdm
from transformers import AutoConfig, AutoModelForMaskedLM, AutoTokenizer, get_scheduler

import sinusoidal_encoder
from sinusoidal_encoder.training.data import (
    SHIPPED_TOKENIZER,
    IndexedExamples,
    IndexedStream,
    KeyedMaskingCollator,
    _mix,
    add_data_arguments,
    load_raw_datasets,
    tokenize_and_pack,
)
from sinusoidal_encoder.training.engine import (
    MetricsLog,
    TrainingProgress,
    add_training_arguments,
    check_training_arguments,
    parameter_groups,
    perplexity,
    push_folder_to_hub,
    resolve_checkpoint,
    save_checkpoint,
)
from sinusoidal_encoder.training.model_card import render_model_card

logger = get_logger(__name__)

# Size presets for --config_name. "base" has BERT-base's dimensions (~110M parameters with a 30k vocabulary).
MODEL_SIZES = {
    "tiny": dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=256),
    "small": dict(hidden_size=256, num_hidden_layers=4, num_attention_heads=4, intermediate_size=1024),
    "base": dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072),
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_data_arguments(parser)
    group = parser.add_argument_group("model and tokenizer")
    group.add_argument(
        "--config_name",
        default="small",
        help=f"A size preset ({', '.join(MODEL_SIZES)}), or a config file, folder or Hub id.",
    )
    group.add_argument(
        "--config_overrides",
        default=None,
        help="Comma-separated config fields to override, e.g. 'hidden_size=64,num_hidden_layers=2,norm_first=true'.",
    )
    group.add_argument(
        "--model_name_or_path", default=None, help="Continue pretraining this model (folder or Hub id)."
    )
    group.add_argument(
        "--tokenizer_name", default=None, help="Tokenizer folder or Hub id (default: the shipped tokenizer_config/)."
    )
    group.add_argument("--max_seq_length", type=int, default=128, help="Tokens per packed training block.")
    group.add_argument("--mlm_probability", type=float, default=0.15, help="Share of tokens masked for prediction.")
    add_training_arguments(parser)
    args = parser.parse_args(argv)
    check_training_arguments(args)
    if args.streaming and args.max_train_steps is None:
        raise ValueError("--streaming needs --max_train_steps (a stream has no known length).")
    if args.model_name_or_path and args.config_overrides:
        raise ValueError("--config_overrides applies to new models, not to --model_name_or_path.")
    return args


def apply_overrides(config: transformers.PretrainedConfig, overrides: str | None) -> None:
    """'a=1,b=x' onto the config, each value parsed as the type of the field it replaces."""
    if not overrides:
        return
    for item in overrides.split(","):
        if "=" not in item:
            raise ValueError(f"--config_overrides: {item!r} is not of the form field=value.")
        key, value = (part.strip() for part in item.split("=", 1))
        if not hasattr(config, key):
            raise ValueError(f"--config_overrides: the config has no field {key!r}.")
        old = getattr(config, key)
        if isinstance(old, bool):
            if value.lower() not in ("true", "false", "1", "0"):
                raise ValueError(f"--config_overrides: {key} must be true or false, got {value!r}.")
            new = value.lower() in ("true", "1")
        elif isinstance(old, int):
            new = int(value)
        elif isinstance(old, float):
            new = float(value)
        else:
            new = value
        setattr(config, key, new)
    config.check()


def build_model(args: argparse.Namespace, tokenizer) -> transformers.PreTrainedModel:
    if args.model_name_or_path:
        return AutoModelForMaskedLM.from_pretrained(args.model_name_or_path)
    if args.config_name in MODEL_SIZES:
        config = sinusoidal_encoder.SinusoidalEncoderConfig(**MODEL_SIZES[args.config_name])
    else:
        config = AutoConfig.from_pretrained(args.config_name)
    config.vocab_size = len(tokenizer)
    config.pad_token_id = tokenizer.pad_token_id
    config.max_position_embeddings = args.max_seq_length
    apply_overrides(config, args.config_overrides)
    return AutoModelForMaskedLM.from_config(config)


def masked_lm_sums(model, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-example sum of the masked-token cross-entropy and count of masked tokens: (B,), (B,). The model runs with
    `sparse_prediction`, so the vocabulary projection is computed at masked positions only."""
    labels = batch["labels"]  # (B, T)
    logits = model(input_ids=batch["input_ids"], labels=labels).logits  # (N, V): masked positions, row-major
    keep = labels != -100
    losses = F.cross_entropy(logits.float(), labels[keep], reduction="none")  # (N,)
    rows = keep.nonzero()[:, 0]  # (N,): the example of each masked position
    sums = torch.zeros(labels.shape[0], dtype=losses.dtype, device=losses.device).index_add_(0, rows, losses)
    return sums, keep.sum(dim=1)  # (B,), (B,)


@torch.no_grad()
def evaluate(model, loader, accelerator: Accelerator) -> dict[str, float]:
    """Masked-token-weighted loss and perplexity over the whole evaluation split, gathered across processes
    (without the samples accelerate repeats to even out the last batch)."""
    model.eval()
    loss_sum = torch.zeros((), dtype=torch.float64, device=accelerator.device)
    count = torch.zeros((), dtype=torch.float64, device=accelerator.device)
    for batch in loader:
        sums, counts = masked_lm_sums(model, batch)
        sums, counts = accelerator.gather_for_metrics((sums, counts))
        loss_sum += sums.double().sum()
        count += counts.double().sum()
    model.train()
    loss = (loss_sum / count.clamp(min=1)).item()
    return {"eval_loss": loss, "eval_perplexity": perplexity(loss), "eval_masked_tokens": int(count.item())}


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    accelerator = Accelerator(
        gradient_accumulation_plugin=GradientAccumulationPlugin(
            num_steps=args.gradient_accumulation_steps, sync_with_dataloader=False
        ),
        log_with=args.report_to if args.with_tracking else None,
        project_dir=args.output_dir,
    )
    if accelerator.is_main_process:
        datasets.utils.logging.set_verbosity_warning()
        transformers.utils.logging.set_verbosity_warning()
    else:
        datasets.utils.logging.set_verbosity_error()
        transformers.utils.logging.set_verbosity_error()
        datasets.disable_progress_bars()
    set_seed(args.seed)

    tokenizer = AutoTokenizer.from_pretrained(args.tokenizer_name or SHIPPED_TOKENIZER)
    tokenizer.model_max_length = args.max_seq_length
    with accelerator.main_process_first():
        raw = load_raw_datasets(args)
        packed = tokenize_and_pack(
            raw, tokenizer, args.max_seq_length, args.text_column_name, args.preprocessing_num_workers
        )
    model = build_model(args, tokenizer)
    model.config.sparse_prediction = True  # training and evaluation need logits at masked positions only

    streaming = isinstance(packed["train"], datasets.IterableDataset)
    train_generator = torch.Generator()  # the data order's own RNG: never draws from the global one
    train_masking = KeyedMaskingCollator(tokenizer, args.mlm_probability, args.seed)
    eval_masking = KeyedMaskingCollator(tokenizer, args.mlm_probability, args.seed, epoch="eval")
    if streaming:
        train_set, eval_set = IndexedStream(packed["train"]), IndexedStream(packed["validation"])
    else:
        train_set, eval_set = IndexedExamples(packed["train"]), IndexedExamples(packed["validation"])
    train_loader = torch.utils.data.DataLoader(
        train_set,
        batch_size=args.per_device_train_batch_size,
        shuffle=not streaming,
        generator=train_generator,
        collate_fn=train_masking,
        num_workers=args.dataloader_num_workers,
        drop_last=True,
    )
    eval_loader = torch.utils.data.DataLoader(
        eval_set,
        batch_size=args.per_device_eval_batch_size,
        generator=torch.Generator(),
        collate_fn=eval_masking,
        num_workers=args.dataloader_num_workers,
    )

    optimizer = torch.optim.AdamW(
        parameter_groups(model, args.weight_decay),
        lr=args.learning_rate,
        betas=(args.adam_beta1, args.adam_beta2),
        eps=args.adam_epsilon,
    )
    model, optimizer, train_loader, eval_loader = accelerator.prepare(model, optimizer, train_loader, eval_loader)
    steps_per_epoch = None if streaming else len(train_loader) // args.gradient_accumulation_steps
    if steps_per_epoch == 0:
        raise ValueError("One epoch holds fewer batches than --gradient_accumulation_steps: lower the batch size.")
    if args.max_train_steps is None:
        args.max_train_steps = steps_per_epoch * args.num_train_epochs
    num_epochs = math.ceil(args.max_train_steps / steps_per_epoch) if steps_per_epoch else 1
    warmup = args.num_warmup_steps if args.num_warmup_steps is not None else int(0.06 * args.max_train_steps)
    # a prepared scheduler advances once per process at every optimizer step: count its steps the same way
    scheduler = get_scheduler(
        args.lr_scheduler_type,
        optimizer,
        num_warmup_steps=warmup * accelerator.num_processes,
        num_training_steps=args.max_train_steps * accelerator.num_processes,
    )
    scheduler = accelerator.prepare(scheduler)
    progress = TrainingProgress()
    accelerator.register_for_checkpointing(progress)

    checkpoint = resolve_checkpoint(args.output_dir, args.resume_from_checkpoint)
    if checkpoint is not None:
        accelerator.print(f"Resuming from {checkpoint}")
        accelerator.load_state(checkpoint)
    elif args.resume_from_checkpoint == "latest":
        accelerator.print(f"No checkpoint in {args.output_dir}/checkpoints yet: starting from scratch")
    if args.with_tracking:
        accelerator.init_trackers("pretrain", config={k: v for k, v in vars(args).items() if v is not None})
    metrics_log = MetricsLog(
        accelerator, args.output_dir, progress.completed_steps if checkpoint else None, args.with_tracking
    )

    world = accelerator.num_processes
    tokens_per_step = args.per_device_train_batch_size * world * args.gradient_accumulation_steps * args.max_seq_length
    accelerator.print("***** Running training *****")
    unwrapped = accelerator.unwrap_model(model)
    accelerator.print(
        f"  Model = {unwrapped.config.model_type}, {unwrapped.num_parameters():,} parameters, "
        f"attention = {unwrapped.config._attn_implementation}"
    )
    accelerator.print(
        f"  Training examples (blocks of {args.max_seq_length} tokens) = "
        f"{'streamed' if streaming else f'{len(train_set):,}'}"
    )
    accelerator.print(f"  Processes = {world}, mixed precision = {accelerator.mixed_precision}")
    accelerator.print(
        f"  Batch per device = {args.per_device_train_batch_size}, gradient accumulation = "
        f"{args.gradient_accumulation_steps}, global batch = {tokens_per_step // args.max_seq_length}"
    )
    accelerator.print(f"  Optimizer steps = {args.max_train_steps} ({num_epochs} epoch(s)), warmup = {warmup}")
    accelerator.print(f"  Tokens = {tokens_per_step:,} per step, {tokens_per_step * args.max_train_steps:,} in all")

    bar = tqdm(
        total=args.max_train_steps,
        initial=progress.completed_steps,
        disable=not accelerator.is_local_main_process,
        desc="pretraining",
        dynamic_ncols=True,
    )
    model.train()
    window_loss = torch.zeros((), dtype=torch.float64, device=accelerator.device)
    window_count = torch.zeros((), dtype=torch.float64, device=accelerator.device)
    window_time, window_tokens = 0.0, 0  # tokens/s counts training steps only, not evaluation or checkpoints
    while progress.completed_steps < args.max_train_steps:
        epoch = progress.epoch
        train_generator.manual_seed(_mix(args.seed, "data", epoch))  # same order on resume, different per epoch
        train_masking.epoch = epoch
        loader = train_loader
        if progress.batches_in_epoch:
            loader = accelerator.skip_first_batches(train_loader, progress.batches_in_epoch)
        batches = iter(loader)
        while progress.completed_steps < args.max_train_steps:
            step_start = time.perf_counter()
            window = list(islice(batches, args.gradient_accumulation_steps))
            if len(window) < args.gradient_accumulation_steps:  # end of the epoch: a partial window is not a step
                break
            # normalise by the masked tokens of the whole global batch, so every token weighs the same whatever
            # the number of processes and micro-batches (DDP averages over processes; backward divides by GA steps)
            local = sum((b["labels"] != -100).sum() for b in window).double()
            total = accelerator.reduce(local, reduction="sum")
            scale = world * args.gradient_accumulation_steps / total.clamp(min=1)
            for batch in window:
                with accelerator.accumulate(model):
                    sums, counts = masked_lm_sums(model, batch)
                    loss_sum = sums.sum()
                    accelerator.backward(loss_sum * scale.to(loss_sum.dtype))
                    if accelerator.sync_gradients and args.max_grad_norm > 0:
                        accelerator.clip_grad_norm_(model.parameters(), args.max_grad_norm)
                    optimizer.step()
                    scheduler.step()
                    optimizer.zero_grad()
                window_loss += loss_sum.detach().double()
                window_count += counts.sum().double()
            progress.completed_steps += 1
            progress.batches_in_epoch += args.gradient_accumulation_steps
            progress.tokens_seen += tokens_per_step
            window_tokens += tokens_per_step
            window_time += time.perf_counter() - step_start
            bar.update(1)

            step = progress.completed_steps
            if step % args.logging_steps == 0 or step == args.max_train_steps:
                loss = (accelerator.reduce(window_loss, "sum") / accelerator.reduce(window_count, "sum")).item()
                metrics = {
                    "train_loss": loss,
                    "learning_rate": scheduler.get_last_lr()[0],
                    "tokens_per_second": window_tokens / window_time,
                    "tokens_seen": progress.tokens_seen,
                    "epoch": epoch,
                }
                bar.set_postfix(
                    loss=f"{loss:.3f}",
                    lr=f"{metrics['learning_rate']:.2e}",
                    tok_s=f"{metrics['tokens_per_second']:,.0f}",
                )
                metrics_log.log(metrics, step)
                window_loss.zero_()
                window_count.zero_()
                window_time, window_tokens = (
                    0.0,
                    0,
                )  # tokens/s counts training steps only, not evaluation or checkpoints
            if args.eval_steps and step % args.eval_steps == 0 and step < args.max_train_steps:
                metrics_log.log(evaluate(model, eval_loader, accelerator), step)
            if args.checkpointing_steps and step % args.checkpointing_steps == 0:
                save_checkpoint(accelerator, args.output_dir, step, args.checkpoints_total_limit)
        if progress.completed_steps >= args.max_train_steps:
            break
        if streaming:
            accelerator.print(f"The stream ended after {progress.completed_steps} steps, before --max_train_steps.")
            break
        progress.epoch += 1
        progress.batches_in_epoch = 0
    bar.close()

    final_eval = evaluate(model, eval_loader, accelerator)
    metrics_log.log(final_eval, progress.completed_steps)
    accelerator.print(
        f"final evaluation: loss {final_eval['eval_loss']:.4f}, perplexity {final_eval['eval_perplexity']:.2f}"
    )
    export(args, accelerator, model, tokenizer, progress, final_eval)
    if args.with_tracking:
        accelerator.end_training()


def export(args, accelerator: Accelerator, model, tokenizer, progress: TrainingProgress, final_eval: dict) -> None:
    """The Hub-ready folder: weights, config, code, tokenizer, README.md (model card); then the optional upload."""
    accelerator.wait_for_everyone()
    state_dict = accelerator.get_state_dict(model)  # on every process: FSDP gathers the full state on the main one
    unwrapped = accelerator.unwrap_model(model)
    if accelerator.is_main_process:
        # a fresh model of the plain class: under FSDP2 the wrapped class is not the one users should load
        config = unwrapped.config
        config.sparse_prediction = False  # users of the exported model get full logits, as they expect
        unwrapped = AutoModelForMaskedLM.from_config(config)
        unwrapped.load_state_dict(state_dict)
        unwrapped.save_pretrained(args.output_dir)
        tokenizer.save_pretrained(args.output_dir)
        source = args.dataset_name or args.train_file or "builtin"
        if source == "builtin":
            data = (
                "The built-in offline corpus of sinusoidal-encoder: the Python language reference topics and the "
                "docstrings of the Python standard library, numpy, huggingface_hub, datasets, accelerate and "
                "transformers (PSF, BSD-3-Clause and Apache-2.0 licences), split 98/2 by a hash of each document."
            )
        else:
            data = f"`{source}`" + (
                f" (configuration `{args.dataset_config_name}`)" if args.dataset_config_name else ""
            )
        procedure = (
            f"Masked language modelling ({args.mlm_probability:.0%} of tokens; 80% [MASK], 10% random, 10% kept) on "
            f"packed blocks of {args.max_seq_length} tokens; {progress.completed_steps:,} optimizer steps, "
            f"{progress.tokens_seen:,} tokens seen; AdamW (lr {args.learning_rate:g}, betas {args.adam_beta1}/"
            f"{args.adam_beta2}, weight decay {args.weight_decay} on matrices), {args.lr_scheduler_type} schedule "
            f"after warmup, gradient clipping at {args.max_grad_norm}, global batch "
            f"{args.per_device_train_batch_size * accelerator.num_processes * args.gradient_accumulation_steps} "
            f"sequences, {accelerator.num_processes} process(es), mixed precision {accelerator.mixed_precision}, "
            f"seed {args.seed}. Trained with `training/pretrain.py` of sinusoidal-encoder."
        )
        render_model_card(
            unwrapped,
            args.output_dir,
            pipeline_tag="fill-mask",
            training_data=data,
            training_procedure=procedure,
            metrics={"loss": final_eval["eval_loss"], "perplexity": final_eval["eval_perplexity"]},
            dataset_id=args.dataset_name,
            model_id=args.hub_model_id,
            usage_example=(
                "```python\nfrom transformers import pipeline\n\n"
                f'fill = pipeline("fill-mask", model="{args.hub_model_id or args.output_dir}")\n'
                f'fill("The function returns a {tokenizer.mask_token} of positions.")\n```'
            ),
        )
        accelerator.print(f"saved the model to {args.output_dir}")
        if args.push_to_hub:
            push_folder_to_hub(args.output_dir, args.hub_model_id, private=args.hub_private_repo)
            accelerator.print(f"uploaded {args.output_dir} to the Hub as {args.hub_model_id}")
    accelerator.wait_for_everyone()


if __name__ == "__main__":
    main()
