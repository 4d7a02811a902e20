"""The run configuration: one frozen dataclass per job whose fields carry their defaults and help, the command line
generated from it (transformers' HfArgumentParser), derived values as properties, checks that name the flag (on
`dataclasses.replace` too), values the run derives reported in its result, and every flag the documentation uses
present in its command's `--help`."""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys

import pytest
from conftest import REPO, TINY, env, metrics, tiny_pretraining, write_text_corpus

from benchmarks.length_generalization import run as lg
from sinusoidal_encoder_training.cli import console
from sinusoidal_encoder_training.cli.arguments import ConfigParser, parse_config
from sinusoidal_encoder_training.cli.commands import COMMANDS as TABLE
from sinusoidal_encoder_training.configs import (
    DataConfig,
    FinetuningConfig,
    OnnxExportConfig,
    PretrainingConfig,
    TrainingConfig,
)
from sinusoidal_encoder_training.stages import pretraining

MODEL = str(REPO / "tokenizer_config")  # a folder that exists: the source check passes (nothing is loaded)


def pretraining_config(**settings) -> PretrainingConfig:
    return PretrainingConfig(**{"output_dir": "out", "config_name": "tiny", "max_seq_length": 32, **settings})


def test_only_the_output_is_required_and_everything_else_has_its_default():
    config = PretrainingConfig(output_dir="x", max_train_steps=100)
    assert (config.learning_rate, config.per_device_train_batch_size, config.config_name) == (5e-4, 32, "small")
    assert config.seq_length_schedule is None and config.length_schedule == () and not config.with_tracking
    with pytest.raises(TypeError, match="output_dir"):
        PretrainingConfig(max_train_steps=100)
    tuned = FinetuningConfig(model_name_or_path=MODEL, output_dir="out")
    assert tuned.learning_rate == 1e-4 and tuned.num_train_epochs == 3  # fine-tuning's own defaults
    with pytest.raises(TypeError, match="model_name_or_path"):
        FinetuningConfig(output_dir="out")


def test_the_config_is_frozen():
    config = pretraining_config(max_train_steps=6)
    assert isinstance(config, (TrainingConfig, DataConfig))
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.max_train_steps = 12
    assert config.max_train_steps == 6


def test_derived_values_are_computed_from_the_fields():
    assert pretraining_config(seq_length_schedule="8:2,16:4").length_schedule == ((8, 2), (16, 4))
    assert pretraining_config().length_schedule == ()

    builtin = FinetuningConfig(model_name_or_path=MODEL, output_dir="out")
    assert builtin.builtin and builtin.with_baselines and not builtin.baselines
    custom = FinetuningConfig(model_name_or_path=MODEL, output_dir="out", dataset_name=MODEL, text_column_name="body")
    assert not custom.builtin and not custom.with_baselines
    assert dataclasses.replace(custom, baselines=True).with_baselines
    assert not dataclasses.replace(builtin, dataset_name=MODEL).builtin  # a variant derives its own values

    experiment = lg.LengthGeneralizationConfig(output_dir="out", max_train_steps=60, eval_steps=None, seeds=[3])
    assert experiment.eval_interval == 10 and experiment.seeds == [3]
    assert lg.LengthGeneralizationConfig(output_dir="out", eval_steps=7).eval_interval == 7


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"per_device_train_batch_size": 0}, "--per_device_train_batch_size must be a positive integer, got 0"),
        ({"learning_rate": -1.0}, "--learning_rate must be positive"),
        ({"max_grad_norm": float("inf")}, "--max_grad_norm must be a finite number, got inf"),
        ({"push_to_hub": True}, "--push_to_hub needs --hub_model_id"),
        ({"model_name_or_path": MODEL, "config_overrides": TINY}, "--config_overrides applies to new models"),
        ({"streaming": True, "dataset_name": MODEL}, "--streaming needs --max_train_steps"),
        (
            {"streaming": True, "dataset_name": MODEL, "max_train_steps": 9, "checkpointing_steps": "epoch"},
            r"--checkpointing_steps epoch needs epochs, and a stream \(--streaming\) has none: give a number",
        ),
        ({"eval_steps": 0}, "--eval_steps must be a positive integer, got 0"),
        ({"seq_length_schedule": "48:10"}, "--seq_length_schedule"),
        ({"mlm_probability": 0.0}, "--mlm_probability"),
        ({"max_seq_length": 4}, "--max_seq_length"),
        ({"train_file": "missing.txt"}, "--train_file 'missing.txt' does not exist"),
        ({"resume_from_checkpoint": "/does/not/exist"}, "--resume_from_checkpoint"),
        ({"metric_for_best_model": "loss"}, "--metric_for_best_model is read with --load_best_model_at_end .*too"),
        ({"early_stopping_patience": 3}, "--early_stopping_patience is read with --load_best_model_at_end"),
        ({"early_stopping_patience": 0}, "--early_stopping_patience must be a positive integer, got 0"),
        ({"early_stopping_threshold": 0.1}, "--early_stopping_threshold is read with --early_stopping_patience"),
        ({"early_stopping_threshold": -0.1}, "--early_stopping_threshold must not be negative, got -0.1"),
        (
            {"load_best_model_at_end": True, "eval_steps": 10},
            r"every evaluation must be saved \(now --eval_steps 10, --checkpointing_steps unset\)",
        ),
        ({"load_best_model_at_end": True, "eval_steps": 10, "checkpointing_steps": 4}, "every evaluation must be"),
        ({"load_best_model_at_end": True, "eval_steps": "epoch", "checkpointing_steps": 1}, "or both 'epoch'"),
        (
            {"load_best_model_at_end": True, "eval_steps": 4, "checkpointing_steps": 4, "metric_for_best_model": "f1"},
            "--metric_for_best_model 'f1': an evaluation of fill-mask reports loss, perplexity; choose one of them",
        ),
    ],
)
def test_a_variant_is_checked_like_the_flags(change, message):
    config = pretraining_config()
    with pytest.raises(ValueError, match=message):
        dataclasses.replace(config, **change)


