"""The exported model card's code runs as written: the package-installed block with the package, the
`trust_remote_code` block without it, the pipeline example both ways; it names the folder by its name, never by a
path of the machine; and after `publish.py` it names the Hub id. (README's and the documentation's blocks:
tests/repository/test_docs.py.)"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import VARIANTS, FakeHfApi, exported_folder, folder_digest, tiny_config
from test_finetuning import SENTENCES, run_finetune, write_jsonl

import sinusoidal_encoder as se
from sinusoidal_encoder_training.publishing import hub
from sinusoidal_encoder_training.publishing.model_card import local_folder_note, render_model_card, use_hub_id

WITHOUT_PACKAGE = 'import sys\nsys.modules["sinusoidal_encoder"] = None  # not installed here\n'


def python_blocks(card: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", card, flags=re.DOTALL)


def run_cards(cards: dict[str, tuple[Path, list[str]]], prefix: str = "") -> subprocess.CompletedProcess:
    """One fresh interpreter runs each card's `blocks` in turn, each block in a namespace of its own, from the folder
    that holds the card's model (as the card says); `=== NAME` on stdout before each card's blocks."""
    script = prefix + "import os\n"
    for name, (cwd, blocks) in cards.items():
        script += f"print({f'=== {name}'!r}, flush=True)\nos.chdir({str(cwd)!r})\n"
        script += "".join(f"exec({block!r}, {{}})\n" for block in blocks)
    first = next(iter(cards.values()))[0]
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_MODULES_CACHE=str(first.parent / "modules"))
    return subprocess.run(
        [sys.executable, "-c", script],
        cwd=first,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        stdin=subprocess.DEVNULL,
    )


def fine_tuned_classifier(folder: Path, pretrained: str) -> Path:
    """A text classifier fine-tuned (two steps, labels "neg" and "pos") from `pretrained` into `folder`, exported as
    the command line exports it (test_finetuning's helpers)."""
    folder.parent.mkdir(parents=True)
    rows = [{"text": s, "label": ["neg", "pos"][i % 2]} for i, s in enumerate(SENTENCES * 2)]
    data = write_jsonl(folder.parent / "data.jsonl", rows)
    run_finetune(
        model_name_or_path=pretrained, train_file=data, validation_file=data, output_dir=str(folder), max_train_steps=2
    )
    return folder


@pytest.mark.slow
def test_card_snippets_run_as_written(tmp_path, tokenizer, pretrained):
    """Every head's card, and a fine-tuned classifier's: its package block and its pipeline example in one
    interpreter, its `trust_remote_code` block and the example in another, without the package (two interpreters for
    the five cards: their start is most of the cost)."""
    folders = {tag: exported_folder(tmp_path / tag, tokenizer, tag) for tag in VARIANTS}
    folders["fine-tuned"] = fine_tuned_classifier(tmp_path / "fine-tuned" / "classifier", pretrained)
    with_package, without_package = {}, {}
    for name, folder in sorted(folders.items()):
        card = (folder / "README.md").read_text()
        package_block, remote_block, example = python_blocks(card)
        assert "import sinusoidal_encoder" in package_block, name
        assert "trust_remote_code=True" in remote_block, name
        assert f'"{folder.name}"' in example and "trust_remote_code=True" in example, name  # the folder by name
        with_package[name] = (folder.parent, [package_block, example])
        without_package[name] = (folder.parent, [remote_block, example])
    for cards, prefix in ((with_package, ""), (without_package, WITHOUT_PACKAGE)):
        proc = run_cards(cards, prefix)
        ran = proc.stdout.split("=== ")[1:]  # each card's output, its name first
        assert proc.returncode == 0, f"the card of {ran[-1].split()[0] if ran else '?'}:\n{proc.stderr[-3000:]}"
        assert "Do you wish to run the custom code" not in proc.stdout + proc.stderr
        sections = {section.split("\n", 1)[0]: section for section in ran}
        assert list(sections) == sorted(folders)
        for section in ran:  # each pipeline printed its predictions
            assert "score" in section, section
        # the fine-tuned head, with the label names it was trained on
        assert "'label': 'neg'" in sections["fine-tuned"] or "'label': 'pos'" in sections["fine-tuned"]


def test_publish_puts_the_hub_id_in_the_card(tmp_path, tokenizer, monkeypatch):
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", False)
    folder = exported_folder(tmp_path, tokenizer, "fill-mask")
    before = folder_digest(folder)
    api = FakeHfApi()
    hub.main([str(folder), "--hub_model_id", "me/tiny-encoder"], api=api)
    card = api.uploaded["README.md"].decode()
    assert str(folder) not in card
    for block in python_blocks(card):
        assert '"me/tiny-encoder"' in block
    assert "name: me/tiny-encoder" in card  # the model-index
    assert textwrap.dedent(card).startswith("---")
    assert folder_digest(folder) == before  # the local card still loads the local folder


def test_a_card_names_no_path_of_the_machine(tmp_path, tokenizer):
    folder = exported_folder(tmp_path, tokenizer, "fill-mask")  # tmp_path/exported, without a Hub id
    card = (folder / "README.md").read_text()
    assert [part for part in tmp_path.parts if part in card and part != tmp_path.anchor] == []
    assert "name: exported\n" in card and "\n# exported\n" in card  # the model-index and the title
    assert all('"exported"' in block for block in python_blocks(card)) and local_folder_note("exported") in card
    model = se.SinusoidalEncoderForMaskedLM(tiny_config(vocab_size=len(tokenizer)))
    named = render_model_card(
        model,
        str(folder),
        pipeline_tag="fill-mask",
        training_data="x",
        training_procedure="y",
        metrics={},
        model_id="me/tiny",
    )
    assert "exported" not in named and str(tmp_path) not in named and "local folder" not in named
    assert "name: me/tiny\n" in named and named.count('from_pretrained("me/tiny"') == 4


def test_publish_renames_a_card_that_names_the_folder_by_its_path(tmp_path, tokenizer):
    """A card written before cards named the folder by its name: its absolute path in the model-index and code."""
    folder = exported_folder(tmp_path, tokenizer, "fill-mask")
    card = (folder / "README.md").read_text().replace(f"\n\n{local_folder_note('exported')}", "")
    old = card.replace('"exported"', f'"{folder}"').replace("name: exported\n", f"name: {folder}\n")
    published = use_hub_id(old, "me/tiny")
    assert str(folder) not in published and "exported" not in published
    assert published.count('"me/tiny"') == 5 and "name: me/tiny\n" in published and "\n# me/tiny\n" in published


def test_extra_sections_follow_the_evaluation(tmp_path, tokenizer):
    model = se.SinusoidalEncoderForMaskedLM(tiny_config(vocab_size=len(tokenizer)))
    card = render_model_card(
        model,
        str(tmp_path),
        pipeline_tag="fill-mask",
        training_data="The built-in corpus.",
        training_procedure="A few steps.",
        metrics={"loss": 1.0},
        extra_sections={"Past the training length": "A table of losses.", "Another study": "Its figures."},
    )
    order = [card.index(s) for s in ("## Evaluation", "## Past the training length\n\nA table of losses.")]
    order += [card.index(s) for s in ("## Another study\n\nIts figures.", "## Citation")]
    assert order == sorted(order)
    plain = render_model_card(
        model, str(tmp_path), pipeline_tag="fill-mask", training_data="x", training_procedure="y", metrics={}
    )
    assert "Past the training length" not in plain
