"""The table and plot of the algorithmic benchmark's finished runs, beside Ruoss et al. (2023), Table 1.

python -m benchmarks.algorithmic.report        # -> benchmarks/algorithmic/results.md and results.png
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from .arms import ARMS
from .records import load_runs, results_file
from .run import RESULTS, RunSettings, stored_settings
from .tasks import get_task

HERE = Path(__file__).resolve().parent
ARM_LABELS = {
    "sincos": "ours: sin/cos (post-LN, as the paper)",
    "none": "ours without position encoding",
    "learned": "BERT: learned absolute positions",
    "randomized": 'ours + `position_mode="ordered_subset"` (the paper\'s randomized sin/cos)',
    "offset": 'ours + `position_mode="random_offset"`',
    "window": "ours + `long_input_attention_window`",
    "randomized_evenly": 'ours + `position_mode="ordered_subset"`, `position_inference="evenly_spaced"`',
    "stratified": 'ours + `position_mode="stratified"`, `position_inference="evenly_spaced"`',
}

# Ruoss et al. 2023 (arXiv 2305.16843, ACL 2023), Table 1, Transformer encoder, accuracy in % averaged over all test
# lengths 41–500 and MAXIMISED over seeds (the protocol of Delétang et al. 2023: 10 seeds × 3 learning rates, the
# score is the best of them). Transcribed from the published table as we recall it: no copy of the paper could be
# opened on the machine this benchmark ran on, so check these against the PDF before citing them further.
PAPER_TABLE_1 = {
    "reverse_string": {"none": 52.8, "sincos": 50.6, "randomized_sincos": 75.6},
    "duplicate_string": {"none": 52.8, "sincos": 50.7, "randomized_sincos": 72.4},
    "odds_first": {"none": 52.8, "sincos": 51.6, "randomized_sincos": 65.9},
    "bucket_sort": {"none": 23.7, "sincos": 30.1, "randomized_sincos": 100.0},
}
PAPER_COLUMN = {"none": "none", "sincos": "sincos", "randomized": "randomized_sincos"}  # our arm -> Table 1 column
PAPER_COLUMN_LABELS = {"none": "no encoding", "sincos": "sin/cos", "randomized_sincos": "randomized sin/cos"}
BASELINE_ARMS = ("sincos", "none", "learned")  # what the remedies are measured against; every other arm is a remedy


def _by_run(runs: list[dict]) -> list[dict]:
    """`runs` by task, arm, then seed, whatever order they ended in."""
    return sorted(runs, key=lambda run: (run["settings"]["task"], run["settings"]["arm"], run["settings"]["seed"]))


def study_runs(study: Path) -> list[dict]:
    """The finished runs of the study in folder `study` (its `results.jsonl`), by task, arm, then seed."""
    return _by_run(load_runs(results_file(study)))


def runs_by_task(results: Path) -> dict[str, dict[str, list[dict]]]:
    """{task: {arm: [run, ...]}} of every finished run of the study in `results`: tasks and arms in alphabetical
    order, seeds in order. A (task, arm, seed) recorded twice is refused: it would count twice."""
    runs: dict[str, dict[str, list[dict]]] = {}
    for run in study_runs(results):
        settings = run["settings"]
        seeds = runs.setdefault(settings["task"], {}).setdefault(settings["arm"], [])
        if seeds and seeds[-1]["settings"]["seed"] == settings["seed"]:
            raise ValueError(
                f"{results_file(results)}: {settings['task']}, arm {settings['arm']!r}, seed {settings['seed']} is "
                "recorded twice: keep one of its lines."
            )
        seeds.append(run)
    return runs


def past_training_mean(run: dict, key: str = "accuracy") -> float:
    """`key` ("accuracy" or "majority") averaged over every test length past training (41–500), as the paper
    averages: each bucket weighted by the number of lengths it covers."""
    total, weight = 0.0, 0
    for bucket in run["buckets"][1:]:
        low, high = (int(v) for v in bucket["bucket"].split("-"))
        total += bucket[key] * (high - low + 1)
        weight += high - low + 1
    return total / weight


def _spread(values: list[float]) -> str:
    if len(values) == 1:
        return f"{100 * values[0]:.1f}"
    return f"{100 * statistics.mean(values):.1f} ± {100 * statistics.stdev(values):.1f}"


def task_table(task: str, arms: dict[str, list[dict]]) -> str:
    first = next(iter(arms.values()))[0]
    buckets = [b["bucket"] for b in first["buckets"]]
    header = [
        "arm",
        *(f"{b}" + (" (train)" if i == 0 else "") for i, b in enumerate(buckets)),
        "41–500 mean",
        "41–500 max",
    ]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for arm in ARMS:
        if arm not in arms:
            continue
        runs = arms[arm]
        cells = [_spread([run["buckets"][i]["accuracy"] for run in runs]) for i in range(len(buckets))]
        scores = [past_training_mean(run) for run in runs]
        cells += [_spread(scores), f"{100 * max(scores):.1f}"]
        seeds = f"{len(runs)} seeds" if len(runs) > 1 else "1 seed"
        lines.append(f"| {ARM_LABELS[arm]} ({seeds}) | " + " | ".join(cells) + " |")
    majority = [f"{100 * b['majority']:.1f}" for b in first["buckets"]]
    ood_majority = 100 * past_training_mean(first, "majority")
    lines.append(
        "| majority symbol (best position-blind answer) | " + " | ".join(majority) + f" | {ood_majority:.1f} | |"
    )
    paper = PAPER_TABLE_1.get(task)
    if paper:
        blank = " | ".join("" for _ in buckets)
        lines.append(f"| paper, Table 1: no position encoding | {blank} | | {paper['none']:.1f} |")
        lines.append(f"| paper, Table 1: sin/cos | {blank} | | {paper['sincos']:.1f} |")
        lines.append(f"| paper, Table 1: randomized sin/cos | {blank} | | {paper['randomized_sincos']:.1f} |")
    return "\n".join(lines)


def summary_table(runs: dict[str, dict[str, list[dict]]]) -> str:
    """One row per arm: in distribution and 41–500 for every task (mean ± sd over seeds), then 41–500 averaged over
    the tasks, of the seeds' mean and of the best seed's (the paper's statistic; blank for an arm missing a task);
    then the paper's rows, averaged the same way."""
    tasks = list(runs)
    header = ["arm"]
    for task in tasks:
        steps = next(iter(runs[task].values()))[0]["settings"]["steps"]
        header += [f"{task}, 1–40 ({steps:,} steps)", f"{task}, 41–500"]
    header += ["41–500, mean over the tasks", "41–500 best seed, mean over the tasks"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for arm in ARMS:
        if not any(arm in runs[task] for task in tasks):
            continue
        cells, means, best = [], [], []
        for task in tasks:
            seeds = runs[task].get(arm, [])
            if not seeds:
                cells += ["not run", "not run"]
                continue
            tag = f" ({len(seeds)} seed{'s' if len(seeds) > 1 else ''})"
            cells += [_spread([run["buckets"][0]["accuracy"] for run in seeds]) + tag]
            cells += [_spread([past_training_mean(run) for run in seeds])]
            means.append(statistics.mean(past_training_mean(run) for run in seeds))
            best.append(max(past_training_mean(run) for run in seeds))
        complete = len(means) == len(tasks)
        cells += [f"{100 * statistics.mean(v):.1f}" if complete else "" for v in (means, best)]
        lines.append(f"| {ARM_LABELS[arm]} | " + " | ".join(cells) + " |")
    majority = []
    for task in tasks:
        first = next(iter(runs[task].values()))[0]
        majority += [
            f"{100 * first['buckets'][0]['majority']:.1f}",
            f"{100 * past_training_mean(first, 'majority'):.1f}",
        ]
    lines.append("| majority symbol (best position-blind answer) | " + " | ".join(majority) + " | | |")
    for key, label in PAPER_COLUMN_LABELS.items():
        cells = []
        for task in tasks:
            paper = PAPER_TABLE_1.get(task)
            cells += ["", f"{paper[key]:.1f} (max)" if paper else ""]
        known = [PAPER_TABLE_1[task][key] for task in tasks if task in PAPER_TABLE_1]
        cells += ["", f"{statistics.mean(known):.1f} (max)" if len(known) == len(tasks) else ""]
        lines.append(f"| paper, Table 1: {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def best_remedy(runs: dict[str, dict[str, list[dict]]], tasks: list[str]) -> str | None:
    """The remedy arm (not one of BASELINE_ARMS) run on every one of `tasks` with the highest 41–500 best seed
    averaged over them (the paper's statistic); the earlier arm of ARMS on a tie; None if no remedy ran them all."""
    scores = {
        arm: statistics.mean(max(past_training_mean(run) for run in runs[task][arm]) for task in tasks)
        for arm in ARMS
        if arm not in BASELINE_ARMS and tasks and all(arm in runs[task] for task in tasks)
    }
    return max(scores, key=lambda arm: (scores[arm], -ARMS.index(arm))) if scores else None


def paper_comparison(runs: dict[str, dict[str, list[dict]]]) -> str:
    """Our arms beside their Table 1 counterparts past training, task by task and averaged over the tasks: our best
    seed (the paper's statistic) and the mean of our seeds, and the best seed minus the paper's figure; the best
    remedy is set beside the paper's randomized sin/cos too. Then, in words, every figure of ours below the paper's
    and how the best remedy stands over the tasks."""
    tasks = [task for task in runs if task in PAPER_TABLE_1]
    remedy = best_remedy(runs, tasks)
    pairs = list(PAPER_COLUMN.items()) + (
        [(remedy, "randomized_sincos")] if remedy not in (None, "randomized") else []
    )
    header = [
        "task",
        "Table 1 column",
        "paper (best run)",
        "our arm",
        "ours: best seed",
        "ours: mean ± sd",
        "best − paper",
    ]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]

    def row(task: str, arm: str, column: str, paper: float, best: float, spread: str) -> str:
        cells = [task, PAPER_COLUMN_LABELS[column], f"{paper:.1f}", f"`{arm}`", f"{best:.1f}", spread]
        return "| " + " | ".join([*cells, f"{round(best, 1) - round(paper, 1):+.1f}"]) + " |"

    below, per_task = [], {}  # per_task: (arm, column) -> [(paper, best, mean) for each task it ran]
    for task in tasks:
        for arm, column in pairs:
            if arm not in runs[task]:
                continue
            scores = [past_training_mean(run) for run in runs[task][arm]]
            paper, best, mean = PAPER_TABLE_1[task][column], 100 * max(scores), 100 * statistics.mean(scores)
            per_task.setdefault((arm, column), []).append((paper, best, mean))
            lines.append(row(task, arm, column, paper, best, _spread(scores)))
            if round(best, 1) < round(paper, 1):
                below.append(f"`{arm}` on {task} ({best:.1f} against {paper:.1f})")
    over_tasks = {
        pair: tuple(statistics.mean(values) for values in zip(*known, strict=True))
        for pair, known in per_task.items()
        if len(known) == len(tasks)
    }
    for (arm, column), (paper, best, mean) in over_tasks.items():
        lines.append(row("mean over the tasks", arm, column, paper, best, f"{mean:.1f}"))
    words = [
        f"Below the paper's figure (our best seed against its best run, per task): {'; '.join(below)}."
        if below
        else "No best seed of ours is below the paper's figure."
    ]
    if (remedy, "randomized_sincos") in over_tasks:
        paper, best, mean = over_tasks[remedy, "randomized_sincos"]
        words.append(
            f"Our best remedy over the {len(tasks)} tasks, `{remedy}`: {best:.1f} (best seed per task) and {mean:.1f} "
            f"(mean of seeds) against the paper's randomized sin/cos {paper:.1f}, "
            f"{'above' if round(best, 1) > round(paper, 1) else 'not above'} it on the paper's statistic and "
            f"{'above' if round(mean, 1) > round(paper, 1) else 'not above'} it on the mean of seeds."
        )
    return "\n".join(lines) + "\n\n" + " ".join(words)


def settings_line(arms: dict[str, list[dict]]) -> str:
    s = next(iter(arms.values()))[0]["settings"]
    size = s["size"]
    minutes = [run["train_seconds"] / 60 for runs in arms.values() for run in runs]
    return (
        f"{s['steps']} steps × {s['batch_size']} inputs (lengths 1–{s['train_length']}, a fresh length per batch), "
        f"AdamW lr {s['learning_rate']} ({s['lr_scheduler_type']}, warmup {s['warmup_steps']}), clip "
        f"{s['max_grad_norm']}; {size['num_hidden_layers']} layers, d={size['hidden_size']}, "
        f"{size['num_attention_heads']} heads, d_ff={size['intermediate_size']}, dropout {size['dropout']}; "
        f"{s['lengths_per_bucket']} test lengths per bucket × {s['test_examples']} inputs; training "
        f"{min(minutes):.1f}–{max(minutes):.1f} min per run on one CPU thread."
    )


def curve_table(arms: dict[str, list[dict]]) -> str:
    """In-distribution accuracy (lengths 10–40) during training, mean over seeds, for every arm."""
    steps = [point["step"] for point in next(iter(arms.values()))[0]["curve"]]
    every = -(-len(steps) // 12)  # at most 12 rows, the last step always among them
    rows = [i for i in range(len(steps)) if (len(steps) - 1 - i) % every == 0]
    lines = ["| step | " + " | ".join(arm for arm in ARMS if arm in arms) + " |", "|---|" + "---|" * len(arms)]
    for i in rows:
        step = steps[i]
        cells = []
        for arm in ARMS:
            if arm in arms:
                values = [run["curve"][i]["accuracy_10_to_40"] for run in arms[arm] if len(run["curve"]) > i]
                cells.append(f"{100 * statistics.mean(values):.1f}")
        lines.append(f"| {step} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


STUDY_STEPS = (1000, 2000, 3000, 4000, 5000, 8000, 12000)


def study_label(run: dict) -> str:
    s = run["settings"]
    norm = "pre-LN" if s["size"].get("norm_first") else "post-LN"
    return (
        f"{s['task']}, {s['arm']} seed {s['seed']}: {norm}, lr {s['learning_rate']:g} (warmup {s['warmup_steps']}), "
        f"batch {s['batch_size']}, {s['steps']} steps"
    )


def study_table(runs: list[dict]) -> str:
    """Single runs side by side: in-distribution accuracy (lengths 10–40) at fixed steps, then the final buckets."""
    header = ["run", *(f"step {n}" for n in STUDY_STEPS), "final 1–40", "final 41–500"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for run in sorted(runs, key=study_label):
        at = {point["step"]: point["accuracy_10_to_40"] for point in run["curve"]}
        cells = [f"{100 * at[n]:.1f}" if n in at else "" for n in STUDY_STEPS]
        cells += [f"{100 * run['buckets'][0]['accuracy']:.1f}", f"{100 * past_training_mean(run):.1f}"]
        lines.append(f"| {study_label(run)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


# folders of `runs-probes/` that change one training setting
SETTING_STUDIES = ("batch*", "steps*", "dropout*", "loss-*", "lr*")
BUDGET_STUDY = "budget"  # folder of `runs-probes/` holding the 3,000-step single runs that chose the budget


def setting_runs(probes: Path) -> list[dict]:
    """The runs of the studies that change one training setting: `probes`/batch*/ (larger batches), steps*/ (more
    steps), dropout*/ (dropout), loss-*/ (the loss summed over each input's outputs) and lr*/ (the peak learning
    rate), study by study in alphabetical order."""
    studies = sorted({study for pattern in SETTING_STUDIES for study in probes.glob(pattern) if study.is_dir()})
    return [run for study in studies for run in study_runs(study)]


def _setting_key(settings: dict) -> tuple[str, str, int, int, float, str, float]:
    settings = stored_settings(settings)
    return (
        settings["task"],
        settings["arm"],
        settings["steps"],
        settings["batch_size"],
        settings["size"]["dropout"],
        settings["loss_reduction"],
        settings["learning_rate"],
    )


def _rate(value: float) -> str:
    """A learning rate as written on the command line: 0.0003 -> "3e-4", 0.00025 -> "2.5e-4"."""
    mantissa, exponent = f"{value:.6e}".split("e")
    return f"{mantissa.rstrip('0').rstrip('.')}e{int(exponent)}"


def setting_table(results: Path, probes: Path) -> str:
    """Runs trained with one setting changed (`setting_runs`: more inputs per step, more steps, dropout, the loss's
    reduction, the learning rate) beside the benchmark's runs of the same task, arm and seeds: per (task, arm, steps,
    batch, dropout, reduction, learning rate), mean ± sd over those seeds in each bucket, the 41–500 mean, the best
    seed's, the minutes of training per run and where it ran. Within a budget, rows go by dropout, reduction, then
    learning rate."""
    benchmark = {(r["settings"]["task"], r["settings"]["arm"], r["settings"]["seed"]): r for r in study_runs(results)}
    groups: dict[tuple[str, str, int, int, float, str, float], list[dict]] = {}
    for run in setting_runs(probes):
        s = run["settings"]
        groups.setdefault(_setting_key(s), []).append(run)
        base = benchmark.get((s["task"], s["arm"], s["seed"]))
        if base is not None:  # the benchmark's run of the same seed, once per (task, arm) and seed
            run = base
            group = groups.setdefault(_setting_key(run["settings"]), [])
            if all(other["settings"]["seed"] != s["seed"] for other in group):
                group.append(run)
    buckets = [b["bucket"] for b in next(iter(groups.values()))[0]["buckets"]]
    header = ["task", "arm", "steps × batch, setting changed", "seeds", *buckets, "41–500 mean", "41–500 max"]
    header += ["min per run", "on"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for (task, arm, steps, batch, dropout, reduction, learning_rate), runs in sorted(
        groups.items(),
        key=lambda item: (item[0][0], ARMS.index(item[0][1]), item[0][2] * item[0][3], item[0][2], *item[0][4:]),
    ):
        runs.sort(key=lambda run: run["settings"]["seed"])
        seeds = ", ".join(str(run["settings"]["seed"]) for run in runs)
        training = f"{steps:,} × {batch}" + (f", dropout {dropout:g}" if dropout else "")
        training += ", loss summed over each input's outputs" if reduction == "sum" else ""
        training += f", learning rate {_rate(learning_rate)}" if learning_rate != RunSettings.learning_rate else ""
        cells = [task, arm, training, seeds]
        cells += [_spread([run["buckets"][i]["accuracy"] for run in runs]) for i in range(len(buckets))]
        scores = [past_training_mean(run) for run in runs]
        cells += [_spread(scores), f"{100 * max(scores):.1f}"]
        minutes = [run["train_seconds"] / 60 for run in runs if run.get("train_seconds") is not None]
        low, high = (f"{min(minutes):.0f}", f"{max(minutes):.0f}") if minutes else ("", "")
        cells.append(low if low == high else f"{low}–{high}")  # empty where no run kept its training time
        cells.append(runs[0].get("device", "cpu").replace("cpu", "CPU, 1 thread"))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


SEED_STUDY = "seeds"  # folder of `runs-probes/` holding more seeds of benchmark runs, every other setting the same


def _without_seed(settings: dict) -> dict:
    return {key: value for key, value in stored_settings(settings).items() if key != "seed"}


def seed_spread_table(results: Path, probes: Path) -> str:
    """The benchmark's runs of a task and arm together with the extra seeds of `probes`/seeds/: the spread over all
    the seeds (mean ± sd, worst and best of 41–500) beside the paper's figure, which is a best run. The extra runs must
    have the benchmark runs' settings but the seed: a run that differs otherwise, or repeats a seed, is refused."""
    study, benchmark = results_file(probes / SEED_STUDY), study_runs(results)
    extra: dict[tuple[str, str], list[dict]] = {}
    for run in study_runs(probes / SEED_STUDY):
        extra.setdefault((run["settings"]["task"], run["settings"]["arm"]), []).append(run)
    header = ["task", "arm", "seeds", "1-40", "41–500 mean", "41–500 min", "41–500 max", "paper, Table 1 (max)"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for (task, arm), added in sorted(extra.items(), key=lambda item: (item[0][0], ARMS.index(item[0][1]))):
        base = [run for run in benchmark if (run["settings"]["task"], run["settings"]["arm"]) == (task, arm)]
        if not base:
            raise ValueError(f"{study}: no benchmark run of arm {arm!r} on {task} in {results_file(results)}.")
        for run in added:
            if _without_seed(run["settings"]) != _without_seed(base[0]["settings"]):
                raise ValueError(
                    f"{study}: seed {run['settings']['seed']} of arm {arm!r} on {task} was not trained with the "
                    "benchmark run's settings (only the seed may differ)."
                )
        runs = sorted(base + added, key=lambda run: run["settings"]["seed"])
        seeds = [run["settings"]["seed"] for run in runs]
        if len(set(seeds)) != len(seeds):
            raise ValueError(f"{study}: arm {arm!r} on {task} repeats a seed of the benchmark: {seeds}.")
        scores = [past_training_mean(run) for run in runs]
        paper = PAPER_TABLE_1.get(task, {}).get(PAPER_COLUMN.get(arm, ""))
        contiguous = seeds == list(range(seeds[0], seeds[-1] + 1))
        listed = f"{seeds[0]}–{seeds[-1]}" if contiguous and len(seeds) > 2 else ", ".join(map(str, seeds))
        cells = [task, arm, f"{len(runs)}: {listed}"]
        cells += [_spread([run["buckets"][0]["accuracy"] for run in runs]), _spread(scores)]
        cells += [f"{100 * min(scores):.1f}", f"{100 * max(scores):.1f}", "" if paper is None else f"{paper:.1f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot(runs: dict[str, dict[str, list[dict]]], path: Path) -> None:
    from sinusoidal_encoder_training.publishing.plots import figure

    tasks = list(runs)
    fig = figure(figsize=(5 * len(tasks), 7.5))
    axes = fig.subplots(2, len(tasks), squeeze=False)
    for column, task in enumerate(tasks):
        top, bottom = axes[0][column], axes[1][column]
        for arm in ARMS:
            if arm not in runs[task]:
                continue
            seeds = runs[task][arm]
            lengths = sorted(int(n) for n in seeds[0]["lengths"])
            values = [[run["lengths"][str(n)]["accuracy"] for run in seeds] for n in lengths]
            mean = [statistics.mean(v) for v in values]
            (line,) = top.plot(lengths, mean, marker=".", label=arm, color=f"C{ARMS.index(arm)}")  # one colour per arm
            top.fill_between(
                lengths, [min(v) for v in values], [max(v) for v in values], color=line.get_color(), alpha=0.15
            )
            steps = [p["step"] for p in seeds[0]["curve"]]
            curve = [statistics.mean(run["curve"][i]["accuracy_10_to_40"] for run in seeds) for i in range(len(steps))]
            bottom.plot(steps, curve, color=line.get_color(), label=arm)
        seeds = next(iter(runs[task].values()))
        lengths = sorted(int(n) for n in seeds[0]["lengths"])
        top.plot(lengths, [seeds[0]["lengths"][str(n)]["majority"] for n in lengths], "k--", lw=1, label="majority")
        top.axvline(seeds[0]["settings"]["train_length"], color="grey", lw=0.8)
        top.set(
            title=get_task(task).name, xscale="log", xlabel="input length", ylabel="per-token accuracy", ylim=(0, 1.02)
        )
        bottom.set(xlabel="training step", ylabel="accuracy, lengths 10–40", ylim=(0, 1.02))
        top.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def report(
    results: Path = RESULTS, out: Path = HERE / "results.md", picture: Path | None = HERE / "results.png"
) -> str:
    runs = runs_by_task(results)
    if not runs:
        raise ValueError(
            f"No finished runs in {results_file(results)}: run `python -m benchmarks.algorithmic.run` first."
        )
    parts = [
        "# Algorithmic length generalisation: results",
        "",
        "Written by `python -m benchmarks.algorithmic.report` from the runs in `benchmarks/algorithmic/runs/` "
        "(see `benchmarks/algorithmic/README.md` for the setup). Per-token accuracy (%) at the output positions, "
        "mean ± standard deviation over seeds, in each bucket of input lengths; `41–500 mean` averages every test "
        "length past training (buckets weighted by the lengths they cover), `41–500 max` is the best seed, the "
        "paper's statistic.",
        "",
        "The paper's figures are Ruoss et al. (2023), Table 1: accuracy averaged over test lengths 41–500 and "
        "**maximised** over seeds (10 seeds × 3 learning rates, the protocol of Delétang et al. 2023), after longer "
        "training than ours (the reference code's example script alone runs 10,000 steps of 128 inputs). "
        "They were transcribed from the published table without access to the paper on "
        "this machine: check them against arXiv 2305.16843 before citing them further.",
    ]
    parts += ["", "## Summary", "", summary_table(runs)]
    if any(task in PAPER_TABLE_1 for task in runs):
        parts += [
            "",
            "## Against the paper's Table 1",
            "",
            "Accuracy (%) past training (41–500) of each of our arms that has a counterpart in the paper's Table 1, "
            "and of our best remedy (the arm, other than sin/cos, no encoding and learned positions, with the best "
            "41–500 best seed averaged over the tasks) beside the paper's randomized sin/cos. The paper's figure is "
            "its best run of 30 (10 seeds × 3 learning rates); ours is the best of the seeds in `runs/`, so the "
            "comparison leans the paper's way, and the mean of our seeds stands beside it.",
            "",
            paper_comparison(runs),
        ]
    for task, arms in runs.items():
        parts += [
            "",
            f"## {task} ({get_task(task).level})",
            "",
            settings_line(arms),
            "",
            task_table(task, arms),
            "",
            "In-distribution accuracy (lengths 10, 20, 30, 40) during training, mean over seeds:",
            "",
            curve_table(arms),
        ]
    studies = study_runs(HERE / "runs-probes" / BUDGET_STUDY) + runs.get("reverse_string", {}).get("sincos", [])
    if studies and results == RESULTS:
        parts += [
            "",
            "## Budget studies: single runs of the sinusoidal arm",
            "",
            "Accuracy (%) on lengths 10–40 during training (the in-distribution curve), then the final accuracy in "
            "distribution and over the test lengths 41–500. The 3,000-step runs (`runs-probes/budget/`) tried the "
            "learning rate and the norm placement on Reverse String, and the budget of Odds First (where no arm "
            "learned the task in 3,000 steps: `runs-probes/odds_first-3000/` holds every arm's run); the 12,000-step "
            "rows are the runs of the table above.",
            "",
            study_table(studies),
        ]
    if setting_runs(HERE / "runs-probes") and results == RESULTS:
        parts += [
            "",
            "## Training-setting studies: larger batches, dropout, the reference code's loss, learning rates, "
            "longer training",
            "",
            "Runs with one training setting changed, the others unchanged, beside the benchmark's runs of the same "
            "seeds. Larger batches: the randomized arm with 128 inputs per step (the reference code's; "
            "`runs-probes/batch128/`, on this machine's CPU) and 512 (`runs-probes/batch512/`, on an NVIDIA H100, "
            "six or three runs sharing it) instead of 32, and the stratified arm with 128. Dropout 0.1 (the "
            "reference code's; `runs-probes/dropout0.1/`) instead of 0, and the loss summed over each input's "
            "outputs and averaged over the batch (the reference code's; `runs-probes/loss-sum/`) instead of "
            "averaged over every output of the batch, on the stratified arm. The sinusoidal arm on Bucket Sort at "
            "the learning rates 3e-4 and 3e-3 (`runs-probes/lr3e-4/`, `runs-probes/lr3e-3/`) around the benchmark's "
            "1e-3, since the paper's figure is the best over 3 learning rates, and trained 12,000 steps instead of "
            "2,000 (`runs-probes/steps12000/`). Per-token accuracy (%) by bucket of "
            "input lengths, mean ± sd over the seeds listed; `randomized_evenly` is the randomized arm's weights "
            "evaluated with evenly spaced positions. One H100 run (Reverse String seed 2) came back without its "
            "training record: its accuracies are its kept weights evaluated on the same GPU afterwards (the file "
            "says so), as are the Reverse String `randomized_evenly` rows at batch 512.",
            "",
            setting_table(results, HERE / "runs-probes"),
        ]
    if (HERE / "runs-probes" / SEED_STUDY).is_dir() and results == RESULTS:
        parts += [
            "",
            "## More seeds",
            "",
            "The benchmark trains 3 seeds per arm; the paper's figure is the best of many runs. Arms given more "
            f"seeds (`runs-probes/{SEED_STUDY}/`, trained exactly as the benchmark's runs but for the seed), with "
            "the benchmark's own seeds: per-token accuracy (%) in distribution (mean ± sd) and past training "
            "(41–500: mean ± sd, the worst and the best seed), beside the paper's best run.",
            "",
            seed_spread_table(results, HERE / "runs-probes"),
        ]
    text = "\n".join(parts) + "\n"
    out.write_text(text)
    if picture is not None:
        plot(runs, picture)
    return text


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--results_dir", default=str(RESULTS), help="The study's folder, whose results.jsonl holds its finished runs."
    )
    parser.add_argument("--out", default=str(HERE / "results.md"), help="The markdown report to write.")
    parser.add_argument("--plot", default=str(HERE / "results.png"), help="The picture to write ('' for none).")
    args = parser.parse_args(argv)
    print(report(Path(args.results_dir), Path(args.out), Path(args.plot) if args.plot else None))


if __name__ == "__main__":
    main()