@pytest.mark.parametrize(
    ("evaluate", "save", "metric", "key"),
    [
        (10, 10, None, "eval_loss"),
        (10, 5, "accuracy", "eval_accuracy"),
        ("epoch", "epoch", "eval_macro_f1", "eval_macro_f1"),
    ],
)
def test_load_best_model_at_end_takes_evaluations_that_are_all_saved(evaluate, save, metric, key):
    """Every evaluation saved (the same steps, a multiple of the checkpoints' steps, or both every epoch); the figure
    named with or without its `eval_`, the loss by default, checked against the task's declared figures."""
    best = {"load_best_model_at_end": True, "eval_steps": evaluate, "checkpointing_steps": save}
    config = FinetuningConfig(model_name_or_path=MODEL, output_dir="out", metric_for_best_model=metric, **best)
    assert config.best_metric == key
    if metric is not None:
        with pytest.raises(
            ValueError, match=f"--metric_for_best_model {metric!r}: an evaluation of span-classification "
        ):
            dataclasses.replace(
                config, task="span-classification", train_file=str(REPO / "docs/examples/span_classification.jsonl")
            )


def test_the_built_in_task_takes_no_column_flags():
    with pytest.raises(ValueError, match="--text_column_name"):
        FinetuningConfig(model_name_or_path=MODEL, output_dir="out", text_column_name="body")


def test_the_command_line_is_generated_from_the_fields():
    argv = ["--output_dir", "o", "--max_seq_length", "32", "--seq_length_schedule", "8:2", "--with_tracking"]
    argv += ["--mixed_precision", "bf16", "--num_warmup_steps", "3", "--lr_scheduler_type", "cosine"]
    parsed = parse_config(PretrainingConfig, argv)
    assert parsed == PretrainingConfig(
        output_dir="o",
        max_seq_length=32,
        seq_length_schedule="8:2",
        with_tracking=True,  # a bare switch, as it always was
        mixed_precision="bf16",
        num_warmup_steps=3,
        lr_scheduler_type="cosine",
    )
    assert parse_config(PretrainingConfig, ["--output_dir", "o"]) == PretrainingConfig(output_dir="o")
    # a number of steps, or `epoch` (as accelerate's no_trainer examples take --checkpointing_steps)
    every = parse_config(
        PretrainingConfig, ["--output_dir", "o", "--eval_steps", "epoch", "--checkpointing_steps", "9"]
    )
    assert (every.eval_steps, every.checkpointing_steps) == ("epoch", 9)
    tuned = parse_config(FinetuningConfig, ["--model_name_or_path", MODEL, "--output_dir", "o", "--baselines"])
    assert tuned == FinetuningConfig(model_name_or_path=MODEL, output_dir="o", baselines=True)
    assert parse_config(OnnxExportConfig, [MODEL, "--output", "m.onnx", "--no_check"]) == OnnxExportConfig(
        model=MODEL, output="m.onnx", no_check=True
    )
    assert lg.parse_args(["--output_dir", "o", "--seeds", "3", "4", "--finetune_arms"]) == (
        lg.LengthGeneralizationConfig(output_dir="o", seeds=[3, 4], finetune_arms=[])
    )


