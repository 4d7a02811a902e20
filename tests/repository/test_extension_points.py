"""The changes docs/layout.md says cost two or three files, made here in-process (registered, not edited in) and
followed to where they act: a new position mode reaches the embeddings through `position_modes.POSITION_MODES` alone; a
new way positions enter attention reaches every attention path, the model card and the config's docstring with its
own description, through its entry of `positions.POSITION_ENCODINGS` alone; a new
field of a run configuration becomes a flag, its help, a setting of the run record and of the resume check; a new
`eval_*` figure reaches metrics.jsonl and the log line as it comes. A new task head (a model class, its `AUTO_MAP`
line and its task package) is shown by span classification, added that way, and the tests that run over the task
table and `AUTO_MAP`: tests/training/tasks/test_finetuning_tasks.py, test_auto_and_save.py, test_onnx.py."""

from __future__ import annotations

import dataclasses
import importlib.util
import json

import pytest
import torch
from conftest import padded_batch, tiny_config

import sinusoidal_encoder as se
from sinusoidal_encoder import position_modes, positions


def doubled_positions(request: position_modes.PositionRequest) -> position_modes.Positions:
    """A mode that is not in the package: positions 0, 2, 4, ... for every sequence."""
    return position_modes.Positions(torch.arange(request.seq_len, device=request.device).unsqueeze(0) * 2, None)


def test_a_position_mode_registered_in_positions_reaches_the_embeddings(monkeypatch, tmp_path):
    monkeypatch.setitem(
        position_modes.POSITION_MODES, "doubled", position_modes.PositionMode(doubled_positions, doc="0, 2, 4, ...")
    )
    model = se.SinusoidalEncoderModel(tiny_config(position_mode="doubled")).eval()
    reference = se.SinusoidalEncoderModel(tiny_config()).eval()
    reference.load_state_dict(model.state_dict())
    ids, mask = padded_batch()
    with torch.no_grad():
        out = model(ids, attention_mask=mask).last_hidden_state
        expected = reference(ids, attention_mask=mask, position_ids=torch.arange(ids.shape[1])[None] * 2)
    real = mask.bool()
    torch.testing.assert_close(out[real], expected.last_hidden_state[real])
    model.save_pretrained(tmp_path)  # saved and loaded with its mode, as any config field
    assert se.SinusoidalEncoderModel.from_pretrained(tmp_path).config.position_mode == "doubled"


@pytest.mark.parametrize("like", ["rotary", "alibi"])
@pytest.mark.parametrize("attn_implementation", ["eager", "sdpa"])
def test_an_attention_side_encoding_registered_in_positions_reaches_every_attention_path(
    monkeypatch, like, attn_implementation
):
    """Registered under a new name, the rotation and the bias give what the package's own give, with padding (the
    padded and the packed paths) and without."""
    monkeypatch.setitem(positions.POSITION_ENCODINGS, "mine", positions.POSITION_ENCODINGS[like])
    config = tiny_config(position_encoding="mine")
    config._attn_implementation = attn_implementation
    model = se.SinusoidalEncoderModel(config).eval()
    reference_config = tiny_config(position_encoding=like)
    reference_config._attn_implementation = attn_implementation
    reference = se.SinusoidalEncoderModel(reference_config).eval()
    reference.load_state_dict(model.state_dict())
    plain = se.SinusoidalEncoderModel(tiny_config()).eval()
    plain.load_state_dict(model.state_dict())
    ids, mask = padded_batch()
    real = mask.bool()
    with torch.no_grad():
        for attention_mask in (mask, None):
            out = model(ids, attention_mask=attention_mask).last_hidden_state
            expected = reference(ids, attention_mask=attention_mask).last_hidden_state
            shown = real if attention_mask is not None else torch.ones_like(real)
            torch.testing.assert_close(out[shown], expected[shown])
        assert not torch.allclose(out, plain(ids).last_hidden_state)  # positions entered: not the paper's way


