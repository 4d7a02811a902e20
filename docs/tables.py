"""The tables of results in the documentation, generated from the committed result files, so that no figure goes stale.

    python docs/tables.py           # rewrites every table region of the pages
    python docs/tables.py --check   # exits 1 naming each stale table and each README figure off its source

A region of a page holds one generated table and the note naming its source, between two HTML comments:

    <!-- table: NAME (python docs/tables.py) -->
    ...
    <!-- end table -->

Nothing outside the regions is touched. The sources: a markdown report written by a benchmark is itself the committed
result file (`benchmarks/speed/results-small.md` by `benchmarks/speed/run.py`, `benchmarks/order_recipe/results.md`):
its table rows are read by their label, never by position. JSON records are read by key: the length experiment's
`benchmarks/length_generalization/results.json` (the harness's results.json), the utilization, deployment and
fine-tuning records, and the sentence-embedding lines `benchmarks/sentence_embeddings/results.jsonl`. The algorithmic
tasks' table is computed from the per-run records `benchmarks/algorithmic/runs/results.jsonl` by the functions of
`benchmarks/algorithmic/report.py`, which write `benchmarks/algorithmic/results.md` too.
`tests/repository/test_docs.py` runs the check, and checks README's headline figures (section "Results") against
the same sources (`readme_problems`).
A figure in the prose outside the regions names the date and machine of its measurement instead
(`tests/repository/test_claims.py`, `test_measured_figures_in_prose_carry_a_date_or_come_from_a_result_file`).
"""

from __future__ import annotations

import argparse
import difflib
import json
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # `python docs/tables.py` puts docs/ first on the path, not the repository
    sys.path.insert(0, str(REPO))

BLOB = "https://github.com/sinusoidal-encoder/sinusoidal-encoder/blob/main/"  # mkdocs --strict: no links out of docs/
COMMAND = "python docs/tables.py"
START = re.compile(r"^<!-- table: (?P<name>[\w-]+) \(python docs/tables\.py\) -->[ \t]*$")
END = "<!-- end table -->"


# a record keeps the command it was run with; a page shows the command that runs the study now (each study of
# benchmarks/ became a folder, its command `python -m benchmarks.STUDY.run`)
OLD_COMMANDS = (
    ("python benchmarks/benchmark.py", "python -m benchmarks.speed.run"),
    ("python benchmarks/utilization.py", "python -m benchmarks.utilization.run"),
    ("python -m benchmarks.deployment", "python -m benchmarks.deployment.run"),
    ("python -m benchmarks.gpu", "python -m benchmarks.gpu.run"),
)


def current_command(command: str) -> str:
    """`command` as it runs now: a recorded command of a study from before its folder, in its new form."""
    for old, new in OLD_COMMANDS:
        if command == old or command.startswith(old + " "):
            return new + command[len(old) :]
    return command


def link(path: str) -> str:
    """A markdown link to a file of the repository, by its absolute GitHub address."""
    return f"[{path}]({BLOB}{path})"


# ----------------------------------------------------------------------------------------------------------------
# reading the markdown reports


def markdown_tables(text: str) -> list[list[list[str]]]:
    """Every table of a markdown text: a list of rows (the header first, the `|---|` line left out), each a list of
    cells, stripped."""
    tables, current = [], None
    for line in text.splitlines():
        if line.startswith("|"):
            cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
            if current is None:
                current = []
                tables.append(current)
            if not all(re.fullmatch(r":?-+:?", cell) for cell in cells):
                current.append(cells)
        else:
            current = None
    return tables


@dataclass
class Rows:
    """The rows of one table of a report, by label (the first cell), each as {column header: cell}."""

    path: str  # from the repository root
    rows: dict[str, dict[str, str]]

    def find(self, label: str | re.Pattern) -> dict[str, str] | None:
        if isinstance(label, str):
            return self.rows.get(label)
        found = [row for name, row in self.rows.items() if label.fullmatch(name)]
        if len(found) > 1:
            raise ValueError(f"{self.path}: {len(found)} rows match {label.pattern!r}.")
        return found[0] if found else None

    def cell(self, label: str | re.Pattern, column: str) -> str:
        row = self.find(label)
        name = label if isinstance(label, str) else label.pattern
        if row is None:
            raise ValueError(f"{self.path}: no row {name!r} (the rows: {list(self.rows)}).")
        if column not in row:
            raise ValueError(f"{self.path}: no column {column!r} (the columns: {list(row)}).")
        return row[column]


def report_rows(path: str, column: str, text: str | None = None) -> Rows:
    """The rows of the one table of the report `path` (or of `text`) whose header has the column `column`."""
    text = (REPO / path).read_text(encoding="utf-8") if text is None else text
    found = [table for table in markdown_tables(text) if column in table[0]]
    if len(found) != 1:
        raise ValueError(f"{path}: {len(found)} tables with a column {column!r}, expected 1.")
    header, *body = found[0]
    rows: dict[str, dict[str, str]] = {}
    for cells in body:
        if cells[0] in rows:
            raise ValueError(f"{path}: the row {cells[0]!r} appears twice.")
        rows[cells[0]] = dict(zip(header, cells, strict=False))
    return Rows(path, rows)


def table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines).replace("|  |", "| |")


