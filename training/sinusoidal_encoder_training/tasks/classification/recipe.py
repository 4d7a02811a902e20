"""Fine-tuning for sequence classification (single-label, multi-label, regression) and token classification: the
recipe of the tasks "text-classification" and "token-classification" (their entries: this package's `__init__.py`).
Here: the label column and its label space, one tag per word, the head's size, tokenisation with the labels as ids,
the task of the training loop (the head's loss, the metrics) and the baselines."""

from __future__ import annotations

from collections import Counter
from typing import Any

import datasets
import torch
from accelerate import Accelerator

from sinusoidal_encoder_training.cli.command_line import UsageError
from sinusoidal_encoder_training.configs import FinetuningConfig
from sinusoidal_encoder_training.data.batches import BatchedRows, PaddingCollator
from sinusoidal_encoder_training.data.pipeline import derive_seed, text_column
from sinusoidal_encoder_training.evaluation.metrics import (
    accuracy_and_macro_f1,
    entity_scores,
    multi_label_scores,
    regression_scores,
)
from sinusoidal_encoder_training.runs.even_batches import real_examples
from sinusoidal_encoder_training.runs.loop import TrainingTask, on_device
from sinusoidal_encoder_training.tasks.recipes import (
    STAGE,
    Prepared,
    check_texts,
    draw_training_examples,
    head_labels,
    model_inputs,
    plan_head,
)


def prepare(config: FinetuningConfig, raw: datasets.DatasetDict, tokenizer, model_config: Any) -> Prepared:
    """The label space of the data (checked), the model config's labels set (`num_labels`, `id2label`,
    `label2id`, `problem_type`), the splits tokenised, and what the loop and the card need."""
    tokens = config.task == "token-classification"
    text_col = (config.text_column_name or "tokens") if tokens else text_column(raw["train"], config.text_column_name)
    label_col = label_column(raw["train"], config)
    if label_col not in raw["validation"].column_names:
        raise UsageError(f"The validation split has no label column {label_col!r}.")
    problem, label_names = label_space(raw, label_col, config, head_labels(config, model_config))
    raw = draw_training_examples(raw, config)  # after the label space: a draw never changes it
    if problem == "token_classification":
        check_one_tag_per_word(raw, text_col, label_col, config)
    else:
        check_texts(raw, [text_col] + ([config.text_pair_column_name] if config.text_pair_column_name else []))
    if config.with_baselines and problem != "single_label_classification":
        raise UsageError(f"--baselines applies to single-label sequence classification, not {problem}.")
    # the folder's head: kept for its labels or some of them (in its order), refused or replaced for others
    label_names = plan_head(config, model_config, None if tokens else problem, label_names).labels
    num_labels = 1 if problem == "regression" else len(label_names)
    encoded = encode(
        raw, tokenizer, config.max_length, problem, label_names, (text_col, config.text_pair_column_name, label_col)
    )
    model_config.num_labels = num_labels
    if label_names is not None:
        model_config.id2label = dict(enumerate(label_names))
        model_config.label2id = {name: i for i, name in enumerate(label_names)}
    model_config.problem_type = None if tokens else problem
    # dynamic padding per batch, a batch at a time: DataCollatorWithPadding's (and, for tags per token,
    # DataCollatorForTokenClassification's) batches, without a Python object per token
    collate = PaddingCollator(tokenizer, pad_to_multiple_of=config.pad_to_multiple_of)
    header = [
        f"Task = {config.task} ({problem}), {num_labels} label(s)",
        f"Training examples = {len(encoded['train']):,}, evaluation examples = {len(encoded['validation']):,}",
    ]
    if problem == "single_label_classification":
        counts = Counter(raw["train"][label_col])
        header.append("Training labels = " + ", ".join(f"{k}: {v}" for k, v in counts.most_common()))

    def texts(split: str) -> list[str]:
        pair_col = config.text_pair_column_name  # a pair's words count too: both texts, joined
        if not pair_col:
            return raw[split][text_col]
        return [f"{a} {b}" for a, b in zip(raw[split][text_col], raw[split][pair_col], strict=True)]

    def baselines(final: dict[str, float]) -> dict[str, float]:
        splits = [(texts(split), encoded[split]["labels"]) for split in ("train", "validation")]
        scores, missing = run_baselines(*splits, num_labels)
        line = f"accuracy: model {final['eval_accuracy']:.4f}, majority class {scores['majority_accuracy']:.4f}"
        line += f"; {missing}" if missing else f", TF-IDF + logistic regression {scores['tfidf_logreg_accuracy']:.4f}"
        print(line)
        return scores

    labels = "a real number" if problem == "regression" else ", ".join(label_names)
    return Prepared(
        train=BatchedRows(encoded["train"]),
        validation=BatchedRows(encoded["validation"]),
        collate=collate,
        make_task=lambda generator: ClassificationTask(config.seed, problem, label_names, generator),
        header=header,
        problem=problem,
        labels=labels,
        example="Tag the words of this sentence ." if tokens else "A passage of documentation to classify.",
        uses=f"{config.task} with the labels it was trained on: {labels}.",
        extra_scores=baselines if config.with_baselines else None,
    )


