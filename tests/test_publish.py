"""Publishing an exported folder (`sinusoidal-encoder-publish`, training/sinusoidal_encoder_training/hub.py): one
commit of the folder's files without its checkpoints, the card naming the Hub id; the folder left as it was, also
when the upload fails; `--dry_run` shows what would go; the token checked before anything is sent."""

from __future__ import annotations

import pytest
from conftest import FakeHfApi, exported_folder, folder_digest
from huggingface_hub.errors import LocalTokenNotFoundError

from sinusoidal_encoder_training import hub
from sinusoidal_encoder_training.command_line import UsageError


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
    assert str(folder) in (folder / "README.md").read_text()  # the local card still loads the local folder


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
