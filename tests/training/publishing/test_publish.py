"""Publishing an exported folder (`sinusoidal-encoder-publish`, `sinusoidal_encoder_training.publishing.hub`):
one commit of the folder's files without its checkpoints, the card naming the Hub id; the folder left as it was, also
when the upload fails; `--dry_run` shows what would go; the token checked before anything is sent; the Hub id's form
and the weights (readable, matching config.json) checked first, by a dry run too."""

from __future__ import annotations

import json
import re
import sys

import pytest
import torch
from conftest import VARIANTS, FakeHfApi, exported_folder, folder_digest
from huggingface_hub.errors import LocalTokenNotFoundError
from safetensors.torch import load_file, save_file

from sinusoidal_encoder_training.cli import command_line
from sinusoidal_encoder_training.cli.command_line import UsageError
from sinusoidal_encoder_training.publishing import hub
from sinusoidal_encoder_training.stages import finetuning, pretraining


@pytest.fixture
def folder(tmp_path, tokenizer):
    """An exported masked-LM folder as a run leaves it: a card naming the folder, resumable checkpoints and tracker
    logs beside the model, an ONNX export."""
    folder = exported_folder(tmp_path, tokenizer, "fill-mask")
    (folder / "checkpoints" / "step_2").mkdir(parents=True)
    (folder / "checkpoints" / "step_2" / "optimizer.bin").write_bytes(b"x" * 100)
    (folder / "runs").mkdir()
    (folder / "runs" / "events.out").write_bytes(b"log")
    (folder / "model.onnx").write_bytes(b"onnx" * 10)
    return folder


@pytest.fixture
def online(monkeypatch):
    """The Hub counts as reachable (the suite runs with HF_HUB_OFFLINE=1)."""
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", False)


def test_publish_uploads_one_commit_and_leaves_the_folder_as_it_was(folder, online):
    before = folder_digest(folder)
    api = FakeHfApi(user="me")
    assert hub.main([str(folder), "--hub_model_id", "me/tiny", "--private"], api=api).endswith("/commit/fake")
    assert api.calls == [
        ("create_repo", "me/tiny", True, True),
        ("create_commit", "me/tiny", "Upload sinusoidal encoder"),
    ]
    assert set(api.uploaded) == set(hub.files_to_upload(str(folder)))
    assert {"model.safetensors", "config.json", "tokenizer.json", "README.md", "model.onnx"} <= set(api.uploaded)
    assert not any(name.startswith(("checkpoints/", "runs/")) for name in api.uploaded)
    assert api.uploaded["model.safetensors"] == (folder / "model.safetensors").read_bytes()
    card = api.uploaded["README.md"].decode()
    assert '"me/tiny"' in card and str(folder) not in card
    assert folder_digest(folder) == before
    assert 'from_pretrained("exported")' in (folder / "README.md").read_text()  # the local card loads the folder


def test_dry_run_lists_the_files_and_the_card_and_sends_nothing(folder, capsys):
    before = folder_digest(folder)
    api = FakeHfApi(fail_whoami=AssertionError("a dry run contacts no Hub"))
    assert hub.main([str(folder), "--hub_model_id", "me/tiny", "--dry_run"], api=api) is None
    shown = capsys.readouterr().out
    names = hub.files_to_upload(str(folder))
    assert shown.startswith(f"would upload {len(names)} files (")
    for name in names:
        assert f"  {name}\n" in shown, name
    assert "checkpoints/" not in shown and "runs/" not in shown
    assert "README.md as it would be published" in shown and '"me/tiny"' in shown
    assert api.calls == [] and folder_digest(folder) == before


@pytest.mark.parametrize(
    ("api", "message"),
    [
        (FakeHfApi(fail_whoami=LocalTokenNotFoundError("Token is required")), "Token is required.*hf auth login"),
        (FakeHfApi(user="other"), "the token of 'other' cannot write to 'me'"),
        (
            FakeHfApi(user="me", fail_commit=ConnectionError("Connection refused")),
            "upload .*failed.*Connection refused",
        ),
    ],
)
def test_a_failed_publish_says_why_in_one_line_and_changes_nothing(folder, online, api, message):
    before = folder_digest(folder)
    with pytest.raises(UsageError, match=message):
        hub.main([str(folder), "--hub_model_id", "me/tiny"], api=api)
    assert folder_digest(folder) == before


def test_publish_needs_the_hub(folder):
    with pytest.raises(UsageError, match="HF_HUB_OFFLINE is set"):
        hub.main([str(folder), "--hub_model_id", "me/tiny"], api=FakeHfApi())


def test_publish_refuses_a_folder_that_is_not_an_export(folder, online):
    (folder / "README.md").unlink()
    with pytest.raises(UsageError, match=r"README\.md"):
        hub.main([str(folder), "--hub_model_id", "me/tiny"], api=FakeHfApi())


BAD_IDS = ["not a valid/id/at all", "tiny", "me/tiny/extra", "me/", "/tiny", "me/ti--ny", "me/tiny.git", "mé/tiny"]
BAD_ID_CASES = [("publish", bad_id) for bad_id in BAD_IDS] + [("pretrain", BAD_IDS[0]), ("finetune", "tiny")]