@pytest.mark.parametrize(
    "argv",
    [
        [],  # --output_dir is required
        ["--output_dir", "o", "--mixed_precision", "fp8"],  # not a choice
        ["--output_dir", "o", "--with_tracking", "yes"],  # a switch takes no value
        ["--output_dir", "o", "--max_train_steps", "many"],
        ["--output_dir", "o", "--eval_steps", "epochs"],  # neither a number nor 'epoch'
    ],
)
def test_the_command_line_refuses_what_argparse_can_tell_in_one_line(argv, capsys):
    with pytest.raises(SystemExit) as stopped:
        parse_config(PretrainingConfig, argv)
    err = capsys.readouterr().err
    assert stopped.value.code == 2 and len(err.splitlines()) == 1 and "usage:" not in err, err
    assert re.search(r"; \S+ --help lists the flags.\n$", err), err


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (
            ["--output_dir", "o", "--learning_rat", "1"],
            "unrecognized arguments: --learning_rat (did you mean --learning_rate?)",
        ),
        # argparse alone says "--output_dir is required": the misspelt flag is the user's mistake
        (["--outputdir", "o"], "unrecognized arguments: --outputdir (did you mean --output_dir?)"),
        (
            ["--output_dir=o", "--max_train=3", "--zzz"],
            "unrecognized arguments: --max_train (did you mean --max_train_steps?), --zzz;",
        ),
        # no abbreviation: "--max_train" is no flag, even though one flag starts with it
        (
            ["--output_dir", "o", "--max_train", "3"],
            "unrecognized arguments: --max_train (did you mean --max_train_steps?)",
        ),
        # a flag of other commands is named as theirs (pretraining packs its blocks: no lengths to group)
        (
            ["--output_dir", "o", "--group_by_length", "--task", "x"],
            "unrecognized arguments: --group_by_length (a flag of finetune, not of this command), --task (a flag "
            "of export-onnx and finetune, not of this command);",
        ),
    ],
)
def test_a_misspelt_flag_is_named_with_the_closest_flag(argv, line, capsys):
    from sinusoidal_encoder_training.cli.commands import flags_elsewhere

    with pytest.raises(SystemExit):  # as the command runs it (`console`): with the other commands' flags
        parse_config(PretrainingConfig, argv, elsewhere=flags_elsewhere(PretrainingConfig))
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and line in err, err


CONFIGS = [*(entry.config for entry in TABLE.values()), lg.LengthGeneralizationConfig]


@pytest.mark.parametrize("config_class", CONFIGS, ids=lambda c: c.__name__)
def test_every_setting_has_help_and_one_flag(config_class):
    fields = dataclasses.fields(config_class)
    assert all(field.metadata.get("help") for field in fields), [f.name for f in fields if "help" not in f.metadata]
    parser = ConfigParser(config_class)
    destinations = [action.dest for action in parser._actions if action.dest != "help"]
    assert sorted(destinations) == sorted(field.name for field in fields)  # one flag per field, no alias
    assert not [s for a in parser._actions for s in a.option_strings if "-" in s.lstrip("-")]


# every command a user runs (the command table), as the documentation calls it (`training/NAME.py`, the console
# script, `-m` with its stage module), and the module of its stage
COMMANDS = {name.replace("-", "_"): console.command(name) for name in TABLE}
MODULES = {name.replace("-", "_"): entry.module for name, entry in TABLE.items()}
DOCUMENTS = sorted(
    {*REPO.glob("*.md"), *REPO.glob("docs/**/*.md"), *REPO.glob("scripts/*.sh"), *REPO.glob("benchmarks/**/*.md")}
)


def command_names(command: str) -> list[str]:
    return [
        f"training/{command}.py",
        f"sinusoidal-encoder-{command.replace('_', '-')}",
        f"-m sinusoidal_encoder_training.{MODULES[command]}",
    ]


