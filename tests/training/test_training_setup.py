"""Pieces of the training setup: size presets, config overrides, weight-decay groups, accelerate config files,
scripts that run as `python training/NAME.py`."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import re
import subprocess
import sys
import sysconfig

import pytest
import torch
from accelerate.commands.config.config_args import load_config_from_file
from accelerate.utils import DistributedType
from conftest import REPO, tiny_config

import sinusoidal_encoder as se
from sinusoidal_encoder_training.cli import console
from sinusoidal_encoder_training.cli.arguments import apply_overrides
from sinusoidal_encoder_training.cli.commands import COMMANDS, SCRIPT_PREFIX, console_scripts
from sinusoidal_encoder_training.configs import MODEL_SIZES
from sinusoidal_encoder_training.publishing.export import (
    card_language,
    describe_data,
    hub_dataset_id,
    published_config,
)
from sinusoidal_encoder_training.runs.optimization import parameter_groups
from sinusoidal_encoder_training.stages import pretraining


@pytest.mark.parametrize(("size", "low", "high"), [("tiny", 0.3e6, 3e6), ("small", 3e6, 20e6), ("base", 105e6, 115e6)])
def test_size_presets(size, low, high):
    config = se.SinusoidalEncoderConfig(vocab_size=30522, **MODEL_SIZES[size])
    with torch.device("meta"):
        model = se.SinusoidalEncoderForMaskedLM(config)
    assert low <= model.num_parameters() <= high  # base: BERT-base dimensions, ~110M with a 30k vocabulary


def test_config_overrides_parse_by_field_type():
    config = tiny_config()
    apply_overrides(
        config, "hidden_size=64,num_attention_heads=8,norm_first=true,hidden_dropout_prob=0.2,hidden_act=gelu"
    )
    assert (config.hidden_size, config.num_attention_heads, config.norm_first) == (64, 8, True)
    assert config.hidden_dropout_prob == 0.2 and config.hidden_act == "gelu"
    remedies = "position_mode=random_offset,max_position_offset=896,long_input_attention_window=64"
    apply_overrides(config, remedies)  # the length remedies
    assert (config.position_mode, config.max_position_offset, config.long_input_attention_window) == (
        "random_offset",
        896,
        64,
    )
    apply_overrides(config, "long_input_attention_window=null")
    assert config.long_input_attention_window is None
    apply_overrides(config, "max_position_offset=0,position_mode=ordered_subset,position_range=4096")
    assert (config.position_mode, config.position_range) == ("ordered_subset", 4096)
    apply_overrides(config, "position_range=2048,position_mode=none")  # the mode "none", not an unset field
    assert config.position_mode == "none"
    for bad, message in [
        ("position_mode=null", "position_mode"),
        ("id2label=x", "id2label"),
        ("hidden_size", "field=value"),
        ("nope=1", "nope"),
        ("norm_first=maybe", "norm_first"),
        ("hidden_size=30,num_attention_heads=4", "num_attention_heads"),
        ("long_input_attention_window=wide", "long_input_attention_window"),
        ("long_input_attention_window=0", "long_input_attention_window"),
        ("hidden_size=wide", "hidden_size"),
        ("hidden_size=null", "hidden_size"),
    ]:
        with pytest.raises(ValueError, match=message):
            apply_overrides(tiny_config(), bad)


def test_weight_decay_by_tensor_rank_with_tied_weights_once():
    model = se.SinusoidalEncoderForMaskedLM(tiny_config())
    decay, no_decay = parameter_groups(model, 0.01)
    assert all(p.dim() >= 2 for p in decay["params"]) and all(p.dim() < 2 for p in no_decay["params"])
    assert decay["weight_decay"] == 0.01 and no_decay["weight_decay"] == 0.0
    everything = decay["params"] + no_decay["params"]
    assert len({id(p) for p in everything}) == len(everything) == len(list(model.parameters()))
    assert any(p is model.get_input_embeddings().weight for p in decay["params"])


@pytest.mark.parametrize(
    ("name", "kind", "processes"),
    [
        ("single_gpu_bf16", DistributedType.NO, 1),
        ("multi_gpu_ddp", DistributedType.MULTI_GPU, 8),
        ("multi_node", DistributedType.MULTI_GPU, 16),
        ("fsdp", DistributedType.FSDP, 8),
    ],
)
def test_accelerate_config_files(name, kind, processes):
    path = REPO / "training" / "accelerate_configs" / f"{name}.yaml"
    config = load_config_from_file(str(path))
    assert config.distributed_type == kind and config.num_processes == processes
    assert config.mixed_precision == "bf16"
    assert f"accelerate launch --config_file training/accelerate_configs/{name}.yaml" in path.read_text()
    if name == "fsdp":
        fsdp = config.fsdp_config
        assert fsdp["fsdp_transformer_layer_cls_to_wrap"] == "SinusoidalEncoderLayer"
        assert fsdp["fsdp_state_dict_type"] == "SHARDED_STATE_DICT"
        assert fsdp["fsdp_auto_wrap_policy"] == "TRANSFORMER_BASED_WRAP"
    if name == "multi_node":
        assert config.num_machines == 2


SCRIPTS = sorted(path for path in (REPO / "training").glob("*.py") if "__main__" in path.read_text())


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda path: path.name)
def test_scripts_run_as_files_import_the_installed_package(script):
    """README runs the scripts as `python training/NAME.py`, where a relative import (`from .data import ...`) fails
    with "attempted relative import with no known parent package": scripts import `sinusoidal_encoder_training.*`."""
    relative = [
        f"line {node.lineno}: from {'.' * node.level}{node.module or ''} import ..."
        for node in ast.walk(ast.parse(script.read_text()))
        if isinstance(node, ast.ImportFrom) and node.level > 0
    ]
    assert not relative, f"{script.name} has relative imports: {relative}"


def test_each_checkout_script_runs_its_command_of_the_table():
    """`training/NAME.py` calls the command NAME of the table (`commands.COMMANDS`) through the entry its console
    script `sinusoidal-encoder-NAME` names: the flags parsed, then the stage's `run` behind the command-line front."""
    assert SCRIPTS
    for shim in SCRIPTS:
        name = shim.stem.replace("_", "-")
        assert name in COMMANDS, f"{shim.name} runs no command of the table"
        tree = ast.parse(shim.read_text())
        imported = [
            (node.module, a.name) for node in tree.body if isinstance(node, ast.ImportFrom) for a in node.names
        ]
        assert imported == [("sinusoidal_encoder_training.cli.console", shim.stem)], shim