def test_a_position_encoding_registered_in_positions_is_described_by_the_model_card(monkeypatch, tmp_path):
    """One registry entry with its card: the exported model's card describes the new scheme, its formula filled in
    from the config, its tag in the metadata, nothing of the paper's encoding and no pictures of it."""
    from sinusoidal_encoder_training.publishing.model_card import draw_pictures, render_model_card

    card = position_modes.PositionCard(
        summary="distance buckets in attention (an encoding that is not in the package)",
        formula="h₀ = E[x]·√d\nattention: score(i, j) + b_h(bucket(|i − j|)) in each of {num_attention_heads} heads",
        note="The buckets are fixed.",
        length="The buckets are defined at every distance",
        extrapolation="distances past the training length share the last bucket",
        tags=("distance-buckets",),
    )
    monkeypatch.setitem(
        positions.POSITION_ENCODINGS, "buckets", positions.PositionEncoding(positions.alibi_bias, card=card)
    )
    model = se.SinusoidalEncoderForMaskedLM(tiny_config(position_encoding="buckets"))
    text = render_model_card(
        model, str(tmp_path), pipeline_tag="fill-mask", training_data="Text.", training_procedure="Steps.", metrics={}
    )
    folded = " ".join(text.split())
    assert f"A Transformer encoder with {card.summary}" in folded and "b_h(bucket(|i − j|)) in each of 4 heads" in text
    assert "- distance-buckets\n" in text and "sinusoidal-position-encoding" not in text and "PE(pos" not in text
    if importlib.util.find_spec("matplotlib"):
        assert "encoding_heatmap.png" not in draw_pictures(str(tmp_path), model.config)


def test_the_config_docstring_lists_every_registered_scheme_from_its_entry():
    """`SinusoidalEncoderConfig`'s docstring describes each position mode (its `doc`) and each encoding (its card:
    summary, formula, note) from the registries, so that a new scheme is described where it is registered: the
    configuration module names none of them itself."""
    from sinusoidal_encoder import configuration_sinusoidal_encoder as configuration

    folded = " ".join(se.SinusoidalEncoderConfig.__doc__.split())
    for name, mode in position_modes.POSITION_MODES.items():
        assert f'- `"{name}"`: {" ".join(mode.doc.split())}' in folded, name
    for name, encoding in positions.POSITION_ENCODINGS.items():
        assert f'- `"{name}"`: {" ".join(encoding.card.summary.split())}: ' in folded, name
        assert " ".join(encoding.card.note.split()) in folded, name
    assert "PE(pos, 2i) = sin(pos / base^(2i/d))" in folded and "{" not in folded  # formulas filled in, symbolically
    source = open(configuration.__file__, encoding="utf-8").read()
    registered = [*position_modes.POSITION_MODES, *positions.POSITION_ENCODINGS]
    assert not [name for name in registered if f'- `"{name}"`' in source]


def test_a_new_run_setting_is_a_flag_with_help_and_a_setting_of_the_run_record(tmp_path, capsys):
    from sinusoidal_encoder_training import configs
    from sinusoidal_encoder_training.cli.arguments import parse_config
    from sinusoidal_encoder_training.runs import run_folder

    extended = dataclasses.make_dataclass(
        "ExtendedConfig",
        [("warmup_blend", float, dataclasses.field(default=0.5, metadata={"help": "How much to blend."}))],
        bases=(configs.PretrainingConfig,),
        frozen=True,
        kw_only=True,
    )
    config = parse_config(extended, ["--output_dir", str(tmp_path / "out"), "--warmup_blend", "0.25"])
    assert config.warmup_blend == 0.25
    with pytest.raises(SystemExit):
        parse_config(extended, ["--help"])
    assert "--warmup_blend" in capsys.readouterr().out
    recorded = run_folder.run_settings(config, "pretraining", processes=1, mixed_precision="no")
    assert recorded["settings"]["warmup_blend"] == 0.25  # training_args / the run record
    changed = run_folder.run_settings(dataclasses.replace(config, warmup_blend=0.75), "pretraining", 1, "no")
    assert run_folder.settings_differences(recorded, changed) == ["--warmup_blend 0.25 (now 0.75)"]  # resume check


def test_a_new_evaluation_figure_reaches_the_metrics_file_and_the_log_line(tmp_path):
    from accelerate import Accelerator

    from sinusoidal_encoder_training.runs.metrics_log import MetricsLog, format_metrics, read_metrics

    log = MetricsLog(Accelerator(cpu=True), str(tmp_path), resumed_step=None, tracking=False)
    figures = {"eval_loss": 2.5, "eval_my_new_score": 0.125}
    log.log(figures, step=3)
    (line,) = read_metrics(str(tmp_path))
    assert line["eval_my_new_score"] == 0.125 and line["step"] == 3
    assert "eval_my_new_score 0.1250" in format_metrics(figures)
    assert json.loads((tmp_path / "metrics.jsonl").read_text())["eval_my_new_score"] == 0.125