def present_flags(flags: dict[str, bool]) -> str:
    """The CPU flags a result record found present, as the notes list them."""
    return ", ".join(flag for flag, present in flags.items() if present) or "none of them"


def minus(value: str) -> str:
    """A number as the pages write it: a typographic minus."""
    return "−" + value[1:] if value.startswith("-") else value


# ----------------------------------------------------------------------------------------------------------------
# the tables


ORDER_RECIPE = "benchmarks/order_recipe/results.md"
ORDER_ROWS = (  # (label on the page, arm in the report, in bold)
    ("the previous main job: post-LN, dropout 0.1, lr 5e-4, 300 steps", "v16k_paper", False),
    (
        "the main job as shipped: pre-LN, no dropout, lr 2e-3, length warmup, bf16, 1,000 steps",
        "main_v16k_1000",
        True,
    ),
    ("the same with the position encoding switched off", "main_v16k_1000_no_position", False),
)


def order_recipe_table() -> str:
    source = report_rows(ORDER_RECIPE, "order gap")
    rows = []
    for label, arm, bold in ORDER_ROWS:
        tokens = int(source.cell(arm, "tokens").replace(",", ""))
        gap = minus(source.cell(arm, "order gap"))
        cells = [f"{tokens / 1e6:.2f}M", source.cell(arm, "eval loss"), source.cell(arm, "below unigram")]
        rows.append([label, *cells, f"**{gap}**" if bold else gap])
    header = ["recipe (small preset, 7.4M parameters)", "tokens", "eval loss", "below unigram", "order gap"]
    note = (
        f"Source: {link(ORDER_RECIPE)} (every arm, with the order gap at each evaluation; "
        "`python -m benchmarks.order_recipe.run`)."
    )
    return table(header, rows) + "\n\n" + note


LENGTH = "benchmarks/length_generalization/results.md"
LENGTH_DATA = "benchmarks/length_generalization/results.json"  # the harness's results.json: arguments and summary
LENGTH_ARMS = ("shipped", "stratified", "ordered_subset", "offset", "rotary", "alibi", "bert", "no_position")


def length_summary() -> dict:
    return json.loads((REPO / LENGTH_DATA).read_text())["summary"]


def length_figure(arm: str, key: str, length: int) -> float:
    """The mean over seeds of one figure (`loss`, `order_gap`, ...) of an arm at a length, from the data file."""
    values = length_summary()["arms"][arm][key][str(length)]
    return sum(values) / len(values)


def seed_spread(values: list[float], spec: str) -> str:
    """The mean of one figure over seeds, and with several seeds ± half their range: '4.263 ±0.016'."""
    mean = sum(values) / len(values)
    if len(values) == 1:
        return format(mean, spec)
    return f"{format(mean, spec)} ±{format((max(values) - min(values)) / 2, spec.lstrip('+'))}"


def length_table() -> str:
    """Loss and order gap at the training length and at 4× and 8× it, per arm, then issue 33's targets as the
    harness judges them (`targets`), from benchmarks/length_generalization/results.json."""
    from benchmarks.length_generalization.run import ARMS, targets

    summary = length_summary()
    train = summary["train_length"]
    four, eight = 4 * train, 8 * train
    rows = []
    for arm in (arm for arm in LENGTH_ARMS if arm in summary["arms"]):
        figures = summary["arms"][arm]
        loss = {n: figures["loss"][str(n)] for n in (train, four, eight)}
        gap = {n: figures["order_gap"][str(n)] for n in (train, four)}
        rise = [at_four - at_train for at_four, at_train in zip(loss[four], loss[train], strict=True)]
        rows.append(
            [
                ARMS[arm],
                *(seed_spread(loss[n], ".3f") for n in (train, four, eight)),
                minus(seed_spread(rise, "+.3f")),
                *(minus(seed_spread(gap[n], "+.2f")) for n in (train, four)),
            ]
        )
    seeds = next(iter(summary["arms"].values()))["seeds"]
    header = [
        f"arm (seed{'s' if len(seeds) > 1 else ''} {', '.join(map(str, seeds))})",
        f"loss at {train}",
        f"at {four:,}",
        f"at {eight:,}",
        f"rise at {four}",
        f"order gap at {train}",
        f"at {four}",
    ]
    checks = [[target, minus(measured), "yes" if met else "**no**"] for target, measured, met in targets(summary)]
    spread = " Each cell: the mean over the seeds ± half their range." if len(seeds) > 1 else ""
    finetuned = any(figures.get("finetune") for figures in summary["arms"].values())
    contents = ", the variants and the fine-tuning" if finetuned else " and the variants"
    note = (
        f"Source: {link(LENGTH_DATA)}.{spread} The report with every length{contents}: "
        f"{link(LENGTH)}; the pictures: {link('benchmarks/length_generalization/results.png')} "
        "(against evaluation length), "
        f"{link('benchmarks/length_generalization/curves.png')} (during pretraining)."
    )
    return "\n\n".join([table(header, rows), table(["target", "measured", "met"], checks), note])