@pytest.mark.parametrize(("command", "bad_id"), BAD_ID_CASES)
def test_a_bad_hub_id_is_one_line_before_any_work(tmp_path, request, monkeypatch, capsys, command, bad_id):
    out = str(tmp_path / "out")
    if command == "publish":  # a folder that publishes, and a dry run: nothing else to refuse
        main, args = hub.main, [str(request.getfixturevalue("folder")), "--hub_model_id", bad_id, "--dry_run"]
    elif command == "pretrain":
        main, args = pretraining.main, ["--output_dir", out, "--hub_model_id", bad_id]
    else:
        main, args = finetuning.main, ["--model_name_or_path", "m", "--output_dir", out, "--hub_model_id", bad_id]
    for module, run in ((pretraining, "pretrain"), (finetuning, "finetune")):  # past the checks, a run would start
        monkeypatch.setattr(module, run, lambda config: pytest.fail(f"{command} started with {bad_id!r}"))
    monkeypatch.delenv("SINUSOIDAL_ENCODER_DEBUG", raising=False)
    monkeypatch.setattr(sys, "argv", [f"{command}.py", *args])
    capsys.readouterr()  # what making the folder printed
    with pytest.raises(SystemExit) as stopped:
        with command_line.front():
            main()
    captured = capsys.readouterr()
    assert stopped.value.code == 2 and len(captured.err.strip().splitlines()) == 1, captured.err
    assert captured.err.startswith(f"{command}.py: error: --hub_model_id {bad_id!r} is not a Hub model id: ")
    assert "expected 'namespace/name'" in captured.err and captured.out == ""
    assert not (tmp_path / "out").exists()


def test_publish_refuses_an_empty_or_truncated_weight_file(folder, capsys):
    weights = folder / "model.safetensors"
    whole = weights.read_bytes()
    weights.write_bytes(b"")
    with pytest.raises(UsageError, match=rf"^{re.escape(repr(str(weights)))} is empty \(0 bytes\)"):
        hub.main([str(folder), "--hub_model_id", "me/tiny", "--dry_run"], api=FakeHfApi())
    weights.write_bytes(whole[:-100])
    with pytest.raises(UsageError, match=rf"^{re.escape(repr(str(weights)))} cannot be read as safetensors"):
        hub.main([str(folder), "--hub_model_id", "me/tiny", "--dry_run"], api=FakeHfApi())
    assert "would upload" not in capsys.readouterr().out


def _rewrite(path, change) -> None:
    tensors = load_file(path)
    change(tensors)
    save_file(tensors, path, metadata={"format": "pt"})


def _narrow_embeddings(tensors):
    name = "model.embeddings.word_embeddings.weight"
    tensors[name] = tensors[name][:, :16].contiguous()


@pytest.mark.parametrize(
    ("change_weights", "change_config", "message"),
    [
        (
            _narrow_embeddings,
            None,
            r"1 of another shape \('model\.embeddings\.word_embeddings\.weight' is \[16384, 16\], config\.json "
            r"makes it \[16384, 32\]\)",
        ),
        (
            None,
            {"hidden_size": 64},
            r"of another shape \('[a-z_.]+' is \[32\], config\.json makes it \[64\], \.\.\.\)",
        ),
        (lambda t: t.pop("lm_head.layer_norm.bias"), None, r"1 missing \('lm_head\.layer_norm\.bias'\)\. "),
        (lambda t: t.update(extra=torch.zeros(2)), None, r"1 unexpected \('extra'\)\. "),
    ],
    ids=["a tensor's shape", "config.json's size", "a missing tensor", "an unknown tensor"],
)
def test_publish_refuses_weights_that_do_not_match_the_config(folder, change_weights, change_config, message):
    weights, config = folder / "model.safetensors", folder / "config.json"
    if change_weights is not None:
        _rewrite(weights, change_weights)
    if change_config is not None:
        config.write_text(json.dumps({**json.loads(config.read_text()), **change_config}))
    named = re.escape(repr(str(folder)))
    fit = r"\d+ of its weights do not fit the SinusoidalEncoderForMaskedLM of its config\.json: "
    with pytest.raises(UsageError, match=rf"^{named}: {fit}.*{message}") as refused:
        hub.main([str(folder), "--hub_model_id", "me/tiny", "--dry_run"], api=FakeHfApi())
    assert len(str(refused.value).splitlines()) == 1


@pytest.mark.parametrize("pipeline_tag", sorted(VARIANTS))
def test_a_valid_dry_run_passes_the_checks_and_shows_no_local_path(tmp_path, tokenizer, capsys, pipeline_tag):
    folder = exported_folder(tmp_path, tokenizer, pipeline_tag)  # tied weights (fill-mask) and a head of its own
    assert hub.main([str(folder), "--hub_model_id", "me/tiny", "--dry_run"], api=FakeHfApi()) is None
    shown = capsys.readouterr().out
    card = shown.split("README.md as it would be published:\n\n", 1)[1]
    assert shown.startswith("would upload ") and "name: me/tiny\n" in card and "\n# me/tiny\n" in card
    example = 1 if VARIANTS[pipeline_tag][1] else 2  # the pipeline; or the tokenizer and model of a prediction
    assert card.count('"me/tiny"') == 4 + example  # and tokenizer and model in both loading blocks
    assert "exported" not in card and "local folder" not in card and str(tmp_path) not in card