def test_the_console_scripts_and_python_m_follow_the_command_table():
    """setup.py declares one console script per command of the table, naming its callable in `console`, which runs
    the command's stage; `python -m sinusoidal_encoder_training` lists every command and runs any of them. The table
    is gathered from the configurations' modules, each declaring its command beside its class."""
    declared = {
        path.stem
        for path in (REPO / "training" / "sinusoidal_encoder_training" / "configs").glob("*.py")
        if "\nCOMMAND = CommandEntry(" in path.read_text()
    }
    assert {entry.config.__module__.rpartition(".")[2] for entry in COMMANDS.values()} == declared
    assert len(COMMANDS) == len(declared) >= 8 and COMMANDS["publish"].module == "publishing.hub"
    expected = [
        f"{SCRIPT_PREFIX}{name} = sinusoidal_encoder_training.cli.console:{name.replace('-', '_')}"
        for name in COMMANDS
    ]
    assert console_scripts() == expected
    assert '"console_scripts": console_scripts()' in (REPO / "setup.py").read_text()
    assert "[project.scripts]" not in (REPO / "pyproject.toml").read_text()  # one list of scripts: the table
    for name, entry in COMMANDS.items():
        command = getattr(console, name.replace("-", "_"))
        assert command.module == entry.module and command.config_class is entry.config
        stage = importlib.import_module(f"sinusoidal_encoder_training.{entry.module}")
        assert callable(stage.run), name
    listing = subprocess.run(
        [sys.executable, "-m", "sinusoidal_encoder_training"], capture_output=True, text=True, timeout=120
    )
    assert listing.returncode == 0 and all(f"  {name} " in listing.stdout for name in COMMANDS), listing.stdout
    wrong = subprocess.run(
        [sys.executable, "-m", "sinusoidal_encoder_training", "pretrian"], capture_output=True, text=True, timeout=120
    )
    assert wrong.returncode == 2 and wrong.stderr.splitlines()[-1].endswith(
        "error: no command 'pretrian': choose one of " + ", ".join(COMMANDS)
    ), wrong.stderr
    helped = subprocess.run(
        [sys.executable, "-m", "sinusoidal_encoder_training", "fill-mask", "--help"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert helped.returncode == 0, helped.stderr
    assert helped.stdout.startswith("usage: python -m sinusoidal_encoder_training fill-mask [-h]"), helped.stdout


@pytest.mark.parametrize("source", ["config_name", "model_name_or_path"])
def test_pretraining_builds_the_model_it_trains_and_exports_the_published_default(tmp_path, tokenizer, source):
    """`sparse_prediction` is set when the model is built (or loaded) for training, never toggled on the live model;
    the exported config gets the published default (full logits) from `published_config`, a copy."""
    folder = tmp_path / "model"
    se.SinusoidalEncoderForMaskedLM(tiny_config(vocab_size=len(tokenizer))).save_pretrained(folder)
    source = {"model_name_or_path": str(folder)} if source == "model_name_or_path" else {}
    config = pretraining.PretrainingConfig(
        output_dir=str(tmp_path / "out"), config_name="tiny", max_seq_length=32, **source
    )
    model = pretraining.build_model(config, tokenizer)
    assert model.config.sparse_prediction is True
    published = published_config(model.config)
    assert published.sparse_prediction is False and model.config.sparse_prediction is True
    assert {**model.config.to_dict(), "sparse_prediction": False} == published.to_dict()  # nothing else changes


@pytest.mark.slow
def test_setup_run_again_installs_nothing_and_needs_no_registry():
    """scripts/setup.sh, once this pyproject.toml, setup.py and the command table's console scripts are installed
    (the stamp it writes), does nothing: resuming with the README's scripts works on a machine without the package
    registry."""
    import os

    stamp = REPO / ".venv" / ".installed-from"
    wanted = subprocess.run(
        ["bash", str(REPO / "scripts" / "setup.sh"), "--stamp"], capture_output=True, text=True, check=True
    ).stdout.strip()
    if not stamp.exists() or stamp.read_text().strip() != wanted:
        pytest.skip("this .venv was not set up by scripts/setup.sh from this pyproject.toml (run it first)")
    no_registry = {**os.environ, "PIP_NO_INDEX": "1", "PIP_INDEX_URL": "http://127.0.0.1:9/none"}
    proc = subprocess.run(
        ["bash", str(REPO / "scripts" / "setup.sh")], env=no_registry, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0 and proc.stdout == "" and proc.stderr == "", proc.stderr[-2000:]


def pinned_versions(path) -> dict[str, str]:
    """{distribution name, lowercased with "-": version} of a constraints file's `name==version` lines."""
    lines = [line.strip() for line in path.read_text().splitlines() if line.strip() and not line.startswith("#")]
    assert all(line.count("==") == 1 for line in lines), [line for line in lines if line.count("==") != 1]
    return {name.lower().replace("_", "-"): version for name, version in (line.split("==") for line in lines)}


def test_setup_installs_the_versions_the_figures_were_measured_with():
    """constraints.txt pins every package scripts/setup.sh installs but torch (installed first, or a GPU machine's
    own build), what torch requires, and this package, the built-in corpus's sources among them (its text is their
    docstrings); an environment set up with them holds exactly those versions."""
    import importlib.metadata
    import os

    from sinusoidal_encoder_training.data.corpus import PACKAGES

    constraints = REPO / "constraints.txt"
    pinned = pinned_versions(constraints)
    assert {name.replace("_", "-") for name in PACKAGES} <= set(pinned)
    assert not [name for name in pinned if name in {"torch", "triton", "sinusoidal-encoder"} or "nvidia" in name]
    # nor what torch requires: a torch installed before (a GPU build, an older release) keeps what it pins
    needs = {
        re.split(r"[^A-Za-z0-9._-]", requirement, maxsplit=1)[0].lower()
        for requirement in importlib.metadata.requires("torch")
        if "extra ==" not in requirement
    }
    assert "sympy" in needs and not needs & set(pinned)
    python = "{}.{}".format(*sys.version_info[:2])
    stamp = REPO / ".venv" / ".installed-from"
    wanted = subprocess.run(
        ["bash", str(REPO / "scripts" / "setup.sh"), "--stamp"],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "CONSTRAINTS": str(constraints), "PYTHON": sys.executable},
    ).stdout.strip()
    if (
        f"# python: {python}\n" not in constraints.read_text()
        or not stamp.exists()
        or stamp.read_text().strip() != wanted
    ):
        pytest.skip("this environment was not set up by scripts/setup.sh with constraints.txt")
    # the environment's own packages: not those vendored by another that may be on the path (setuptools/_vendor)
    site = sorted({sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]})
    installed = {
        distribution.metadata["Name"].lower().replace("_", "-"): distribution.version
        for distribution in importlib.metadata.distributions(path=site)
    }
    assert {name: installed.get(name) for name in pinned if installed.get(name) != pinned[name]} == {}


def test_setup_on_another_python_says_it_installs_the_latest_releases(tmp_path):
    """Constraints written for another Python may not install there (numpy drops old Pythons): setup.sh then installs
    the latest releases and says so in one line; a CONSTRAINTS that is no file is refused in one line."""
    import os

    other = tmp_path / "constraints.txt"
    other.write_text("# python: 3.4\nnumpy==1.0\n")
    setup = ["bash", str(REPO / "scripts" / "setup.sh"), "--stamp"]
    environment = {**os.environ, "PYTHON": sys.executable}
    proc = subprocess.run(setup, capture_output=True, text=True, env={**environment, "CONSTRAINTS": str(other)})
    python = "{}.{}".format(*sys.version_info[:2])
    assert proc.returncode == 0 and proc.stderr.startswith(
        f"setup.sh: {other} pins the packages for Python 3.4, this is Python {python}: installing the latest releases"
    ), proc.stderr
    assert proc.stderr.count("\n") == 1
    latest = subprocess.run(setup, capture_output=True, text=True, env={**environment, "CONSTRAINTS": ""})
    assert latest.returncode == 0 and latest.stderr == "" and latest.stdout == proc.stdout  # the same: unpinned
    missing = subprocess.run(
        setup, capture_output=True, text=True, env={**environment, "CONSTRAINTS": str(tmp_path / "none.txt")}
    )
    assert missing.returncode == 2
    assert missing.stderr == (
        f"setup.sh: error: CONSTRAINTS={tmp_path / 'none.txt'} is not a file: name one, or set it empty for the "
        "latest releases.\n"
    )


HELD_OUT = "validated on 5% of the training split, held out with seed 42"


@pytest.mark.parametrize(
    ("data", "split", "described", "dataset_id", "language"),
    [
        ({}, "validation", None, None, ["en"]),  # the built-in corpus (its own text: pretraining.BUILTIN_CORPUS)
        ({"language": "de,fr"}, "validation", None, None, ["de", "fr"]),
        (
            {"dataset_name": "wikitext", "dataset_config_name": "wikitext-2-raw-v1"},
            "validation",
            "(https://huggingface.co/datasets/wikitext) (configuration `wikitext-2-raw-v1`); validated on its "
            "`validation` split",
            "wikitext",
            None,
        ),
        (
            {"train_file": "TRAIN"},
            None,
            "local files: `train.txt` (training; validated on 5% of it, held out with seed 42)",
            None,
            None,
        ),
        (
            {"train_file": "TRAIN", "validation_file": "VALID"},
            "validation",
            "`train.txt` (training) and `dev.txt`",
            None,
            None,
        ),
        ({"dataset_name": "LOCAL"}, None, f"a local dataset, `my_data`; {HELD_OUT}", None, None),
        (
            {"dataset_name": "LOCAL", "validation_split_name": "test"},
            "test",
            "`my_data`; validated on its `test` split",
            None,
            None,
        ),
        (
            {"dataset_name": "LOCAL", "streaming": True, "max_train_steps": 10},
            None,
            "`my_data`; validated on the first 1,000 documents of the training stream, held out",
            None,
            None,
        ),
    ],
)
def test_the_card_names_the_data_as_it_is(tmp_path, monkeypatch, data, split, described, dataset_id, language):
    """Hub datasets by id (and in `datasets:`), local data by name, never by a path of this machine, with what it
    was validated on; `language:` only where it is known."""
    (tmp_path / "prepared" / "wikitext").mkdir(parents=True)  # as if prepared by datasets before: found offline
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "prepared"))
    paths = {"TRAIN": tmp_path / "train.txt", "VALID": tmp_path / "dev.txt", "LOCAL": tmp_path / "my_data"}
    for path in paths.values():
        path.write_text("some text\n" * 40) if path.suffix else path.mkdir()  # enough rows to hold some out
    data = {key: str(paths.get(value, value)) if value in paths else value for key, value in data.items()}
    config = pretraining.PretrainingConfig(output_dir=str(tmp_path / "out"), **data)
    if described is not None:
        assert described in describe_data(config, split) and str(tmp_path) not in describe_data(config, split)
    assert hub_dataset_id(config) == dataset_id and card_language(config) == language