LENGTH_BUDGET_DATA = "benchmarks/length_generalization/results-2x.json"
# the same arms at the main job's budget, run beside the 2× ones (2026-11-26, before the tokenizer of 2026-11-27)
LENGTH_BUDGET_BASE = "benchmarks/length_generalization/results-1x.json"
BUDGETS = {"1×": LENGTH_BUDGET_BASE, "2×": LENGTH_BUDGET_DATA}
LENGTH_BUDGET = "benchmarks/length_generalization/results-2x.md"


def length_budget_table() -> str:
    """The arms pretrained twice as long beside themselves at the main job's budget (seed 42 of both runs): loss and
    order gap at the training length and at 4× it, and the share of the gap kept, from the two data files."""
    from benchmarks.length_generalization.run import ARMS

    budgets = {name: json.loads((REPO / path).read_text())["summary"] for name, path in BUDGETS.items()}
    train = budgets["2×"]["train_length"]
    four = 4 * train
    rows = []
    for arm in (arm for arm in LENGTH_ARMS if arm in budgets["2×"]["arms"]):
        for budget, summary in budgets.items():
            figures = summary["arms"][arm]
            index = figures["seeds"].index(42)  # the seed both budgets ran
            loss = {n: figures["loss"][str(n)][index] for n in (train, four)}
            gap = {n: figures["order_gap"][str(n)][index] for n in (train, four)}
            tokens = figures["tokens_seen"] / 1e6
            rows.append(
                [
                    f"{ARMS[arm]}, {budget} ({tokens:.1f}M tokens)",
                    f"{loss[train]:.3f}",
                    f"{loss[four]:.3f}",
                    minus(f"{loss[four] - loss[train]:+.3f}"),
                    minus(f"{gap[train]:+.2f}"),
                    minus(f"{gap[four]:+.2f}"),
                    f"{gap[four] / gap[train]:.0%}",
                ]
            )
    header = ["arm, budget (seed 42)", f"loss at {train}", f"at {four}", "rise", f"order gap at {train}", f"at {four}"]
    header.append("gap kept")
    note = f"Source: {link(LENGTH_BUDGET_DATA)} and {link(LENGTH_BUDGET_BASE)}; the report: {link(LENGTH_BUDGET)}."
    return table(header, rows) + "\n\n" + note


ALGORITHMIC_RECORDS = "benchmarks/algorithmic/runs/results.jsonl"
ALGORITHMIC_REPORT = "benchmarks/algorithmic/results.md"
ALGORITHMIC_TASKS = ("bucket_sort", "reverse_string", "duplicate_string", "odds_first")
ALGORITHMIC_ROWS = (  # (label on the page, arm)
    ("no position encoding (= the majority symbol)", "none"),
    ("sin/cos (the paper's encoding)", "sincos"),
    ("BERT, learned absolute positions", "learned"),
    ('`position_mode="ordered_subset"` (the paper\'s randomized sin/cos)', "randomized"),
    ('the same weights, `position_inference="evenly_spaced"`', "randomized_evenly"),
    ('`position_mode="stratified"`, `position_inference="evenly_spaced"` (ours)', "stratified"),
)
PAPER_ROW = "paper, Table 1: randomized sin/cos"


def algorithmic_summary() -> tuple[Rows, dict[str, dict[str, list[dict]]]]:
    """The summary table of benchmarks/algorithmic/results.md, computed afresh from the runs' records by
    benchmarks/algorithmic/report.py, and the runs themselves."""
    from benchmarks.algorithmic import report

    runs = report.runs_by_task(REPO / Path(ALGORITHMIC_RECORDS).parent)
    text = report.summary_table(runs)
    return report_rows(ALGORITHMIC_RECORDS, "arm", text=text), runs


def algorithmic_table() -> str:
    from benchmarks.algorithmic.report import ARM_LABELS, PAPER_TABLE_1

    summary, runs = algorithmic_summary()
    seeds = {len(runs[task][arm]) for task in ALGORITHMIC_TASKS for _, arm in ALGORITHMIC_ROWS}
    if len(seeds) != 1:
        raise ValueError(f"{ALGORITHMIC_RECORDS}: the arms of the table have different numbers of seeds: {seeds}.")
    rows = []
    for label, arm in ALGORITHMIC_ROWS:
        # "73.9 ± 0.7": the mean over the seeds, then their standard deviation
        means = [summary.cell(ARM_LABELS[arm], f"{task}, 41–500").split()[0] for task in ALGORITHMIC_TASKS]
        rows.append([label, *means])
    rows.append(
        ["paper, Table 1: randomized sin/cos (best of 30 runs)"]
        + [f"{PAPER_TABLE_1[task]['randomized_sincos']:.1f}" for task in ALGORITHMIC_TASKS]
    )
    header = ["arm", *(task.replace("_", " ").title() for task in ALGORITHMIC_TASKS)]
    caption = f"Per-token accuracy (%) past the training length (lengths 41–500), mean of {seeds.pop()} seeds:"
    note = (
        f"Computed from the runs' records, {link(ALGORITHMIC_RECORDS)}, by `benchmarks/algorithmic/report.py`. "
        "With in-distribution accuracy, standard deviations, best seeds, training curves and every study: "
        f"{link(ALGORITHMIC_REPORT)}."
    )
    return caption + "\n\n" + table(header, rows) + "\n\n" + note


