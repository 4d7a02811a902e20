"""Context extension: each arm's 128-token model continued briefly at 512 tokens, beside the same arm trained at 512
tokens from the start on as many tokens.

    python -m benchmarks.context_extension.run --study_dir outputs/length-generalization \\
        --output_dir outputs/context-extension

The 128-token models are the runs of benchmarks/length_generalization/run.py (its --output_dir, run first, with the
same seeds). Extension continues each saved folder as a user would, with the library's pretraining:

    python training/pretrain.py --model_name_or_path outputs/small-builtin --max_seq_length 512 \\
        --per_device_train_batch_size 8 --max_train_steps 89 --learning_rate 5e-4 --num_warmup_steps 10 ...

for `--extension_compute` (10%) of the original run's training compute: 8 sequences of 512 tokens a step (the
study's 4,096 tokens a step), as many steps as that compute buys (`training_flops`: 6N + 6·L·T·d per token, Kaplan
et al. 2020), at most 10% of the original steps. Beside it, the study's recipe at 512 tokens from the start (8
sequences a step, the sequence-length warmup scaled by 4) for the original steps plus the extension's: the same
tokens in all. Every model is evaluated at 128, 512 and 1,024 tokens on the study's held-out blocks and masks (loss,
order gap, unigram baseline). Writes `results.json` and `results.md` into --output_dir; resumable like the study.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any

from transformers import AutoTokenizer

from benchmarks.length_generalization import run as lg
from sinusoidal_encoder_training.cli.arguments import FlagConfig, check_positive, check_seeds, parse_config
from sinusoidal_encoder_training.cli.command_line import UsageError, front
from sinusoidal_encoder_training.configs import MODEL_SIZES
from sinusoidal_encoder_training.data.pipeline import SHIPPED_TOKENIZER

EXTENDED, SCRATCH = "extended", "scratch"


@dataclasses.dataclass(frozen=True, kw_only=True)
class ContextExtensionConfig(FlagConfig):
    """The settings of the experiment, checked."""

    study_dir: str = dataclasses.field(
        metadata={"help": "The --output_dir of benchmarks/length_generalization/run.py."}
    )
    output_dir: str = dataclasses.field(metadata={"help": "Where the runs and the report go."})
    arms: list[str] = dataclasses.field(
        default_factory=lambda: ["shipped", "stratified", "bert", "rotary", "alibi"],
        metadata={"help": "Arms of the study to extend.", "choices": list(lg.ARMS)},
    )
    seeds: list[int] = dataclasses.field(default_factory=lambda: [42], metadata={"help": "Seeds (the study's)."})
    length: int = dataclasses.field(default=512, metadata={"help": "The longer training length (tokens)."})
    extension_compute: float = dataclasses.field(
        default=0.10, metadata={"help": "The extension's training compute, as a share of the original run's."}
    )
    batch_size: int = dataclasses.field(
        default=8, metadata={"help": "Sequences a step at --length (8 × 512: the study's 4,096 tokens a step)."}
    )
    learning_rate: float = dataclasses.field(default=5e-4, metadata={"help": "Peak learning rate of the extension."})
    num_warmup_steps: int = dataclasses.field(default=10, metadata={"help": "Warmup steps of the extension."})

    def __post_init__(self) -> None:
        super().__post_init__()
        check_positive(self, "length", "batch_size", "num_warmup_steps")
        check_seeds(self, "seeds")
        if not 0 < self.extension_compute <= 0.1:
            raise UsageError(f"--extension_compute must be in (0, 0.1], got {self.extension_compute}.")
        if self.length % lg.TRAIN_LENGTH:
            raise UsageError(f"--length must be a multiple of the study's {lg.TRAIN_LENGTH} tokens.")
        if not os.path.isdir(self.study_dir):
            raise UsageError(
                f"--study_dir {self.study_dir!r} is not a folder: run benchmarks/length_generalization/run.py."
            )

    def study(self) -> lg.LengthGeneralizationConfig:
        """The study whose runs are extended, as its results.json records it (its recipe: size, steps, learning
        rate, model settings, evaluation lengths and masks), restricted to these arms and seeds."""
        path = os.path.join(self.study_dir, "results.json")
        if not os.path.isfile(path):
            raise UsageError(f"{path} does not exist: run benchmarks/length_generalization/run.py to the end first.")
        with open(path) as handle:
            arguments = json.load(handle)["arguments"]
        fields = {field.name for field in dataclasses.fields(lg.LengthGeneralizationConfig)}
        recorded = {name: value for name, value in arguments.items() if name in fields}
        return lg.LengthGeneralizationConfig(
            **{**recorded, "output_dir": self.study_dir, "arms": self.arms, "seeds": self.seeds, "finetune_arms": []}
        )


def training_flops(size: str, tokens: int, length: int) -> float:
    """Training compute of `tokens` tokens in sequences of `length` for the size preset `size`: 6N + 6·L·T·d per
    token, N the non-embedding parameters (Kaplan et al. 2020, "Scaling Laws for Neural Language Models")."""
    shape = MODEL_SIZES[size]
    d, layers = shape["hidden_size"], shape["num_hidden_layers"]
    parameters = layers * (4 * d * d + 2 * d * shape["intermediate_size"])
    return tokens * (6 * parameters + 6 * layers * length * d)


def original_flops(study: lg.LengthGeneralizationConfig) -> float:
    """The training compute of a run of the study (its sequence-length warmup counted as full blocks: an upper
    bound)."""
    tokens = study.max_train_steps * study.per_device_train_batch_size * lg.TRAIN_LENGTH
    return training_flops(study.config_name, tokens, lg.TRAIN_LENGTH)


def extension_steps(config: ContextExtensionConfig, study: lg.LengthGeneralizationConfig) -> int:
    """Steps of `batch_size` × `length` tokens that `extension_compute` of the original run's compute buys, at most
    that share of its steps."""
    original = original_flops(study)
    per_step = training_flops(study.config_name, config.batch_size * config.length, config.length)
    steps = min(config.extension_compute * original / per_step, config.extension_compute * study.max_train_steps)
    return max(1, int(steps))


def folder_of(config: ContextExtensionConfig, kind: str, arm: str, seed: int) -> str:
    """The run folder of an extended (`EXTENDED`) or from-the-start (`SCRATCH`) model."""
    return os.path.join(config.output_dir, kind, arm, f"seed{seed}")


def extend(config: ContextExtensionConfig, study: lg.LengthGeneralizationConfig, arm: str, seed: int) -> dict:
    """The arm's 128-token model continued at `length` for `extension_steps`."""
    folder = folder_of(config, EXTENDED, arm, seed)
    finished = lg.read_finished(folder)
    if finished is not None:
        return finished
    base = lg.run_folder(study, arm, seed)
    if lg.read_finished(base) is None:
        raise UsageError(
            f"{base} is not a finished run of the study: run benchmarks/length_generalization/run.py first."
        )
    steps = extension_steps(config, study)
    settings = dataclasses.replace(
        lg.arm_settings(study, arm, seed),
        config_overrides=None,  # the saved folder's own config
        model_name_or_path=None if arm == "bert" else base,
        max_seq_length=config.length,
        seq_length_schedule=None,
        per_device_train_batch_size=config.batch_size,
        max_train_steps=steps,
        learning_rate=config.learning_rate,
        num_warmup_steps=config.num_warmup_steps,
        eval_steps=steps,
        checkpointing_steps=max(1, steps // 4),
        output_dir=folder,
    )
    model = lg.SparseBertForMaskedLM.from_pretrained(base) if arm == "bert" else None
    print(f"\n=== extending {arm} (seed {seed}) to {config.length} tokens, {steps} steps -> {folder}")
    return lg.train_and_save(settings, model, {"arm": arm, "seed": seed, "from": base})


def from_scratch(config: ContextExtensionConfig, study: lg.LengthGeneralizationConfig, arm: str, seed: int) -> dict:
    """The arm trained at `length` from the start with the study's recipe, on the tokens of the original run and
    its extension."""
    folder = folder_of(config, SCRATCH, arm, seed)
    finished = lg.read_finished(folder)
    if finished is not None:
        return finished
    scale = config.length // lg.TRAIN_LENGTH
    schedule = ",".join(
        f"{int(length) * scale}:{step}"
        for length, step in (item.split(":") for item in (study.seq_length_schedule or "").split(",") if item)
    )
    settings = dataclasses.replace(
        lg.arm_settings(study, arm, seed),
        max_seq_length=config.length,
        seq_length_schedule=schedule or None,
        per_device_train_batch_size=config.batch_size,
        max_train_steps=study.max_train_steps + extension_steps(config, study),
        output_dir=folder,
    )
    model = lg.arm_model(arm, settings, max(study.eval_lengths))
    print(f"\n=== {arm} (seed {seed}) at {config.length} tokens from the start -> {folder}")
    return lg.train_and_save(settings, model, {"arm": arm, "seed": seed})


def run_experiment(config: ContextExtensionConfig) -> dict[str, Any]:
    """Every arm extended and trained from the start, all evaluated; the report written; returns the results."""
    study = config.study()
    os.makedirs(config.output_dir, exist_ok=True)
    runs = {}
    for seed in config.seeds:
        for arm in config.arms:
            runs[EXTENDED, arm, seed] = extend(config, study, arm, seed)
            runs[SCRATCH, arm, seed] = from_scratch(config, study, arm, seed)
    tokenizer = AutoTokenizer.from_pretrained(SHIPPED_TOKENIZER)
    batches = lg.evaluation_batches(tokenizer, study.eval_lengths, study)
    unigram = lg.training_unigram(tokenizer, study)
    evaluations = {}
    for seed in config.seeds:
        for arm in config.arms:
            for kind, folder in (
                ("128", lg.run_folder(study, arm, seed)),
                (EXTENDED, folder_of(config, EXTENDED, arm, seed)),
                (SCRATCH, folder_of(config, SCRATCH, arm, seed)),
            ):
                # the study's own runs: their cached evaluation; the others without the study's inference variants
                name = arm if kind == "128" else f"{arm}, {kind}"
                evaluations[kind, arm, seed] = lg.evaluate_arm(study, name, seed, batches, unigram, folder)
    steps = extension_steps(config, study)
    original = original_flops(study)
    extra = training_flops(study.config_name, steps * config.batch_size * config.length, config.length) / original
    results = {
        "arguments": dataclasses.asdict(config),
        "eval_lengths": list(study.eval_lengths),
        "extension_steps": steps,
        "extra_compute": extra,
        "evaluations": {"/".join(map(str, key)): value for key, value in evaluations.items()},
        "runs": {"/".join(map(str, key)): value for key, value in runs.items()},
    }
    with open(os.path.join(config.output_dir, "results.json"), "w") as handle:
        json.dump(results, handle, indent=2)
    tables = markdown(config, results)
    with open(os.path.join(config.output_dir, "results.md"), "w") as handle:
        handle.write(tables)
    print("\n" + tables)
    return results


def values_of(results: dict, kind: str, arm: str, key: str, length: int) -> list[float]:
    """One figure per seed."""
    seeds = results["arguments"]["seeds"]
    return [results["evaluations"][f"{kind}/{arm}/{seed}"][key][str(length)] for seed in seeds]


def mean_of(results: dict, kind: str, arm: str, key: str, length: int) -> float:
    return lg._mean(values_of(results, kind, arm, key, length))


def cell(values: list[float], form: str) -> str:
    """The mean, and ± half the spread between the seeds when there are several."""
    spread = f" ± {(max(values) - min(values)) / 2:.3f}" if len(values) > 1 else ""
    return f"{lg._mean(values):{form}}{spread}"


def targets(results: dict) -> list[tuple[str, str, bool]]:
    """Issue 44's targets: after extension, the paper's encoding (the shipped arm) within 0.05 nats at the longer
    length of the model trained there from the start, at ≤ 10% extra compute."""
    arguments = results["arguments"]
    if "shipped" not in arguments["arms"] or arguments["length"] not in results["eval_lengths"]:
        return []
    length = arguments["length"]
    differences = [
        extended - scratch
        for extended, scratch in zip(
            values_of(results, EXTENDED, "shipped", "loss", length),
            values_of(results, SCRATCH, "shipped", "loss", length),
            strict=True,
        )
    ]
    difference = lg._mean(differences)
    per_seed = ""
    if len(differences) > 1:
        seeds = arguments["seeds"]
        per_seed = " (" + ", ".join(f"seed {s}: {d:+.3f}" for s, d in zip(seeds, differences, strict=True)) + ")"
    return [
        (
            f"{lg.ARMS['shipped']}, extended: loss at {length} tokens within 0.05 nats of the model trained there",
            f"{difference:+.3f} nats{per_seed}",
            difference <= 0.05,
        ),
        ("extension at ≤ 10% extra compute", f"{results['extra_compute']:.1%}", results["extra_compute"] <= 0.10),
    ]


def markdown(config: ContextExtensionConfig, results: dict) -> str:
    lengths = results["eval_lengths"]
    steps = results["extension_steps"]
    lines = [
        f"Extension: {steps} steps of {config.batch_size} × {config.length} tokens from each arm's "
        f"{lg.TRAIN_LENGTH}-token model (lr {config.learning_rate:g}, {config.num_warmup_steps} warmup steps), "
        f"{results['extra_compute']:.1%} of the original run's training compute. From the start: the study's recipe "
        f"at {config.length} tokens for as many tokens in all. Masked-token-weighted loss on the held-out split, mean "
        f"over seeds {', '.join(map(str, config.seeds))}; order gap at {config.length} tokens.",
        "",
        "| arm | trained | " + " | ".join(f"{n} tokens" for n in lengths) + f" | order gap at {config.length} |",
        "|---|---|" + "---|" * (len(lengths) + 1),
    ]
    described = {
        "128": f"at {lg.TRAIN_LENGTH}",
        EXTENDED: f"at {lg.TRAIN_LENGTH}, then {steps} steps at {config.length}",
        SCRATCH: f"at {config.length} from the start",
    }
    for arm in config.arms:
        for kind, what in described.items():
            cells = [cell(values_of(results, kind, arm, "loss", n), ".3f") for n in lengths]
            gap = (
                cell(values_of(results, kind, arm, "order_gap", config.length), "+.3f")
                if config.length in lengths
                else "–"
            )
            lines.append(f"| {lg.ARMS[arm]} | {what} | " + " | ".join(cells) + f" | {gap} |")
    if len(config.seeds) > 1:
        lines += ["", "± is half the spread between the seeds. Per-seed numbers are in `results.json`."]
    reached = targets(results)
    if reached:
        lines += ["", "| target | measured | met |", "|---|---|---|"]
        lines += [f"| {target} | {measured} | {'yes' if met else '**no**'} |" for target, measured, met in reached]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> dict[str, Any]:
    return run_experiment(parse_config(ContextExtensionConfig, argv))


if __name__ == "__main__":
    with front():  # a bad flag value or a missing input: one line, no traceback
        main()
