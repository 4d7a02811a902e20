"""Which pretraining recipe makes a small model use word order on a CPU budget? Arms of training/pretrain.py on the
built-in corpus, each scored by its final evaluation: eval loss, the unigram baseline on the same masked tokens, and
the order gap (`sinusoidal_encoder_training.evaluation.masked_lm`).

    python -m benchmarks.order_recipe.run --jobs 2                       # every arm, two at a time, one thread each
    python -m benchmarks.order_recipe.run --arms v4k_preln v4k_mask30    # some of them
    python -m benchmarks.order_recipe.run --report                       # only rewrite the table from finished arms

Every arm runs in its own process (`OMP_NUM_THREADS=1` by default), checkpoints, and resumes when the command is run
again; finished arms are not run again. Results go to outputs/order-recipe/<arm>/ and the table to
benchmarks/order_recipe/results.md. Arms that name a vocabulary other than the shipped one train that BPE tokenizer
first (training/train_tokenizer.py, same corpus, same settings but the size).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PRETRAIN = REPO / "training" / "pretrain.py"
TRAIN_TOKENIZER = REPO / "training" / "train_tokenizer.py"
DONE = "order_recipe_done.json"

# The starting point: the main job as it was (post-LN, dropout 0.1, lr 5e-4, 15% masking, 16k vocabulary).
BASE = {
    "vocab": 16384,
    "flags": {
        "--config_name": "small",
        "--max_seq_length": "128",
        "--per_device_train_batch_size": "32",
        "--learning_rate": "5e-4",
        "--num_warmup_steps": "30",
        "--max_train_steps": "300",
        "--mlm_probability": "0.15",
    },
    "overrides": {},
}
NO_DROPOUT = {"hidden_dropout_prob": "0", "attention_probs_dropout_prob": "0"}
MAIN_FLAGS = {  # scripts/pretrain.sh's recipe (it adds bf16 only where the hardware has it)
    "--learning_rate": "2e-3",
    "--num_warmup_steps": "100",
    "--seq_length_schedule": "16:150,32:300,64:450",
    "--mixed_precision": "bf16",
    "--max_train_steps": "1000",
}
PRE_LN = {"norm_first": "true", **NO_DROPOUT}

# name -> (what changes against BASE, as vocab / flags / config overrides)
ARMS: dict[str, dict] = {
    "v16k_paper": {},
    "v16k_preln": {"flags": {"--learning_rate": "1e-3"}, "overrides": PRE_LN},
    "v4k_preln": {"vocab": 4096, "flags": {"--learning_rate": "1e-3"}, "overrides": PRE_LN},
    "v2k_preln": {"vocab": 2048, "flags": {"--learning_rate": "1e-3"}, "overrides": PRE_LN},
    "v1k_preln": {"vocab": 1024, "flags": {"--learning_rate": "1e-3"}, "overrides": PRE_LN},
    "v4k_postln": {"vocab": 4096, "flags": {"--learning_rate": "1e-3"}, "overrides": NO_DROPOUT},
    "v4k_preln_lr2e-3": {"vocab": 4096, "flags": {"--learning_rate": "2e-3"}, "overrides": PRE_LN},
    "v4k_preln_lr3e-3": {"vocab": 4096, "flags": {"--learning_rate": "3e-3"}, "overrides": PRE_LN},
    "v4k_preln_lr3e-3_bf16": {
        "vocab": 4096,
        "flags": {"--learning_rate": "3e-3", "--mixed_precision": "bf16"},
        "overrides": PRE_LN,
    },
    "v4k_preln_mask30": {
        "vocab": 4096,
        "flags": {"--learning_rate": "1e-3", "--mlm_probability": "0.3"},
        "overrides": PRE_LN,
    },
    "v4k_preln_batch16": {
        "vocab": 4096,
        "flags": {"--learning_rate": "1e-3", "--per_device_train_batch_size": "16", "--max_train_steps": "600"},
        "overrides": PRE_LN,
    },
    "v4k_preln_batch8_lr2e-3": {
        "vocab": 4096,
        "flags": {"--learning_rate": "2e-3", "--per_device_train_batch_size": "8", "--max_train_steps": "1200"},
        "overrides": PRE_LN,
    },
    "v4k_preln_lr2e-3_len32": {
        "vocab": 4096,
        "flags": {"--learning_rate": "2e-3", "--seq_length_schedule": "32:150"},
        "overrides": PRE_LN,
    },
    "v4k_preln_lr2e-3_len16-64": {
        "vocab": 4096,
        "flags": {"--learning_rate": "2e-3", "--seq_length_schedule": "16:75,32:150,64:225"},
        "overrides": PRE_LN,
    },
    "v16k_preln_lr2e-3_len16-64": {
        "flags": {"--learning_rate": "2e-3", "--seq_length_schedule": "16:75,32:150,64:225"},
        "overrides": PRE_LN,
    },
    "v4k_preln_lr2e-3_len16-64_bf16": {
        "vocab": 4096,
        "flags": {
            "--learning_rate": "2e-3",
            "--seq_length_schedule": "16:75,32:150,64:225",
            "--mixed_precision": "bf16",
        },
        "overrides": PRE_LN,
    },
    "v2k_preln_lr2e-3_len16-64": {
        "vocab": 2048,
        "flags": {"--learning_rate": "2e-3", "--seq_length_schedule": "16:75,32:150,64:225"},
        "overrides": PRE_LN,
    },
    "v4k_postln_lr1e-3_len16-64": {
        "vocab": 4096,
        "flags": {"--learning_rate": "1e-3", "--seq_length_schedule": "16:75,32:150,64:225"},
        "overrides": NO_DROPOUT,
    },
    "v4k_preln_lr3e-3_len16-64": {
        "vocab": 4096,
        "flags": {"--learning_rate": "3e-3", "--seq_length_schedule": "16:75,32:150,64:225"},
        "overrides": PRE_LN,
    },
    # the main job's candidates: lengths 16, 32, 64 for 150 steps each, bf16; 600 steps, then the shipped 1,000
    "main_v4k": {"vocab": 4096, "flags": {**MAIN_FLAGS, "--max_train_steps": "600"}, "overrides": PRE_LN},
    "main_v16k": {"flags": {**MAIN_FLAGS, "--max_train_steps": "600"}, "overrides": PRE_LN},
    "main_v16k_1000": {"flags": MAIN_FLAGS, "overrides": PRE_LN},
    # the shipped recipe with the position encoding switched off: how much of the result is word order
    "main_v16k_1000_no_position": {"no_position": True, "flags": MAIN_FLAGS, "overrides": PRE_LN},
    "v4k_preln_seq64": {
        "vocab": 4096,
        "flags": {"--learning_rate": "1e-3", "--max_seq_length": "64", "--per_device_train_batch_size": "64"},
        "overrides": PRE_LN,
    },
}


def arm_settings(name: str, steps_scale: float) -> dict:
    change = ARMS[name]
    flags = {**BASE["flags"], **change.get("flags", {})}
    flags["--max_train_steps"] = str(round(int(flags["--max_train_steps"]) * steps_scale))
    overrides = {**BASE["overrides"], **change.get("overrides", {})}
    return {"vocab": change.get("vocab", BASE["vocab"]), "flags": flags, "overrides": overrides}


def tokenizer_folder(output_dir: Path, vocab: int) -> Path:
    if vocab == 16384:
        return REPO / "tokenizer_config"
    return output_dir / "tokenizers" / f"bpe-{vocab}"


def ensure_tokenizer(output_dir: Path, vocab: int) -> Path:
    folder = tokenizer_folder(output_dir, vocab)
    if not (folder / "tokenizer.json").exists():
        subprocess.run(
            [sys.executable, str(TRAIN_TOKENIZER), "--vocab_size", str(vocab), "--output_dir", str(folder)],
            check=True,
        )
    return folder


def run_arm(name: str, args: argparse.Namespace) -> dict:
    folder = args.output_dir / name
    done = folder / DONE
    if done.exists():
        return json.loads(done.read_text())
    settings = arm_settings(name, args.steps_scale)
    tokenizer = ensure_tokenizer(args.output_dir, settings["vocab"])
    if ARMS[name].get("no_position"):  # pretrain.py through this file, with the encoding switched off
        argv = [
            sys.executable,
            "-m",
            "benchmarks.order_recipe.run",
            "--pretrain_without_positions",
            "--tokenizer_name",
            str(tokenizer),
        ]
    else:
        argv = [sys.executable, str(PRETRAIN), "--tokenizer_name", str(tokenizer)]
    for flag, value in settings["flags"].items():
        argv += [flag, value]
    if settings["overrides"]:
        argv += ["--config_overrides", ",".join(f"{k}={v}" for k, v in settings["overrides"].items())]
    steps = int(settings["flags"]["--max_train_steps"])
    argv += [
        "--eval_steps",
        str(max(steps // 4, 1)),
        "--checkpointing_steps",
        str(max(steps // 10, 1)),
        "--checkpoints_total_limit",
        "1",
        "--resume_from_checkpoint",
        "latest",
        "--logging_steps",
        "20",
        "--seed",
        str(args.seed),
        "--output_dir",
        str(folder),
    ]
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "MKL_NUM_THREADS": str(args.threads)}
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    folder.mkdir(parents=True, exist_ok=True)
    start = time.time()
    with open(folder / "log.txt", "a") as log:
        subprocess.run(argv, check=True, env=env, stdout=log, stderr=subprocess.STDOUT)
    metrics = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines() if line.strip()]
    final = [m for m in metrics if "eval_loss" in m][-1]
    speeds = [m["tokens_per_second"] for m in metrics if "tokens_per_second" in m]
    result = {
        "arm": name,
        **settings,
        "threads": args.threads,
        "seed": args.seed,
        "wall_seconds_last_session": round(time.time() - start),
        "tokens_per_second": sum(speeds) / len(speeds),
        "tokens_seen": max(m.get("tokens_seen", 0) for m in metrics),
        "curve": [
            {k: m[k] for k in ("step", "eval_loss", "eval_unigram_loss", "eval_order_gap")}
            for m in metrics
            if "eval_loss" in m
        ],
        **{k: final[k] for k in ("eval_loss", "eval_unigram_loss", "eval_order_gap")},
    }
    done.write_text(json.dumps(result, indent=2))
    return result


def partial_result(folder: Path, name: str) -> dict | None:
    """What an arm stopped before its end logged (its evaluations so far), or None if it logged none."""
    path = folder / "metrics.jsonl"
    if not path.exists():
        return None
    metrics = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    evals = [m for m in metrics if "eval_order_gap" in m]
    speeds = [m["tokens_per_second"] for m in metrics if "tokens_per_second" in m]
    if not evals:
        return None
    settings = arm_settings(name, 1.0)
    tokens_per_step = int(settings["flags"]["--max_seq_length"]) * int(
        settings["flags"]["--per_device_train_batch_size"]
    )
    return {
        "arm": name,
        **settings,
        "stopped_at": evals[-1]["step"],
        "tokens_per_second": sum(speeds) / len(speeds),
        "tokens_seen": evals[-1]["step"] * tokens_per_step,
        "curve": [{k: m[k] for k in ("step", "eval_loss", "eval_unigram_loss", "eval_order_gap")} for m in evals],
        **{k: evals[-1][k] for k in ("eval_loss", "eval_unigram_loss", "eval_order_gap")},
    }


def write_report(output_dir: Path, path: Path) -> None:
    rows = []
    for name in ARMS:
        done = output_dir / name / DONE
        if done.exists():
            rows.append(json.loads(done.read_text()))
        else:
            partial = partial_result(output_dir / name, name)
            if partial is not None:
                rows.append(partial)
    lines = [
        "# Which recipe makes the model use word order?",
        "",
        "`python -m benchmarks.order_recipe.run` (arms of `training/pretrain.py` on the built-in corpus, one thread",
        "each, two at a time on 2 CPU cores; seed as listed). Order gap: loss on the validation blocks with their",
        "inner tokens permuted minus the loss as written (nats per masked token). Unigram: the training split's token",
        "frequencies on the same masked tokens. Losses of different vocabularies are per token of that vocabulary.",
        "Every arm is evaluated on whole 128-token blocks with 15% of tokens masked. Tokens/s are of one thread with",
        "another job on the other core, and wander with what else ran (tests, a third job) at the time.",
        "Arms marked 'stopped' were ended early to free the cores for more promising ones: their last evaluation.",
        "",
        "| arm | vocab | changes against the old main job | tokens | tokens/s (1 thread) | eval loss | unigram "
        "| below unigram | order gap | order gap at each evaluation (step: gap) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        change = ARMS[row["arm"]]
        described = [f"{k} {v}" for k, v in change.get("flags", {}).items()]
        described += [f"{k}={v}" for k, v in change.get("overrides", {}).items()]
        name = row["arm"] + (f" (stopped at step {row['stopped_at']})" if "stopped_at" in row else "")
        gaps = ", ".join(f"{point['step']}: {point['eval_order_gap']:+.3f}" for point in row["curve"])
        lines.append(
            f"| {name} | {row['vocab']} | {', '.join(described) or '—'} | {row['tokens_seen']:,} | "
            f"{row['tokens_per_second']:,.0f} | {row['eval_loss']:.3f} | {row['eval_unigram_loss']:.3f} | "
            f"{row['eval_unigram_loss'] - row['eval_loss']:.3f} | {row['eval_order_gap']:+.3f} | {gaps} |"
        )
    path.write_text("\n".join(lines) + "\n")


def pretrain_without_positions(argv: list[str]) -> None:
    """training/pretrain.py's main with the position encoding of the model switched off (the ablation of
    benchmarks/length_generalization/run.py); the exported folder does not carry the switch, the metrics are what
    count."""
    from benchmarks.length_generalization import run as length_generalization
    from sinusoidal_encoder_training.cli.arguments import parse_config
    from sinusoidal_encoder_training.stages import pretraining

    config = parse_config(pretraining.PretrainingConfig, argv)
    result = pretraining.pretrain(config, length_generalization.arm_model("no_position", config))
    pretraining.export(config, result)


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--pretrain_without_positions"]:
        pretrain_without_positions(argv[1:])
        return
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--arms", nargs="+", choices=list(ARMS), default=list(ARMS), help="Arms to run, in order.")
    parser.add_argument("--jobs", type=int, default=2, help="Arms run at the same time.")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per arm.")
    parser.add_argument("--steps_scale", type=float, default=1.0, help="Multiply every arm's steps by this.")
    parser.add_argument("--seed", type=int, default=0, help="Seed of every arm.")
    parser.add_argument("--output_dir", type=Path, default=REPO / "outputs" / "order-recipe")
    parser.add_argument("--results", type=Path, default=REPO / "benchmarks" / "order_recipe" / "results.md")
    parser.add_argument("--report", action="store_true", help="Only rewrite the table from the finished arms.")
    args = parser.parse_args(argv)
    if not args.report:
        # tokenizers first, one at a time (they share the corpus cache)
        for vocab in sorted({arm_settings(name, 1.0)["vocab"] for name in args.arms}):
            ensure_tokenizer(args.output_dir, vocab)
        with ThreadPoolExecutor(args.jobs) as pool:
            for result in pool.map(lambda name: run_arm(name, args), args.arms):
                print(json.dumps({k: result[k] for k in ("arm", "eval_loss", "eval_unigram_loss", "eval_order_gap")}))
                write_report(args.output_dir, args.results)
    write_report(args.output_dir, args.results)


if __name__ == "__main__":
    main()