BENCHMARK_SIZES = ("small", "base")
PERFORMANCE_ROWS = (  # (label on the page, row of benchmarks/speed/results-<size>.md; None: the peak-memory sentence)
    ("MLM training step, 16 × 128", "MLM training step, 16 × 128 (tokens/s)"),
    ("inference, dense 32 × 128 (GELU, like for like)", "inference, dense 32 × 128 (tokens/s)"),
    (
        "inference, dense 32 × 128, ours with ReLU (the paper's default) against BERT with GELU",
        "inference, dense 32 × 128, ours with ReLU (the paper's default) (tokens/s)",
    ),
    (
        "inference, padded 32 × 40–256 tokens → 256 (real tokens/s)",
        re.compile(r"inference, padded 32 × 40–256 → 256 \([\d,]+ real tokens; real tokens/s\)"),
    ),
    (
        "inference, dense, ours under torch.compile (inductor, freezing) against eager BERT",
        "inference, dense 32 × 128, ours compiled (tokens/s)",
    ),
    ("peak memory at 16,384 tokens / at 8,192 (ours; BERT stops at 512)", None),
    ("data pipeline / what training consumes", "data pipeline (tokenise + pack) vs training consumption (tokens/s)"),
)
PIPELINE = "data pipeline (tokenise + pack) vs training consumption (tokens/s)"
PEAK_MEMORY = re.compile(r"^Peak memory at 16,384 tokens / at 8,192 tokens: (?P<ratio>[\d.]+×)\.$", re.MULTILINE)


def benchmark_file(size: str) -> str:
    return f"benchmarks/speed/results-{size}.md"


def benchmark_rows(size: str) -> Rows:
    return report_rows(benchmark_file(size), "ours / BERT")


def performance_cell(size: str, row: str | re.Pattern | None) -> str:
    """The ratio ours / BERT of `row` in benchmarks/speed/results-<size>.md; "—" where the file has no such row."""
    if row is None:
        peak = PEAK_MEMORY.search((REPO / benchmark_file(size)).read_text(encoding="utf-8"))
        return peak["ratio"] if peak else "—"
    source = benchmark_rows(size)
    if source.find(row) is None:
        return "—"
    ratio = source.cell(row, "ours / BERT")
    if row == PIPELINE:  # "116.75×": a ratio in the hundreds, shown whole
        return f"{round(float(ratio.rstrip('×'))):,}×"
    return ratio


def benchmark_flags(size: str) -> str:
    """The flags of the run that wrote benchmarks/speed/results-<size>.md, from its header and its length sweep."""
    text = (REPO / benchmark_file(size)).read_text(encoding="utf-8")
    # the header names the command as it was when the file was written (`python benchmarks/benchmark.py` before the
    # studies had folders of their own)
    command = re.search(r"`python (?:-m benchmarks\.speed\.run|benchmarks/benchmark\.py) (?P<flags>[^`]*)`", text)
    repeats = re.search(r"medians of (\d+) interleaved repetitions", text)
    sweep = report_rows(benchmark_file(size), "ours: seconds", text=text)
    if not (command and repeats and sweep.rows):
        raise ValueError(f"{benchmark_file(size)}: not the header and length sweep benchmarks/speed/run.py writes.")
    flags = command["flags"].replace("--size small", "").split()  # small is the default
    flags += ["--repeats", repeats[1]]
    longest = int(list(sweep.rows)[-1].replace(",", ""))
    if longest != 16384:  # the default --max_length
        flags += ["--max_length", str(longest)]
    return " ".join(flags)


def performance_table() -> str:
    rows = [[label, *(performance_cell(size, row) for size in BENCHMARK_SIZES)] for label, row in PERFORMANCE_ROWS]
    sources = " and ".join(f"{link(benchmark_file(size))} (`{benchmark_flags(size)}`)" for size in BENCHMARK_SIZES)
    note = f"Sources: {sources}, where each row also gives the tokens/s of both models."
    return "Ours / BERT:\n\n" + table(["", *BENCHMARK_SIZES], rows) + "\n\n" + note


FINETUNE = "benchmarks/finetuning_gap/builtin.json"
FINETUNE_ROWS = (  # (label on the page, prefix of the metrics in eval_results.json, in bold)
    ("majority class (`transformers`)", "majority_", False),
    ("TF-IDF (1–2-grams) + logistic regression, same split", "tfidf_logreg_", True),
    ("sinusoidal encoder, pretrained by the main job (1,000 steps), fine-tuned 1 epoch", "eval_", False),
)


def finetune_table() -> str:
    """The built-in downstream task: the model and the baselines of one `scripts/finetune.sh` run, from its
    eval_results.json as committed."""
    record = json.loads((REPO / FINETUNE).read_text())
    results = record["eval_results"]
    rows = []
    for label, prefix, bold in FINETUNE_ROWS:
        cells = [f"{results[prefix + metric]:.3f}" for metric in ("accuracy", "macro_f1")]
        rows.append([label, *(f"**{cell}**" if bold else cell for cell in cells)])
    note = f"Source: {link(FINETUNE)} (commit {record['commit']}, {record['date']})."
    return table(["on the validation passages", "accuracy", "macro-F1"], rows) + "\n\n" + note


