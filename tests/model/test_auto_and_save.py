"""Auto classes, save/load round trips (plain, sharded, bf16), and Hub folders loaded with trust_remote_code."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
import transformers
from conftest import random_ids, tiny_config

import sinusoidal_encoder as se

HEADS = {auto_class.__name__: model_class for auto_class, model_class in se.AUTO_CLASSES.items()}  # AUTO_MAP's


# The model package's code: every file is copied into every saved folder (transformers follows the relative imports
# from the modeling file) and loads from there with trust_remote_code.
MODEL_FILES = sorted(path.name for path in Path(se.__file__).parent.glob("*.py") if path.name != "__init__.py")


def imported_modules(code: str) -> tuple[set[str], set[str]]:
    """The top-level modules that `code` imports absolutely, and the sibling modules it imports relatively."""
    absolute, relative = set(), set()
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Import):
            absolute |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level:
            relative.add(node.module)
        elif isinstance(node, ast.ImportFrom):
            absolute.add(node.module.split(".")[0])
    return absolute, relative


def head_inputs(auto_name: str) -> dict[str, torch.Tensor]:
    """Inputs of the shape the task of `auto_name` takes (its `input_axes` in the task table: 3 choices where it has
    them), with some right padding."""
    from sinusoidal_encoder_training.tasks.registry import TASKS

    axes = next(task.input_axes for task in TASKS.values() if task.auto_class == auto_name)
    shape = [9 if axis == "sequence" else 3 if axis == "choices" else 2 for axis in axes]
    ids = random_ids(torch.Size(shape[:-1]).numel(), 9).view(shape)
    mask = torch.ones_like(ids)
    mask[..., -2:] = 0  # some right padding
    return {"input_ids": ids, "attention_mask": mask}


def head_config(**overrides):
    return tiny_config(num_labels=3, **overrides)


def config_dict(config) -> dict:
    """`to_dict()` less `_name_or_path`, which records where a config was loaded from."""
    values = config.to_dict()
    values.pop("_name_or_path", None)
    return values


def outputs_of(model, inputs):
    with torch.no_grad():
        out = model(**inputs)
    return {k: v for k, v in out.items() if isinstance(v, torch.Tensor)}


def assert_same_model(a, b, inputs):
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    for key in sa:
        assert sa[key].dtype == sb[key].dtype, key
        assert torch.equal(sa[key], sb[key]), key
    assert config_dict(a.config) == config_dict(b.config)
    oa, ob = outputs_of(a.eval(), inputs), outputs_of(b.eval(), inputs)
    assert oa.keys() == ob.keys() and oa
    for key in oa:
        assert torch.equal(oa[key], ob[key]), key


def test_auto_config_knows_the_model_type(tmp_path):
    config = transformers.AutoConfig.for_model("sinusoidal_encoder", hidden_size=64, num_attention_heads=4)
    assert isinstance(config, se.SinusoidalEncoderConfig) and config.hidden_size == 64
    config.save_pretrained(tmp_path)
    loaded = transformers.AutoConfig.from_pretrained(tmp_path)
    assert isinstance(loaded, se.SinusoidalEncoderConfig)
    assert config_dict(loaded) == config_dict(config)
    assert json.loads((tmp_path / "config.json").read_text())["auto_map"]["AutoConfig"] == (
        "configuration_sinusoidal_encoder.SinusoidalEncoderConfig"
    )


@pytest.mark.parametrize("auto_name", list(HEADS))
@pytest.mark.parametrize("variant", ["plain", "sharded", "bf16"])
def test_round_trip_through_auto_class(tmp_path, auto_name, variant):
    auto_class = se.auto_class(auto_name)  # transformers' own, or the package's for a head transformers lacks
    model = auto_class.from_config(head_config())
    assert type(model) is HEADS[auto_name]
    save_kwargs = {}
    if variant == "sharded":
        save_kwargs["max_shard_size"] = "20KB"
    if variant == "bf16":
        model = model.to(torch.bfloat16)
    model.save_pretrained(tmp_path, **save_kwargs)
    files = sorted(os.listdir(tmp_path))
    if variant == "sharded":
        assert "model.safetensors.index.json" in files and sum(f.endswith(".safetensors") for f in files) > 1
    else:
        assert "model.safetensors" in files
    load_kwargs = {"dtype": torch.bfloat16} if variant == "bf16" else {}
    loaded = auto_class.from_pretrained(tmp_path, **load_kwargs)
    assert type(loaded) is HEADS[auto_name]
    if variant == "bf16":
        assert loaded.dtype == torch.bfloat16
        # dtype="auto" (the v5 default) reads the bf16 checkpoint as bf16 too
        assert auto_class.from_pretrained(tmp_path).dtype == torch.bfloat16
    assert_same_model(model, loaded, head_inputs(auto_name))


def test_saved_folder_is_hub_ready(tmp_path):
    se.SinusoidalEncoderForMaskedLM(head_config()).save_pretrained(tmp_path)
    files = set(os.listdir(tmp_path))
    model_files = {"modeling_sinusoidal_encoder.py", "configuration_sinusoidal_encoder.py", "positions.py"}
    assert model_files | {"position_modes.py", "losses.py"} < set(MODEL_FILES)
    assert {"config.json", "model.safetensors", *MODEL_FILES} <= files
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["model_type"] == "sinusoidal_encoder"
    assert set(config["auto_map"]) == {"AutoConfig", *HEADS}
    for auto_name, cls in HEADS.items():
        assert config["auto_map"][auto_name] == f"modeling_sinusoidal_encoder.{cls.__name__}"
    # the copied code imports the standard library, torch and transformers, and its own files by relative import:
    # nothing of this package or the training code
    for name in MODEL_FILES:
        absolute, relative = imported_modules((tmp_path / name).read_text())
        assert absolute <= set(sys.stdlib_module_names) | {"torch", "transformers"}, (name, absolute)
        assert {f"{module}.py" for module in relative} <= set(MODEL_FILES), (name, relative)
    for name in ("positions.py", "position_modes.py"):  # the position encodings and modes: torch alone
        assert imported_modules((tmp_path / name).read_text())[0] <= set(sys.stdlib_module_names) | {"torch"}, name


HUB_LOADER = textwrap.dedent(
    """
    import os, sys
    sys.modules["sinusoidal_encoder"] = None  # the package is not installed here: importing it fails
    try:
        import sinusoidal_encoder  # noqa: F401
    except ImportError:
        pass
    else:
        raise SystemExit("sinusoidal_encoder was importable")
    import torch, transformers
    folder, inputs_path, out_path = sys.argv[1:4]
    jobs = torch.load(inputs_path)
    results = {}
    for auto_name, inputs in jobs.items():
        if hasattr(transformers, auto_name):
            model = getattr(transformers, auto_name).from_pretrained(f"{folder}/{auto_name}", trust_remote_code=True)
        else:  # an Auto class of the package's own: the class the folder's auto_map names, as the card loads it
            from transformers.dynamic_module_utils import get_class_from_dynamic_module

            config = transformers.AutoConfig.from_pretrained(f"{folder}/{auto_name}", trust_remote_code=True)
            model_class = get_class_from_dynamic_module(config.auto_map[auto_name], config.name_or_path)
            model = model_class.from_pretrained(f"{folder}/{auto_name}")
        assert type(model).__module__.startswith("transformers_modules."), type(model).__module__
        # every code file of the folder ran from the folder's copy
        loaded = {name.rpartition(".")[2] for name in sys.modules if name.startswith("transformers_modules.")}
        code = {name[:-3] for name in os.listdir(f"{folder}/{auto_name}") if name.endswith(".py")}
        assert code and code <= loaded, code - loaded
        model.eval()
        with torch.no_grad():
            out = model(**inputs)
        results[auto_name] = {k: v for k, v in out.items() if isinstance(v, torch.Tensor)}
        results[auto_name]["__class__"] = type(model).__name__
    # the tokenizer needs no custom code: with the model's flag, or without the config, the same one, no prompt
    text = "Raise an error if the file does not exist."
    auto = transformers.AutoTokenizer.from_pretrained(f"{folder}/AutoModel", trust_remote_code=True)
    plain = transformers.PreTrainedTokenizerFast.from_pretrained(f"{folder}/AutoModel")
    assert auto(text)["input_ids"] == plain(text)["input_ids"] and len(plain(text)["input_ids"]) > 5
    torch.save(results, out_path)
    """
)


@pytest.mark.parametrize("auto_name", sorted(se.OWN_AUTO_CLASSES))
def test_an_auto_class_of_the_package_resolves_a_folder_by_its_table_and_by_auto_map(tmp_path, auto_name):
    """A head transformers has no Auto class for loads through the package's own (made from its `AUTO_MAP` line):
    to the package's class where it is registered, and to the folder's own code (config.json's `auto_map`) with
    `trust_remote_code=True` through an Auto class of that name that nothing was registered with."""
    assert not hasattr(transformers, auto_name) and getattr(se, auto_name) is se.auto_class(auto_name)
    model = se.auto_class(auto_name).from_config(head_config()).eval()
    assert type(model) is HEADS[auto_name]
    model.save_pretrained(tmp_path)
    assert json.loads((tmp_path / "config.json").read_text())["auto_map"][auto_name] == (
        f"modeling_sinusoidal_encoder.{HEADS[auto_name].__name__}"
    )
    loaded = se.auto_class(auto_name).from_pretrained(tmp_path)
    assert type(loaded) is HEADS[auto_name]
    unregistered = se._own_auto_class(auto_name)
    with pytest.raises(ValueError):
        unregistered.from_pretrained(tmp_path)  # remote code only when trusted
    remote = unregistered.from_pretrained(tmp_path, trust_remote_code=True).eval()
    assert type(remote).__name__ == HEADS[auto_name].__name__ and type(remote).__module__.startswith("transformers_")
    inputs = head_inputs(auto_name)
    for other in (loaded.eval(), remote):
        torch.testing.assert_close(outputs_of(other, inputs), outputs_of(model, inputs), rtol=0, atol=0)


@pytest.mark.slow
def test_hub_folder_loads_with_trust_remote_code_without_the_package(tmp_path, tokenizer):
    expected, jobs = {}, {}
    for auto_name, cls in HEADS.items():
        # one head with the randomized encoding: its evaluation-mode draw must be the same in the Hub copy
        overrides = {"position_mode": "ordered_subset"} if auto_name == "AutoModelForTokenClassification" else {}
        model = cls(head_config(**overrides)).eval()
        model.save_pretrained(tmp_path / auto_name)
        assert set(MODEL_FILES) <= set(os.listdir(tmp_path / auto_name))  # the loader runs each of them
        jobs[auto_name] = head_inputs(auto_name)
        expected[auto_name] = outputs_of(model, jobs[auto_name])
    tokenizer.save_pretrained(tmp_path / "AutoModel")
    torch.save(jobs, tmp_path / "inputs.pt")
    script = tmp_path / "load.py"
    script.write_text(HUB_LOADER)
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_MODULES_CACHE=str(tmp_path / "modules"))
    proc = subprocess.run(
        [sys.executable, str(script), str(tmp_path), str(tmp_path / "inputs.pt"), str(tmp_path / "out.pt")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "Do you wish to run the custom code" not in proc.stdout + proc.stderr
    assert "instantiate a model of type" not in proc.stderr
    results = torch.load(tmp_path / "out.pt")
    for auto_name, cls in HEADS.items():
        got = results[auto_name]
        assert got.pop("__class__") == cls.__name__
        assert got.keys() == expected[auto_name].keys()
        for key, value in expected[auto_name].items():
            assert torch.equal(got[key], value), (auto_name, key)


@pytest.mark.slow
def test_folder_without_trust_remote_code_fails_clearly_without_the_package(tmp_path):
    se.SinusoidalEncoderModel(tiny_config()).save_pretrained(tmp_path / "m")
    code = (
        "import sys; sys.modules['sinusoidal_encoder'] = None\n"
        "import transformers\n"
        f"transformers.AutoModel.from_pretrained({str(tmp_path / 'm')!r}, trust_remote_code=False)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ, HF_HUB_OFFLINE="1"),
    )
    assert proc.returncode != 0
    assert "trust_remote_code" in proc.stderr