def test_a_language_code_is_checked():
    with pytest.raises(ValueError, match="'english' is not a language code"):
        pretraining.PretrainingConfig(output_dir="out", language="en,english")


def test_continuing_at_a_longer_length_records_the_new_training_length(tmp_path):
    """Context extension (`--model_name_or_path FOLDER --max_seq_length 512`): the model is trained at the longer
    length now, and its config says so; a shorter length leaves the recorded one."""
    from conftest import tiny_config

    se.SinusoidalEncoderForMaskedLM(tiny_config(max_position_embeddings=32)).save_pretrained(tmp_path / "short")
    for length, recorded in ((64, 64), (16, 32)):
        config = pretraining.PretrainingConfig(
            output_dir=str(tmp_path / "out"), model_name_or_path=str(tmp_path / "short"), max_seq_length=length
        )
        assert pretraining.build_model_config(config, tokenizer=None).max_position_embeddings == recorded


def test_the_task_table_has_one_entry_per_head_of_the_model():
    """One task table (`tasks.TASKS`): every head the model registers (its config's AUTO_MAP) has one entry, whose
    Auto class loads it and whose head names its class; the ONNX export, fill-mask, the card and the pictures read
    the table. A class of another library is judged by its name alone."""
    from sinusoidal_encoder_training.tasks.registry import TASKS, loss_unit, task_of_architecture

    assert sorted(task.auto_class for task in TASKS.values()) == sorted(a.__name__ for a in se.AUTO_CLASSES)
    for auto_class, model_class in se.AUTO_CLASSES.items():
        task = TASKS[task_of_architecture(model_class.__name__)]
        assert task.auto_class == auto_class.__name__ and model_class.__name__.endswith(task.head)
    assert task_of_architecture("BertForTokenClassification") == "token-classification"
    assert task_of_architecture("BertModel") == "feature-extraction"
    assert task_of_architecture("GPT2LMHeadModel") is None and task_of_architecture(None) is None
    units = {"architectures": ["SinusoidalEncoderForSequenceClassification"], "problem_type": "regression"}
    assert loss_unit(units) == "squared error per output"
    assert loss_unit({"architectures": ["SinusoidalEncoderForMaskedLM"]}) == "nats per masked token"