FINETUNE_GAP = "benchmarks/finetuning_gap/results.jsonl"


def finetune_gap_table() -> str:
    """Fine-tuning settings against the TF-IDF baseline, one row per line of benchmarks/finetuning_gap/results.jsonl
    (each a `scripts/finetune.sh` run on the same pretrained model, with its command)."""
    lines = [json.loads(text) for text in (REPO / FINETUNE_GAP).read_text().splitlines()]
    metrics = ("accuracy", "macro_f1")
    rows = [
        [line["label"], line["model"], *(f"{line['eval_results'][f'eval_{metric}']:.3f}" for metric in metrics)]
        for line in lines
    ]
    baseline = lines[0]["eval_results"]
    rows.append(["TF-IDF + logistic regression", "—", *(f"{baseline[f'tfidf_logreg_{m}']:.3f}" for m in metrics)])
    note = (
        f"Source: {link(FINETUNE_GAP)}, with each run's command, pretrained model and the commit of the fine-tuning "
        "code; the validation split has 384 passages (one passage: 0.0026 accuracy)."
    )
    return table(["fine-tuning", "pretrained model", "accuracy", "macro-F1"], rows) + "\n\n" + note


SENTENCES = "benchmarks/sentence_embeddings/results.jsonl"


def sentence_embeddings_table() -> str:
    """The hand-checked similarity triples, from the lines `benchmarks/sentence_embeddings/run.py --results` appended:
    one row per label in the file's order, the lines of one label (seeds) side by side."""
    by_label: dict[str, list[dict]] = {}
    for text in (REPO / SENTENCES).read_text().splitlines():
        line = json.loads(text)
        by_label.setdefault(line["label"], []).append(line)

    def cell(lines: list[dict], part: str) -> str:
        ranked = ", ".join(str(line[part]["ranked"]) for line in lines)
        margins = [line[part]["margin"] for line in lines]
        low, high = f"{min(margins):+.2f}", f"{max(margins):+.2f}"
        margin = low if low == high else f"{minus(low)}–{minus(high.removeprefix('+'))}"
        return f"{ranked} / {minus(margin)}"

    (first, *_), *_ = by_label.values()
    sizes = {part: first[part]["of"] for part in ("shared_word", "low_overlap")}
    rows = [[label, cell(lines, "shared_word"), cell(lines, "low_overlap")] for label, lines in by_label.items()]
    header = ["model", f"shared-word ({sizes['shared_word']})", f"low-overlap ({sizes['low_overlap']})"]
    commits = sorted({line["commit"] for lines in by_label.values() for line in lines if line["commit"]})
    dates = sorted({line["date"] for lines in by_label.values() for line in lines})
    note = f"Source: {link(SENTENCES)} (commits {', '.join(commits)}; {dates[0]} to {dates[-1]})."
    if len(dates) == 1:
        note = f"Source: {link(SENTENCES)} (commit {', '.join(commits)}, {dates[0]})."
    return table(header, rows) + "\n\n" + note


DEPLOYMENT = "benchmarks/deployment/results.json"
DEPLOYMENT_PATHS = {  # (label on the page) of each serving path of benchmarks/deployment/run.py
    "pytorch-fp32": "PyTorch fp32 (the reference)",
    "pytorch-bf16": "PyTorch, bf16 weights",
    "onnxruntime-fp32": "ONNX Runtime fp32",
    "onnxruntime-int8": "ONNX Runtime int8 (dynamic quantization)",
}


def deployment_table() -> str:
    """The CPU serving paths, from the JSON record of `python -m benchmarks.deployment.run`: each path's speed on both
    batches (tokens/s, against PyTorch fp32 and against BERT on the same path), then its accuracy against PyTorch
    fp32."""
    record = json.loads((REPO / DEPLOYMENT).read_text())
    speed = {(row["path"], row["batch"]): row for row in record["speed"]}
    speed_rows, accuracy_rows = [], []
    for path, label in DEPLOYMENT_PATHS.items():
        cells = [label]
        for batch in ("dense", "padded"):
            row, fp32 = speed[path, batch], speed["pytorch-fp32", batch]
            relative = row["ours_tokens_per_s"] / fp32["ours_tokens_per_s"]
            cells += [f"{row['ours_tokens_per_s']:,.0f}", f"{relative:.2f}×", f"{row['ratio']:.2f}×"]
        speed_rows.append(cells)
        figures = record["accuracy"]["paths"][path]
        difference = "—" if path == "pytorch-fp32" else f"{figures['max_abs_logit_diff']:.1e}"
        agreement, accuracy = (f"{figures[key]:.3f}" for key in ("fill_mask_top1_agreement", "classifier_accuracy"))
        accuracy_rows.append([label, difference, agreement, accuracy])
    speed_header = ["path"] + [
        f"{batch}: {column}"
        for batch, tokens in (("dense", "tokens/s"), ("padded", "real tokens/s"))
        for column in (tokens, "× fp32", "ours / BERT")
    ]
    accuracy_header = ["path", "max logit difference", "fill-mask top-1 agreement", "classifier accuracy"]
    machine, accuracy = record["machine"], record["accuracy"]
    flags = present_flags(machine["flags"])
    note = (
        f"Source: {link(DEPLOYMENT)} (`{current_command(record['command'])}`; commit {record['commit']}, "
        f"{record['date']}): "
        f"{machine['model']} (CPU flags: {flags}), {record['threads']['torch']} thread(s) for PyTorch and ONNX "
        f"Runtime; medians of {record['settings']['repeats']} interleaved repetitions; accuracy on "
        f"{accuracy['passages']} validation passages ({accuracy['paths']['pytorch-fp32']['masked_tokens']:,} masked "
        f"tokens). With BERT's tokens/s and the sizes of the ONNX files: {link('benchmarks/deployment/results.md')}."
    )
    return "\n\n".join([table(speed_header, speed_rows), table(accuracy_header, accuracy_rows), note])