def label_column(dataset: datasets.Dataset, config: FinetuningConfig) -> str:
    names = dataset.column_names
    if config.label_column_name is not None:
        if config.label_column_name not in names:
            raise UsageError(f"--label_column_name {config.label_column_name!r} is not a column (columns: {names}).")
        return config.label_column_name
    candidates = (
        ("ner_tags", "tags", "labels", "label") if config.task == "token-classification" else ("label", "labels")
    )
    for name in candidates:
        if name in names:
            return name
    raise UsageError(f"No label column found (looked for {candidates}; columns: {names}): pass --label_column_name.")


def label_space(
    raw: datasets.DatasetDict, column: str, config: FinetuningConfig, known: list[str] | None = None
) -> tuple[str, list[str] | None]:
    """(problem type, label names or None for regression), with unseen evaluation labels refused, and a training
    split of a single class; but labels `known` (those of the folder's trained head, `head_labels`) are not unseen,
    and data of the head's labels, some or all, is the head's to learn or score (`plan_head` takes its labels)."""
    feature = raw["train"].features[column]
    inner = feature.feature if isinstance(feature, (datasets.Sequence, datasets.List)) else feature
    train_values, eval_values = raw["train"][column], raw["validation"][column]
    if config.task == "token-classification":
        if not isinstance(feature, (datasets.Sequence, datasets.List)):
            raise UsageError(f"--label_column_name {column!r} must hold a list of tags per example for tokens.")
        problem = "token_classification"
        train_set = {t for tags in train_values for t in tags}
        eval_set = {t for tags in eval_values for t in tags}
    elif (
        isinstance(feature, (datasets.Sequence, datasets.List)) or config.problem_type == "multi_label_classification"
    ):
        problem = "multi_label_classification"
        train_set = {t for labels in train_values for t in labels}
        eval_set = {t for labels in eval_values for t in labels}
    elif config.problem_type == "regression" or (
        isinstance(inner, datasets.Value) and inner.dtype.startswith("float") and config.problem_type is None
    ):
        for value in [*train_values, *eval_values]:
            if not isinstance(value, (int, float)) or isinstance(value, bool):
                raise UsageError(f"Regression labels must be numbers; column {column!r} holds {value!r}.")
        return "regression", None
    else:
        problem = "single_label_classification"
        train_set, eval_set = set(train_values), set(eval_values)
    if None in train_set or None in eval_set:
        raise UsageError(f"The label column {column!r} has missing values.")
    if isinstance(inner, datasets.ClassLabel):
        names = list(inner.names)
        train_set, eval_set = {names[i] for i in train_set}, {names[i] for i in eval_set}
    else:
        names = sorted(train_set, key=lambda v: (isinstance(v, str), v))
    seen = {str(n) for n in [*names, *train_set, *eval_set]}
    check_distinct_labels(sorted(seen), config)
    if known is not None and seen <= set(known):
        return problem, [str(n) for n in names]  # the head's labels, or some of them
    unseen = eval_set - set(names) - train_set
    if unseen:
        raise UsageError(
            f"The validation split has labels the training split never shows: {sorted(map(str, unseen))[:10]}. "
            f"A model cannot learn them; fix the data or its split."
        )
    if problem != "token_classification" and len(names) < 2 and problem == "single_label_classification":
        raise UsageError(f"The training labels hold a single class ({names}): nothing to classify.")
    return problem, [str(n) for n in names]


def check_distinct_labels(names: list[str], config: FinetuningConfig) -> None:
    """Refuse labels that differ only by case or surrounding whitespace ('Positive' and 'positive '), most often
    one label written two ways, which would train as two classes; `--keep_similar_labels` keeps them apart."""
    if config.keep_similar_labels:
        return
    groups: dict[str, list[str]] = {}
    for name in names:
        groups.setdefault(name.strip().casefold(), []).append(name)
    similar = [group for group in groups.values() if len(group) > 1]
    if similar:
        more = f" (and {len(similar) - 1} more such group(s))" if len(similar) > 1 else ""
        raise UsageError(
            f"The labels {' and '.join(map(repr, similar[0]))} differ only by case or surrounding whitespace{more}: "
            "write each label one way in the data to make them one, or pass --keep_similar_labels to keep them apart."
        )