def documented_flags(text: str, command: str) -> set[str]:
    """The flags written after a call of `command`, up to the end of its line (lines ending in a backslash
    continue it), a comment, a pipe, or the end of inline code."""
    flags = set()
    for name in command_names(command):
        for match in re.finditer(re.escape(name) + r"\b", text):
            call = re.split(r"(?<!\\)\n|`|#|\||;|&&", text[match.end() :], maxsplit=1)[0]
            flags |= set(re.findall(r"(?<![\w-])--[a-z][a-z0-9_]*", call))
    return flags


def help_text(command: str, capsys) -> str:
    with pytest.raises(SystemExit) as stopped:
        COMMANDS[command](["--help"])
    assert stopped.value.code == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("command", COMMANDS)
def test_every_documented_flag_is_in_the_help(command, capsys):
    text = "\n".join(path.read_text() for path in DOCUMENTS)
    documented = documented_flags(text, command)
    helped = set(re.findall(r"--[a-z][a-z0-9_]*", help_text(command, capsys)))
    assert not documented - helped, f"documented for {command} but not in its --help: {documented - helped}"
    if command in ("pretrain", "finetune", "train_tokenizer"):  # the search finds their calls
        assert len(documented) > 3, documented


@pytest.mark.parametrize("command", COMMANDS)
def test_the_help_shows_its_examples_line_by_line(command, capsys):
    """The example calls in a command's help keep their lines: a docstring's lone backslash at a line's end joined
    the next line to it, `M             --dataset_name`, and the shown command lost its continuation."""
    description = re.split(r"^(?:options|positional arguments):$", help_text(command, capsys), flags=re.M)[0]
    joined = [line for line in description.splitlines()[1:] if re.search(r"\S {4,}[^\s#]", line)]
    assert not joined, joined


HEAVY = ("torch", "transformers", "datasets", "accelerate", "tokenizers")


def test_help_and_a_bad_value_answer_before_any_heavy_library_is_imported():
    """`--help` of every console script, and a bad flag value, answer from the run configuration alone: neither torch,
    transformers, datasets, accelerate nor tokenizers is imported (what made `--help` take seconds)."""
    runs = [(name, ["--help"]) for name in sorted(MODULES)] + [
        ("pretrain", ["--output_dir", "o", "--learning_rate", "-1"])
    ]
    script = f"""
import contextlib, io, sys
from sinusoidal_encoder_training.cli import console
errors = io.StringIO()
for name, argv in {runs!r}:
    sys.argv = [name, *argv]
    with contextlib.suppress(SystemExit), contextlib.redirect_stdout(io.StringIO()):
        with contextlib.redirect_stderr(errors):
            getattr(console, name)()
print(sorted(m for m in {HEAVY!r} if m in sys.modules))
print(errors.getvalue(), end="")
"""
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=env())
    refused = "pretrain: error: --learning_rate must be positive, got -1.0.\n"
    assert proc.returncode == 0 and proc.stdout == "[]\n" + refused, (proc.stdout, proc.stderr[-2000:])


def test_the_documented_flags_are_found():
    call = "python training/pretrain.py --config_name small \\\n    --max_seq_length 128  # --not_this\n--nor_this"
    assert documented_flags(call, "pretrain") == {"--config_name", "--max_seq_length"}
    assert documented_flags("`python training/pretrain.py --help` lists --them", "pretrain") == {"--help"}


@pytest.mark.slow
@pytest.mark.parametrize(
    ("script", "argv", "message"),
    [
        ("pretrain", ["--output_dir", "x", "--learning_rate", "-1"], "--learning_rate must be positive, got -1.0"),
        (
            "finetune",
            ["--model_name_or_path", MODEL, "--output_dir", "x", "--train_file", "missing.txt"],
            "--train_file",
        ),
    ],
)
def test_a_bad_flag_stops_the_command_with_a_message_naming_it(tmp_path, script, argv, message):
    def command(**extra_env):
        path = str(REPO / "training" / f"{script}.py")
        return subprocess.run(
            [sys.executable, path, *argv],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=300,
            env=env(**extra_env),
        )

    proc = command()
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr[-2000:]  # one line, no traceback
    assert lines[0].startswith(f"{script}.py: error: ") and message in lines[0], lines
    assert "Running training" not in proc.stdout and not (tmp_path / "x").exists()
    debug = command(SINUSOIDAL_ENCODER_DEBUG="1")
    assert debug.returncode != 0 and "Traceback" in debug.stderr and "UsageError" in debug.stderr