UTILIZATION = "benchmarks/utilization/results.json"


def utilization_table() -> str:
    """Model-FLOPs utilisation of every path, precision and mode, ours and BERT, from the JSON record of
    `python -m benchmarks.utilization.run`, with issue 32's targets (eager mode) met or missed."""
    from benchmarks.utilization.run import PATH_NAMES, format_mfu, verdict

    record = json.loads((REPO / UTILIZATION).read_text())
    rows = []
    for cell in record["cells"]:
        ratio = f"**{cell['ratio']:.2f}×**" if cell["ratio"] < 1 else f"{cell['ratio']:.2f}×"
        rows.append(
            [
                PATH_NAMES[cell["path"]],
                cell["precision"],
                cell["mode"],
                format_mfu(cell["ours"], digits=2),
                format_mfu(cell["bert"], digits=2),
                ratio,
                f"{cell['ours']['tokens_per_second']:,.0f}",
                verdict(cell),
            ]
        )
    header = ["path", "precision", "mode", "MFU ours", "MFU BERT", "ours / BERT", "tokens/s ours", "target"]
    cpu, peaks = record["cpu"], record["gemm_peak_flops"]
    flags = present_flags(cpu["flags"])
    profiled = "--profile" in record["command"].split()
    profiles = "Per-op profiles of the cells" if profiled else "Per-op profiles of the cells, from an earlier run"
    note = (
        f"Source: {link(UTILIZATION)} (`{current_command(record['command'])}`, commit {record['commit']}, "
        f"{record['date']}): "
        f"{cpu['model']}, {cpu['threads']} threads, CPU flags {flags}; GEMM peak measured in the run "
        f"{peaks['fp32'] / 1e9:,.0f} GFLOP/s in fp32 and {peaks['bf16'] / 1e9:,.0f} in bf16; medians of "
        f"{record['repeats']} interleaved repetitions (in brackets: the slowest and the fastest). Ratios below 1 in "
        f"bold. {profiles}: {link('benchmarks/utilization/results-profiles.md')}."
    )
    return table(header, rows) + "\n\n" + note


GPU_SUMMARY = "benchmarks/gpu/gpu-summary.json"  # `bash scripts/test_gpu.sh`: the device, the tests
GPU_BENCHMARK = "benchmarks/gpu/gpu-benchmark.json"  # and its benchmark (benchmarks/gpu/run.py)


def gpu_table() -> str:
    """The GPU command's run: the single-GPU tests' outcome and every benchmark cell (ours against BERT, tokens/s,
    ratio, MFU against the bf16 GEMM peak measured in the run), with the targets met or missed, from its records."""
    from benchmarks.gpu.run import PATH_NAMES, cell_name, format_verdict

    summary = json.loads((REPO / GPU_SUMMARY).read_text())
    record = json.loads((REPO / GPU_BENCHMARK).read_text())
    rows = []
    for cell in record["cells"]:
        if cell["status"] != "done":
            continue
        ours, bert = cell["ours"], cell["bert"]
        ratio = f"**{cell['ratio']:.2f}×**" if cell["ratio"] < 1 else f"{cell['ratio']:.2f}×"
        rows.append(
            [
                cell["size"],
                PATH_NAMES[cell["path"]],
                cell["mode"],
                f"{ours['tokens_per_second']:,.0f}",
                f"{bert['tokens_per_second']:,.0f}",
                ratio,
                f"{ours['mfu']:.2f}",
                f"{bert['mfu']:.2f}",
            ]
        )
    header = ["size", "path", "mode", "tokens/s ours", "tokens/s BERT", "ours / BERT", "MFU ours", "MFU BERT"]
    device, tests = summary["device"], summary["tests"]
    skipped = [cell for cell in record["cells"] if cell["status"] != "done"]
    batches = record["batches"]
    note = (
        f"Source: {link(GPU_SUMMARY)} and {link(GPU_BENCHMARK)} (`{summary['command']}`, commit {summary['commit']}, "
        f"{summary['date']}): {device['name']} ({device['memory_gib']} GiB), torch {device['torch']}, transformers "
        f"{device['transformers']}; installed from the wheel folder: {', '.join(summary['installed']) or 'nothing'}. "
        f"Single-GPU tests: {tests['passed']} passed, {tests['failed']} failed, {tests['skipped']} skipped "
        f"({summary['tests_seconds']:.0f} s); the benchmark {summary['benchmark_seconds']:.0f} s. "
        f"{summary['skipped_line']} Batches: training {batches['train']}, padded inference {batches['padded']}, "
        f"dense inference {batches['dense']}; bf16 GEMM peak measured in the run "
        f"{record['gemm_peak_flops'] / 1e12:,.0f} TFLOP/s; medians of {record['repeats']} alternate repetitions. "
        f"Not run ({', '.join(sorted({cell['status'] for cell in skipped})) or '-'}): "
        f"{', '.join(cell_name(cell) for cell in skipped) or 'none'}. Ratios below 1 in bold."
        "\n\nThe targets (issue 40, the eager cells at base):\n\n"
        + "\n".join(format_verdict(entry) for entry in record["targets"])
    )
    return table(header, rows) + "\n\n" + note