def test_setup_reads_the_command_table_with_the_standard_library_alone():
    """setup.py gathers the console scripts in pip's build environment, where only setuptools is installed: the
    table and the configurations it imports need nothing beyond the standard library (an interpreter without
    site-packages gets the same scripts)."""
    code = (
        "import sys; sys.path.insert(0, 'training')\n"
        "from sinusoidal_encoder_training.cli.commands import console_scripts; print(*console_scripts(), sep='\\n')"
    )
    bare = subprocess.run([sys.executable, "-I", "-S", "-c", code], cwd=REPO, capture_output=True, text=True)
    assert bare.returncode == 0 and bare.stdout.splitlines() == console_scripts(), bare.stderr[-2000:]


def test_a_configuration_module_that_declares_a_command_is_a_command(tmp_path, monkeypatch, capsys):
    """A new command is two modules: its configuration (the class and its `COMMAND` entry) in `configs/` and its
    stage (`run(config)`). Dropped into the folder, it is in the table, behind `console` and `python -m`'s list, with
    its flags, `--help` and one-line refusals."""
    from sinusoidal_encoder_training import __main__ as package_main
    from sinusoidal_encoder_training import configs
    from sinusoidal_encoder_training.cli import commands

    (tmp_path / "greeting.py").write_text(
        "import dataclasses\n"
        "from sinusoidal_encoder_training.cli.arguments import CommandEntry, FlagConfig, check_positive\n\n\n"
        "@dataclasses.dataclass(frozen=True, kw_only=True)\n"
        "class GreetingConfig(FlagConfig):\n"
        '    """Greet someone."""\n\n'
        "    who: str = dataclasses.field(metadata={'help': 'Whom.', 'positional': True})\n"
        "    times: int = dataclasses.field(default=1, metadata={'help': 'How often.'})\n\n"
        "    def __post_init__(self):\n"
        "        super().__post_init__()\n"
        "        check_positive(self, 'times')\n\n\n"
        "def run(config):\n"
        "    print(' '.join(['hello', config.who] * config.times))\n\n\n"
        "COMMAND = CommandEntry('greet', 'configs.greeting', GreetingConfig, 'greet someone')\n"
    )
    monkeypatch.setattr(configs, "__path__", [*configs.__path__, str(tmp_path)])
    monkeypatch.delitem(sys.modules, "sinusoidal_encoder_training.configs.greeting", raising=False)
    table = commands.gather_commands()
    assert list(table) == sorted(table) and set(table) == {*COMMANDS, "greet"}
    monkeypatch.setattr(commands, "COMMANDS", table)
    monkeypatch.setattr(console, "COMMANDS", table)
    monkeypatch.setattr(package_main, "COMMANDS", table)
    assert f"{SCRIPT_PREFIX}greet = sinusoidal_encoder_training.cli.console:greet" in commands.console_scripts()
    console.greet(["world", "--times", "2"])
    assert capsys.readouterr().out == "hello world hello world\n"
    package_main.main([])
    assert "  greet " in capsys.readouterr().out
    with pytest.raises(SystemExit) as refused:
        package_main.main(["greet", "world", "--times", "0"])
    assert refused.value.code == 2 and capsys.readouterr().err.endswith("--times must be a positive integer, got 0.\n")