def test_epochs_give_max_train_steps_in_the_result_and_leave_the_config_alone(tmp_path):
    train, validation = write_text_corpus(tmp_path / "corpus", n_train=3, n_validation=1)
    train.write_text("\n".join(line[:1000] for line in train.read_text().splitlines()) + "\n")  # 2 steps an epoch
    validation.write_text(validation.read_text()[:1000] + "\n")
    config = tiny_pretraining((train, validation), tmp_path / "out", num_train_epochs=2)
    before = dataclasses.asdict(config)
    result = pretraining.pretrain(config)
    assert config.max_train_steps is None and dataclasses.asdict(config) == before
    steps_per_epoch = sum(1 for m in metrics(tmp_path / "out") if m.get("epoch") == 0)
    assert steps_per_epoch > 1
    assert result.max_train_steps == 2 * steps_per_epoch == result.progress.completed_steps
    assert set(result.metrics) >= {"eval_loss", "eval_perplexity", "eval_order_gap"}


def test_the_front_prints_anticipated_errors_alone_and_keeps_other_tracebacks(monkeypatch, capsys):
    """`front()`: a UsageError ends with one `prog: error:` line and status 2; any other exception, and a
    UsageError under SINUSOIDAL_ENCODER_DEBUG=1, propagates with its traceback; a UsageError is a ValueError for
    code that calls the library."""
    from sinusoidal_encoder_training.cli.command_line import UsageError, front

    def bad_input():
        raise UsageError("--learning_rate must be positive, got -1.0.")

    def broken():
        raise ZeroDivisionError("a bug")

    monkeypatch.setattr(sys, "argv", ["/somewhere/pretrain.py", "--learning_rate", "-1"])
    monkeypatch.delenv("SINUSOIDAL_ENCODER_DEBUG", raising=False)
    with pytest.raises(SystemExit) as stopped:
        with front():
            bad_input()
    assert stopped.value.code == 2
    assert capsys.readouterr().err == "pretrain.py: error: --learning_rate must be positive, got -1.0.\n"
    with pytest.raises(ZeroDivisionError):
        with front():
            broken()
    monkeypatch.setenv("SINUSOIDAL_ENCODER_DEBUG", "1")
    with pytest.raises(UsageError):
        with front():
            bad_input()
    assert issubclass(UsageError, ValueError)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("outputs/does-not-exist", "no such file or folder"),  # its first part is a folder here: a local path
        ("./model", "no such file or folder"),
        ("/no/such/model", "no such file or folder"),
        ("~/no-such-model", "no such file or folder"),
        ("a/b/c", "no such file or folder"),
        ("models/", "no such file or folder"),
        ("huge", "'huge' is not a preset (tiny, small, base), a local folder or file, and the Hub is off"),
    ],
)
def test_a_missing_model_source_is_named_before_any_work(tmp_path, monkeypatch, value, message):
    """What looks local and is not there is a missing folder, not a Hub id; a bare name is listed with the presets;
    the configurations check it when they are built."""
    from sinusoidal_encoder_training.cli.arguments import check_model_source
    from sinusoidal_encoder_training.cli.command_line import UsageError
    from sinusoidal_encoder_training.stages.pretraining import PretrainingConfig

    monkeypatch.chdir(tmp_path)
    (tmp_path / "outputs").mkdir()
    with pytest.raises(UsageError, match=re.escape(message)):
        check_model_source("--config_name", value, ("tiny", "small", "base"))
    with pytest.raises(UsageError, match="--model_name_or_path"):
        PretrainingConfig(output_dir="x", model_name_or_path="./missing")


@pytest.mark.parametrize("value", [None, "small", "owner/name", "bert-base-uncased", "outputs/here", "config.json"])
def test_presets_cached_hub_ids_and_existing_paths_pass_the_source_check(tmp_path, monkeypatch, value):
    """Offline, a Hub id passes when the cache has a copy of it (as transformers would then load it)."""
    from huggingface_hub import constants

    from sinusoidal_encoder_training.cli.arguments import check_model_source

    monkeypatch.chdir(tmp_path)
    (tmp_path / "outputs" / "here").mkdir(parents=True)
    (tmp_path / "config.json").write_text("{}")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    for repo in ("owner--name", "bert-base-uncased"):
        (tmp_path / "hub" / f"models--{repo}" / "snapshots" / "0123abc").mkdir(parents=True)
    check_model_source("--config_name", value, ("tiny", "small", "base"))  # no error