@dataclass(frozen=True)
class Table:
    name: str
    page: str  # from the repository root
    build: Callable[[], str]


TABLES = (
    Table("order-recipe", "docs/experiments.md", order_recipe_table),
    Table("length-generalization", "docs/experiments.md", length_table),
    Table("length-budget", "docs/experiments.md", length_budget_table),
    Table("algorithmic-past-training", "docs/experiments.md", algorithmic_table),
    Table("performance-summary", "docs/performance.md", performance_table),
    Table("utilization", "docs/performance.md", utilization_table),
    Table("finetune-builtin", "docs/finetuning.md", finetune_table),
    Table("finetune-gap", "docs/finetuning.md", finetune_gap_table),
    Table("sentence-embeddings", "docs/deployment.md", sentence_embeddings_table),
    Table("deployment", "docs/deployment.md", deployment_table),
    Table("gpu", "docs/pretraining.md", gpu_table),
)


# ----------------------------------------------------------------------------------------------------------------
# the regions of the pages


def regions(text: str, page: str) -> dict[str, tuple[int, int]]:
    """{name: (index of its start line, index of its end line)} of the table regions of a page's lines."""
    found: dict[str, tuple[int, int]] = {}
    lines = text.split("\n")
    index = 0
    while index < len(lines):
        start = START.match(lines[index])
        if start is None:
            if lines[index].strip() == END:
                raise ValueError(f"{page}:{index + 1}: {END} without a table before it.")
            index += 1
            continue
        name = start["name"]
        if name in found:
            raise ValueError(f"{page}:{index + 1}: a second region of table {name!r}.")
        end = next((i for i in range(index + 1, len(lines)) if lines[i].strip() == END or START.match(lines[i])), None)
        if end is None or lines[end].strip() != END:
            raise ValueError(f"{page}:{index + 1}: the region of table {name!r} has no {END} line.")
        found[name] = (index, end)
        index = end + 1
    return found


def rewritten(text: str, page: str, built: dict[str, str]) -> str:
    """`text` with the region of every table in `built` holding its generated text."""
    lines = text.split("\n")
    spans = regions(text, page)
    for name, (start, end) in sorted(spans.items(), key=lambda item: -item[1][0]):  # from the bottom up
        if name in built:
            lines[start + 1 : end] = ["", *built[name].split("\n"), ""]
    return "\n".join(lines)


def pages() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


def updates() -> tuple[dict[str, tuple[str, str]], list[str]]:
    """{page: (text now, text with fresh tables)} of every page with a table region, and the problems with the
    regions themselves (a table without its region, a region of no known table)."""
    known = {table.name: table for table in TABLES}
    problems, result = [], {}
    for path in pages():
        page = path.relative_to(REPO).as_posix()
        text = path.read_text(encoding="utf-8")
        spans = regions(text, page)
        for name in spans:
            if name not in known:
                problems.append(f"{page}: a region of no table {name!r} (the tables: {', '.join(known)})")
            elif known[name].page != page:
                problems.append(f"{page}: the region of table {name!r} belongs in {known[name].page}")
        built = {name: known[name].build() for name in spans if name in known and known[name].page == page}
        if spans:
            result[page] = (text, rewritten(text, page, built))
    for table_ in TABLES:
        text, _ = result.get(table_.page, ("", ""))
        if table_.name not in regions(text, table_.page):
            problems.append(
                f"{table_.page}: no region for table {table_.name!r}: add `<!-- table: {table_.name} ({COMMAND}) -->`"
                f" and `{END}` lines where it goes"
            )
    return result, problems


def stale_tables() -> list[str]:
    """One line for each table whose page disagrees with its source files (and each problem with the regions),
    naming the table and the command that rewrites it; [] when every table is fresh."""
    result, problems = updates()
    for page, (now, fresh) in result.items():
        if now == fresh:
            continue
        for name, (start, end) in regions(now, page).items():
            old = now.split("\n")[start + 1 : end]
            new_start, new_end = regions(fresh, page)[name]
            new = fresh.split("\n")[new_start + 1 : new_end]
            if old != new:
                diff = [
                    line
                    for line in difflib.unified_diff(old, new, lineterm="", n=0)
                    if line[:1] in "+-" and line[:3] not in ("+++", "---")
                ]
                shown = "\n".join(f"    {line}" for line in diff[:8]) + ("\n    ..." if len(diff) > 8 else "")
                problems.append(
                    f"{page}:{start + 1}: table {name!r} disagrees with its source: run `{COMMAND}`\n{shown}"
                )
    return problems


# ----------------------------------------------------------------------------------------------------------------
# README's headline figures

