"""Folders saved by the package load on transformers 4.x (the latest 4.57 release) with `trust_remote_code=True`,
with the outputs they give on transformers 5. The check runs in a separate environment that scripts/test.sh builds
(.venv-tf4: torch and transformers 4.57, without this package); without it the test is skipped."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import torch
from conftest import REPO, SHIPPED_TOKENIZER, VOCAB_SIZE, random_ids, tiny_config
from transformers import AutoModel, AutoModelForMaskedLM, AutoTokenizer
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

import sinusoidal_encoder as se
from sinusoidal_encoder import fast_paths
from sinusoidal_encoder import modeling_sinusoidal_encoder as modeling
from sinusoidal_encoder_training.publishing.export import save_tokenizer

TF4_PYTHON = Path(os.environ.get("SINUSOIDAL_TF4_PYTHON", REPO / ".venv-tf4" / "bin" / "python"))
TEXTS = ["Return the sinusoidal encoding of every position.", "naïve café — 東京 🙂"]


def saved_folders(root: Path) -> None:
    """Every head (and variants: pre-LN, padding, a length past max_position_embeddings, no tying, rotary and ALiBi
    positions), with the outputs computed here, plus an exported tokenizer."""
    ids = random_ids(2, 10)
    mask = torch.ones_like(ids)
    mask[1, 6:] = 0
    models = {}
    variants = [(auto, cls, {}) for auto, cls in se.AUTO_CLASSES.items()]
    variants += [
        (AutoModelForMaskedLM, se.SinusoidalEncoderForMaskedLM, {"norm_first": True, "hidden_act": "gelu"}),
        (AutoModelForMaskedLM, se.SinusoidalEncoderForMaskedLM, {"tie_word_embeddings": False, "pad_token_id": 3}),
        (AutoModel, se.SinusoidalEncoderModel, {"max_position_embeddings": 16}),
        (AutoModelForMaskedLM, se.SinusoidalEncoderForMaskedLM, {"position_encoding": "rotary"}),
        (AutoModelForMaskedLM, se.SinusoidalEncoderForMaskedLM, {"position_encoding": "alibi"}),
    ]
    for index, (auto_class, model_class, overrides) in enumerate(variants):
        model = model_class(tiny_config(num_labels=3, **overrides)).eval()
        inputs = {"input_ids": ids, "attention_mask": mask}
        if model_class is se.SinusoidalEncoderForMultipleChoice:
            inputs = {key: value.unsqueeze(1).expand(-1, 2, -1) for key, value in inputs.items()}
        if overrides.get("max_position_embeddings"):
            inputs = {"input_ids": random_ids(1, 300)}  # far past the length in the config
        name = f"{index}-{model_class.__name__}"
        model.save_pretrained(root / name)
        with torch.no_grad():
            outputs = model(**inputs)
        models[name] = {
            "auto_class": auto_class.__name__,
            "inputs": inputs,
            "outputs": {key: value for key, value in outputs.items() if isinstance(value, torch.Tensor)},
        }
    tokenizer = AutoTokenizer.from_pretrained(SHIPPED_TOKENIZER)
    save_tokenizer(tokenizer, root / "tokenizer")
    tokenizer_reference = {"folder": "tokenizer", "texts": TEXTS, "input_ids": tokenizer(TEXTS)["input_ids"]}
    torch.save({"models": models, "tokenizer": tokenizer_reference}, root / "reference.pt")


@pytest.mark.skipif(
    not TF4_PYTHON.exists(), reason=f"no transformers 4.x environment at {TF4_PYTHON} (scripts/test.sh builds it)"
)
@pytest.mark.slow
def test_saved_folders_load_on_transformers_4_with_the_same_outputs(tmp_path):
    saved_folders(tmp_path / "models")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_MODULES_CACHE": str(tmp_path / "modules"), "PYTHONPATH": ""}
    proc = subprocess.run(
        [str(TF4_PYTHON), str(REPO / "tests" / "model" / "transformers4_check.py"), str(tmp_path / "models")],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["transformers"].startswith("4.57.") and not report["package_importable"]
    assert len(report["models"]) == len(se.AUTO_CLASSES) + 5
    for name, result in report["models"].items():
        assert result["module"].startswith("transformers_modules."), name  # the folder's own code ran
        assert result["class"] == name.split("-", 1)[1]
        for key, diff in result["max_abs_diff"].items():
            assert diff <= 1e-6, (name, key, diff)
    untied = next(r for n, r in report["models"].items() if n.startswith(f"{len(se.AUTO_CLASSES) + 1}-"))
    assert untied["pad_token_id"] == 3 and untied["tie_word_embeddings"] is False
    assert report["tokenizer"] == {"class": "PreTrainedTokenizerFast", "same_ids": True}


@pytest.mark.parametrize("attn_implementation", ["eager", "sdpa"])
def test_fallback_masks_for_older_transformers_give_the_same_outputs(monkeypatch, attn_implementation):
    """Without transformers' `create_bidirectional_mask` (4.57 lacks it) the model builds the masks itself."""
    model = AutoModel.from_config(tiny_config(unpad_inputs=False), attn_implementation=attn_implementation).eval()
    ids = random_ids(3, 9)
    mask = torch.ones_like(ids)
    mask[0, 5:] = 0
    mask[2, 1:] = 0
    with torch.no_grad():
        expected = model(ids, attention_mask=mask).last_hidden_state
        dense_expected = model(ids, attention_mask=torch.ones_like(ids)).last_hidden_state
        monkeypatch.setattr(fast_paths, "create_bidirectional_mask", None)
        got = model(ids, attention_mask=mask).last_hidden_state
        dense_got = model(ids, attention_mask=torch.ones_like(ids)).last_hidden_state
    assert torch.equal(got, expected) and torch.equal(dense_got, dense_expected)
    assert fast_paths.bidirectional_mask(model.config, torch.ones_like(ids), expected) is None


def test_attention_lookup_without_get_interface(monkeypatch):
    """transformers 4.x's attention registry has no `get_interface` and no "eager" entry."""

    class OldRegistry(dict):
        pass

    old = OldRegistry(sdpa=ALL_ATTENTION_FUNCTIONS["sdpa"])
    monkeypatch.setattr(modeling, "ALL_ATTENTION_FUNCTIONS", old)
    assert modeling._attention_function("eager") is modeling.eager_attention_forward
    assert modeling._attention_function("sdpa") is old["sdpa"]
    model = se.SinusoidalEncoderModel(tiny_config(vocab_size=VOCAB_SIZE)).eval()
    with torch.no_grad():
        assert torch.isfinite(model(random_ids(2, 7)).last_hidden_state).all()