def check_one_tag_per_word(raw: datasets.DatasetDict, text_col: str, label_col: str, config: FinetuningConfig) -> None:
    """Token classification: every row has a list of words and as many tags, or a `UsageError` naming the file (or
    split) and the row."""
    for split, flag in (("train", "--train_file"), ("validation", "--validation_file")):
        where = f"{flag} {getattr(config, flag[2:])!r}" if getattr(config, flag[2:]) else f"the {split} split"
        for row, (words, tags) in enumerate(zip(raw[split][text_col], raw[split][label_col], strict=True), start=1):
            if not isinstance(words, list):
                raise UsageError(
                    f"{where}, row {row}: {text_col!r} holds {type(words).__name__}, not a list of words: token "
                    "classification takes one list of words and one list of tags per row."
                )
            if not all(isinstance(word, str) for word in words):
                odd = next(word for word in words if not isinstance(word, str))
                raise UsageError(
                    f"{where}, row {row}: {text_col!r} holds {odd!r} among its words: give every word as text."
                )
            if len(words) != len(tags):
                raise UsageError(
                    f"{where}, row {row}: {len(words)} words in {text_col!r} and {len(tags)} tags in {label_col!r}: "
                    "give one tag per word."
                )


class ClassificationTask(TrainingTask):
    """Sequence classification (single-label, multi-label, regression) or token classification."""

    name = STAGE

    def __init__(self, seed: int, problem: str, label_names: list[str] | None, generator: torch.Generator):
        self.problem = problem
        self.label_names = label_names
        self.generator = generator
        self.seed = seed

    def start_epoch(self, epoch: int) -> None:
        self.generator.manual_seed(derive_seed(self.seed, "data", epoch))

    def loss_units(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """As the heads count them: labelled tokens, or one unit per label value (one per example for single-label
        classification and one-output regression, one per label for multi-label)."""
        if self.problem == "token_classification":
            return (batch["labels"] != -100).sum()
        return on_device(batch["labels"].numel(), batch["labels"].device)

    def loss(self, model, batch, num_items_in_batch):
        """The head's own loss: summed over the batch's units, divided by `num_items_in_batch`."""
        return model(**model_inputs(batch), num_items_in_batch=num_items_in_batch).loss

    @torch.no_grad()
    def predict(self, model, loader, accelerator: Accelerator):
        """Loss, predictions and references over the whole split, gathered across processes (the examples
        accelerate repeats on the last batch counted once)."""
        model.eval()
        loss_sum, units, predictions, references = 0.0, 0.0, [], []
        for batch in loader:
            labels = batch["labels"]
            real = real_examples(accelerator, labels.shape[0])
            if real == labels.shape[0]:  # one forward: the loss and the logits
                units_here = self.loss_units(batch).clamp(min=1)
                outputs = model(**model_inputs(batch), num_items_in_batch=units_here)
                sums, counts = outputs.loss * units_here, self.loss_units(batch)
            else:  # the last batch: the loss of its real examples alone
                outputs = model(**model_inputs(batch, labels=False))
                kept = {k: v[:real] for k, v in batch.items()}
                counts = self.loss_units(kept) if real else torch.zeros((), device=labels.device)
                sums = self.loss(model, kept, counts.clamp(min=1)) * counts.clamp(min=1) if real else counts.float()
            totals = accelerator.reduce(torch.stack([sums.double(), counts.double()]), reduction="sum")
            loss_sum += totals[0].item()
            units += totals[1].item()
            logits = outputs.logits
            if self.problem == "token_classification":  # pad across processes before gathering
                logits = accelerator.pad_across_processes(logits, dim=1)
                labels = accelerator.pad_across_processes(labels, dim=1, pad_index=-100)
            logits, labels = accelerator.gather_for_metrics((logits, labels))
            if self.problem == "token_classification":
                for row_pred, row_ref in zip(logits.argmax(-1).tolist(), labels.tolist(), strict=True):
                    keep = [i for i, r in enumerate(row_ref) if r != -100]
                    predictions.append([self.label_names[row_pred[i]] for i in keep])
                    references.append([self.label_names[row_ref[i]] for i in keep])
            elif self.problem == "regression":
                predictions += logits.squeeze(-1).tolist()
                references += labels.tolist()
            elif self.problem == "multi_label_classification":
                predictions += (logits > 0).int().tolist()
                references += labels.int().tolist()
            else:
                predictions += logits.argmax(-1).tolist()
                references += labels.tolist()
        model.train()
        return loss_sum / max(units, 1.0), predictions, references

    def evaluate(self, model, loader, accelerator: Accelerator) -> dict[str, float]:
        loss, predictions, references = self.predict(model, loader, accelerator)
        if self.problem == "token_classification":
            scores = entity_scores(predictions, references)
        elif self.problem == "regression":
            scores = regression_scores(predictions, references)
        elif self.problem == "multi_label_classification":
            scores = multi_label_scores(predictions, references)
        else:
            scores = accuracy_and_macro_f1(predictions, references, len(self.label_names))
        return {"eval_loss": loss, **{f"eval_{k}": v for k, v in scores.items()}}


def encode(
    raw: datasets.DatasetDict, tokenizer, max_length: int, problem: str, label_names, columns
) -> datasets.DatasetDict:
    """Tokenise, truncate to `max_length`, and turn labels into ids (first sub-token of each word for tokens)."""
    text_col, pair_col, label_col = columns
    index = {name: i for i, name in enumerate(label_names or [])}
    features = raw["train"].features[label_col]
    inner = features.feature if isinstance(features, (datasets.Sequence, datasets.List)) else features
    class_names = inner.names if isinstance(inner, datasets.ClassLabel) else None

    def name_of(value):
        return class_names[value] if class_names is not None else str(value)

    def sequence_batch(batch):
        pairs = (batch[text_col], batch[pair_col]) if pair_col else (batch[text_col],)
        encoded = tokenizer(*pairs, truncation=True, max_length=max_length)
        if problem == "regression":
            encoded["labels"] = [float(v) for v in batch[label_col]]
        elif problem == "multi_label_classification":
            encoded["labels"] = [
                [1.0 if name in {name_of(v) for v in values} else 0.0 for name in label_names]
                for values in batch[label_col]
            ]
        else:
            encoded["labels"] = [index[name_of(v)] for v in batch[label_col]]
        return encoded

    def token_batch(batch):
        # join the words with spaces, then give each word's label to its first sub-token (the others get -100)
        texts, owners = [], []
        for words in batch[text_col]:
            text = " ".join(words)
            owner = []  # the word of each character, None for the separating spaces
            for i, word in enumerate(words):
                owner += [i] * len(word) + [None]
            texts.append(text)
            owners.append(owner)
        encoded = tokenizer(texts, truncation=True, max_length=max_length, return_offsets_mapping=True)
        all_labels = []
        for offsets, owner, tags in zip(encoded["offset_mapping"], owners, batch[label_col], strict=True):
            labels, labelled = [], set()
            for start, end in offsets:
                word = next((owner[c] for c in range(start, end) if owner[c] is not None), None)
                if word is None or word in labelled:  # special tokens, spaces, later pieces of a word
                    labels.append(-100)
                else:
                    labels.append(index[name_of(tags[word])])
                    labelled.add(word)
            all_labels.append(labels)
        encoded["labels"] = all_labels
        encoded.pop("offset_mapping")
        return encoded

    for name in (text_col, pair_col):
        if name and name not in raw["train"].column_names:
            raise UsageError(f"Column {name!r} is not in the dataset (columns: {raw['train'].column_names}).")
    function = token_batch if problem == "token_classification" else sequence_batch
    return raw.map(function, batched=True, remove_columns=raw["train"].column_names, desc="Tokenizing")


def run_baselines(
    train: tuple[list[str], list[int]], validation: tuple[list[str], list[int]], num_labels: int
) -> tuple[dict[str, float], str | None]:
    """Majority class and TF-IDF (1-2-grams in two training texts or more) + logistic regression, trained on the
    (text, label id) rows the model trained on (a pair's two texts joined) and scored on the same validation rows,
    over the run's labels (the model's macro-F1 is over them too). The second baseline needs two labels and a
    shared term among the training rows (a small draw may hold neither): without them, only the majority class is
    scored, and the second value says why."""
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression

    (train_x, train_y), (eval_x, eval_y) = train, validation
    majority = Counter(train_y).most_common(1)[0][0]
    major = accuracy_and_macro_f1([majority] * len(eval_y), eval_y, num_labels)
    scores = {"majority_accuracy": major["accuracy"], "majority_macro_f1": major["macro_f1"]}
    not_scored = "TF-IDF + logistic regression not scored: "
    if len(set(train_y)) < 2:
        return scores, not_scored + "the training rows hold one label"
    vectorizer = TfidfVectorizer(sublinear_tf=True, min_df=2, ngram_range=(1, 2), max_features=200_000)
    try:
        features = vectorizer.fit_transform(train_x)
    except ValueError:  # scikit-learn's "no terms remain" (or "max_df ... < min_df" for one text)
        return scores, not_scored + "no term occurs in two training rows"
    classifier = LogisticRegression(max_iter=2000, C=10.0).fit(features, train_y)
    tfidf = accuracy_and_macro_f1(classifier.predict(vectorizer.transform(eval_x)).tolist(), eval_y, num_labels)
    scores.update(tfidf_logreg_accuracy=tfidf["accuracy"], tfidf_logreg_macro_f1=tfidf["macro_f1"])
    return scores, None