@pytest.mark.parametrize(
    ("offline", "exists", "message"),
    [
        (True, None, "and the Hub is off (HF_HUB_OFFLINE=1) with no copy of my_model in the cache ("),
        (False, False, "and the Hub has no model my_model (a private or gated one needs `hf auth login` first)"),
        (False, OSError("no route to host"), "and the Hub cannot be reached to look for my_model (OSError)"),
    ],
)
def test_a_name_neither_here_nor_on_the_hub_is_one_line_with_the_nearest_folder(
    tmp_path, monkeypatch, offline, exists, message
):
    """A name without a slash that is no local folder (`fill_mask.py my_model`, a typo) is resolved before any work,
    never left to transformers' "We couldn't connect" traceback: offline, against the cache;
    online, against the Hub; the line names the nearest local folder."""
    from huggingface_hub import HfApi, constants

    from sinusoidal_encoder_training.cli.arguments import check_model_source
    from sinusoidal_encoder_training.cli.command_line import UsageError

    monkeypatch.chdir(tmp_path)
    (tmp_path / "my-model").mkdir()
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", offline)

    def repo_exists(self, repo_id, repo_type=None, **kwargs):
        assert not offline and (repo_id, repo_type) == ("my_model", "model")
        if isinstance(exists, Exception):
            raise exists
        return exists

    monkeypatch.setattr(HfApi, "repo_exists", repo_exists)
    with pytest.raises(UsageError) as error:
        check_model_source("MODEL", "my_model")
    line = str(error.value)
    assert line.startswith(f"MODEL 'my_model' is not a local folder or file, {message}"), line
    assert line.endswith(" Did you mean 'my-model'?") and "\n" not in line, line