MAIN_JOB_TRANSCRIPT = "docs/pretraining.md"  # the main job's printed last lines; its outputs/ folder is not committed
FINAL_EVALUATION = re.compile(
    r"final evaluation: eval_loss (?P<loss>[\d.]+), eval_perplexity (?P<perplexity>[\d.]+), "
    r"eval_unigram_loss (?P<unigram>[\d.]+), eval_order_gap (?P<gap>-?[\d.]+), eval_masked_tokens \d+, "
    r"eval_unigram_margin_stderr [\d.]+, eval_order_gap_stderr (?P<gap_stderr>[\d.]+)"
)


def readme_figures() -> dict[str, list[tuple[str, str]]]:
    """{the bold lead of a bullet of README's "Results": [(figure as the bullet writes it, its source), ...]}."""
    from benchmarks.algorithmic.report import ARM_LABELS

    final = FINAL_EVALUATION.search((REPO / MAIN_JOB_TRANSCRIPT).read_text(encoding="utf-8"))
    if final is None:
        raise ValueError(f"{MAIN_JOB_TRANSCRIPT}: no 'final evaluation: eval_loss ...' line.")
    small = benchmark_rows("small")
    summary, _ = algorithmic_summary()
    tasks_mean, paper_mean = "41–500, mean over the tasks", "41–500 best seed, mean over the tasks"
    transcript = f"{MAIN_JOB_TRANSCRIPT}, the main job's final evaluation"
    return {
        "The main job": [
            (f"evaluation loss {float(final['loss']):.2f}", transcript),
            (f"(perplexity {float(final['perplexity']):.1f})", transcript),
            (f"against {float(final['unigram']):.2f} for a unigram model", transcript),
            (f"costs it {float(final['gap']):.2f} ± {2 * float(final['gap_stderr']):.2f} nats", transcript),
        ],
        "Against transformers' `BertForMaskedLM`": [
            (f"{small.cell(PERFORMANCE_ROWS[0][1], 'ours / BERT')} the masked-LM training", small.path),
            (f"{small.cell(PERFORMANCE_ROWS[1][1], 'ours / BERT')} the dense inference", small.path),
        ],
        "Past the training length": [
            (f"order gap {length_figure('shipped', 'order_gap', 128):.2f}", LENGTH_DATA),
            (f"to {length_figure('shipped', 'order_gap', 512):.2f}", LENGTH_DATA),
            (
                f"rises {length_figure('shipped', 'loss', 512) - length_figure('shipped', 'loss', 128):.2f} nats",
                LENGTH_DATA,
            ),
            (f"rise {length_figure('rotary', 'loss', 512) - length_figure('rotary', 'loss', 128):.2f}", LENGTH_DATA),
            (
                f"from {length_figure('rotary', 'order_gap', 128):.2f} to "
                f"{length_figure('rotary', 'order_gap', 512):.2f}",
                LENGTH_DATA,
            ),
            (
                f"{length_figure('shipped', 'loss', 128) - length_figure('rotary', 'loss', 128):.2f} nats lower",
                LENGTH_DATA,
            ),
            (f"rises {length_figure('alibi', 'loss', 512) - length_figure('alibi', 'loss', 128):.2f}", LENGTH_DATA),
        ],
        "Algorithmic tasks": [
            (f"reach {summary.cell(ARM_LABELS['stratified'], tasks_mean)}% (mean over seeds)", ALGORITHMIC_RECORDS),
            (f"the paper's {summary.cell(PAPER_ROW, paper_mean).split()[0]}% (best of 30 runs)", ALGORITHMIC_RECORDS),
        ],
    }


def readme_results() -> dict[str, str]:
    """The bullets of README's section "Results", by their bold lead, each joined into one line."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    section = re.search(r"^## Results\n(?P<body>.*?)(?=^## )", text, re.MULTILINE | re.DOTALL)
    if section is None:
        raise ValueError("README.md: no section '## Results'.")
    bullets = re.split(r"^- ", section["body"], flags=re.MULTILINE)[1:]
    found = {}
    for bullet in bullets:
        lead = re.match(r"\*\*(?P<lead>.+?)\*\*", bullet)
        if lead:
            found[lead["lead"]] = " ".join(bullet.split())
    return found


def readme_problems() -> list[str]:
    """One line for each figure of README's "Results" that its source file does not give as written."""
    bullets, problems = readme_results(), []
    for lead, figures in readme_figures().items():
        if lead not in bullets:
            problems.append(f"README.md, Results: no bullet '**{lead}**' (the bullets: {list(bullets)})")
            continue
        for figure, source in figures:
            if figure not in bullets[lead]:
                problems.append(f"README.md, Results, '{lead}': {source} gives {figure!r}, not in the bullet")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="Change nothing; exit 1 if a table is stale.")
    args = parser.parse_args(argv)
    if args.check:
        problems = stale_tables() + readme_problems()
        for problem in problems:
            print(problem)
        return 1 if problems else 0
    result, problems = updates()
    for page, (now, fresh) in result.items():
        if now != fresh:
            (REPO / page).write_text(fresh, encoding="utf-8")
            print(f"rewrote the tables of {page}")
    for problem in problems + readme_problems():
        print(problem)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