# README's promise for every command line: bad input ends with one line naming the problem, status 2, before any
# work (nothing written). One case per kind of input each command takes.
BAD_INPUT = [
    ("pretrain", ["--output_dir", "OUT", "--train_file", "missing.txt"], "--train_file"),
    ("pretrain", ["--output_dir", "OUT", "--config_name", "huge"], "is not a preset (tiny, small, base)"),
    ("pretrain", ["--output_dir", "OUT", "--push_to_hub"], "--push_to_hub needs --hub_model_id"),
    ("pretrain", ["--output_dir", "OUT", "--push_to_hub", "--hub_model_id", "me/x"], "HF_HUB_OFFLINE is set"),
    ("pretrain", ["--output_dir", "OUT", "--language", "english"], "not a language code"),
    ("pretrain", ["--output_dir", "OUT", "--seed", "-1"], "--seed must be an integer from 0 to 4294967295, got -1"),
    (
        "pretrain",
        ["--output_dir", "OUT", "--streaming_validation_examples", "-1"],
        "--streaming_validation_examples must be a positive integer, got -1.",
    ),
    ("train_tokenizer", ["--output_dir", "OUT", "--seed", str(2**32)], "--seed must be an integer from 0 to"),
    (
        "pretrain",
        ["--output_dir", "OUT", "--config_overrides", "position_mode=random_offset"],
        "--config_overrides: `position_mode='random_offset'` needs `max_position_offset`",
    ),
    ("pretrain", ["--output_dir", "OUT", "--seq_length_schedule", "48:10"], "--seq_length_schedule"),
    (
        "pretrain",
        ["--output_dir", "OUT", "--with_tracking", "--report_to", "tensorboard,wandbb"],
        "--report_to 'tensorboard,wandbb': accelerate has no tracker 'wandbb': choose from all, ",
    ),
    (
        "pretrain",
        ["--output_dir", "OUT", "--lr_scheduler_kwargs", "{num_decay_steps: 4}"],
        "--lr_scheduler_kwargs must be a JSON object",
    ),
    (
        "finetune",
        ["--model_name_or_path", MODEL, "--output_dir", "OUT", "--lr_scheduler_kwargs", '{"num_decay_steps": 4}'],
        "--lr_scheduler_type linear cannot be made with the arguments given (--lr_scheduler_kwargs",
    ),
    (
        "pretrain",
        ["--output_dir", "OUT", "--lr_scheduler_type", "cosine_with_min_lr"],
        "One of min_lr or min_lr_rate should be set",
    ),
    (
        "pretrain",
        [
            *("--output_dir", "OUT", "--lr_scheduler_type", "warmup_stable_decay", "--max_train_steps", "10"),
            *("--lr_scheduler_kwargs", '{"num_decay_steps": 40}'),
        ],
        "0 warmup and 40 decay steps are more than the run's 10 optimizer steps",
    ),
    ("pretrain", ["--output_dir", "OUT", "--resume_from_checkpoint", "nope"], "is not a checkpoint folder"),
    (
        "finetune",
        ["--model_name_or_path", MODEL, "--output_dir", "OUT", "--load_best_model_at_end", "--eval_steps", "5"],
        "--load_best_model_at_end chooses among the evaluations of --eval_steps and loads the best from its",
    ),
    (
        "finetune",
        [
            *("--model_name_or_path", MODEL, "--output_dir", "OUT", "--load_best_model_at_end"),
            *("--eval_steps", "epoch", "--checkpointing_steps", "epoch", "--metric_for_best_model", "acc"),
        ],
        "--metric_for_best_model 'acc': an evaluation of text-classification reports loss, accuracy, macro_f1,",
    ),
    ("finetune", ["--model_name_or_path", "./outputs/nope", "--output_dir", "OUT"], "no such file or folder"),
    ("finetune", ["--model_name_or_path", MODEL, "--output_dir", "OUT", "--task", "token-classification"], "data"),
    (
        "pretrain",
        ["--output_dir", "OUT", "--learning_rate", "nan"],
        "--learning_rate must be a finite number, got nan",
    ),
    ("pretrain", ["--output_dir", "OUT", "--weight_decay", "inf"], "--weight_decay must be a finite number, got inf"),
    (
        "pretrain",
        ["--output_dir", "OUT", "--config_overrides", "vocab_size=2"],
        "The model's vocabulary (2) is smaller than the tokenizer's (16384): leave vocab_size out",
    ),
    ("train_tokenizer", ["--output_dir", "OUT", "--vocab_size", "100"], "--vocab_size"),
    (  # the trainer's allocation failed in Rust: an abort (status 134) without a word of Python
        "train_tokenizer",
        ["--output_dir", "OUT", "--vocab_size", str(10**15)],
        "--vocab_size 1,000,000,000,000,000: the tokenizer trainer reserves memory for every token asked",
    ),
    ("train_tokenizer", ["--output_dir", "OUT", "--model_max_length", "0"], "--model_max_length must be a positive"),
    ("train_tokenizer", ["--output_dir", "OUT", "--train_file", "missing.txt"], "--train_file"),
    ("fill_mask", ["./outputs/nope", "A [MASK] test."], "no such file or folder"),
    ("export_onnx", ["./outputs/nope"], "no such file or folder"),
    ("export_onnx", ["Some/model"], "MODEL 'Some/model' is not a local folder or file, and the Hub is off"),
    ("distill", ["./outputs/nope", "--output_dir", "OUT"], "MODEL './outputs/nope': no such file or folder"),
    ("distill", [MODEL, "--output_dir", "OUT", "--teacher", "Some/model"], "--teacher 'Some/model' is not a local"),
    ("distill", [MODEL, "--output_dir", "OUT", "--train_file", "missing.txt"], "--train_file"),
    ("distill", [MODEL, "--output_dir", "OUT", "--max_seq_length", "2"], "--max_seq_length (2) cuts every sentence"),
    ("publish", ["./outputs/nope", "--hub_model_id", "me/x"], "is not a folder"),
    ("publish", [".", "--hub_model_id", "me/x", "--dry_run"], "is not an exported model folder"),
]


@pytest.mark.parametrize(("command", "argv", "message"), BAD_INPUT)
def test_bad_input_to_any_command_is_one_line_before_any_work(tmp_path, monkeypatch, capsys, command, argv, message):
    from sinusoidal_encoder_training.cli import console

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SINUSOIDAL_ENCODER_DEBUG", raising=False)
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", True)
    argv = [str(tmp_path / "out") if arg == "OUT" else arg for arg in argv]
    monkeypatch.setattr(sys, "argv", [f"{command}.py", *argv])
    with pytest.raises(SystemExit) as stopped:
        getattr(console, command)()  # the console script itself
    err = capsys.readouterr().err
    assert stopped.value.code == 2 and len(err.strip().splitlines()) == 1, err
    assert err.startswith(f"{command}.py: error: ") and message in err, err
    assert not (tmp_path / "out").exists()
