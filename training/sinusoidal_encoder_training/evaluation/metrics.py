"""Evaluation metrics computed locally (no downloads): classification, multi-label, regression, entity-level F1."""

from __future__ import annotations

import math
import re
import string
from collections import Counter
from collections.abc import Sequence


def accuracy_and_macro_f1(predictions: Sequence[int], references: Sequence[int], num_labels: int) -> dict[str, float]:
    """Accuracy, and F1 averaged over the classes that occur in the references or the predictions."""
    if len(predictions) != len(references) or not references:
        raise ValueError("predictions and references must be non-empty and of equal length")
    correct = sum(p == r for p, r in zip(predictions, references, strict=True))
    f1s = []
    for label in range(num_labels):
        tp = sum(p == label and r == label for p, r in zip(predictions, references, strict=True))
        fp = sum(p == label and r != label for p, r in zip(predictions, references, strict=True))
        fn = sum(p != label and r == label for p, r in zip(predictions, references, strict=True))
        if tp + fp + fn:
            f1s.append(2 * tp / (2 * tp + fp + fn))
    return {"accuracy": correct / len(references), "macro_f1": sum(f1s) / len(f1s)}


def multi_label_scores(predictions: Sequence[Sequence[int]], references: Sequence[Sequence[int]]) -> dict[str, float]:
    """Multi-hot predictions against multi-hot references: micro-F1, macro-F1 and exact-match accuracy."""
    num_labels = len(references[0])
    tp = [0] * num_labels
    fp = [0] * num_labels
    fn = [0] * num_labels
    exact = 0
    for pred, ref in zip(predictions, references, strict=True):
        exact += list(pred) == list(ref)
        for j, (p, r) in enumerate(zip(pred, ref, strict=True)):
            tp[j] += p and r
            fp[j] += p and not r
            fn[j] += r and not p
    micro = 2 * sum(tp) / max(2 * sum(tp) + sum(fp) + sum(fn), 1)
    per_label = [2 * t / (2 * t + a + b) for t, a, b in zip(tp, fp, fn, strict=True) if t + a + b]
    return {
        "micro_f1": micro,
        "macro_f1": sum(per_label) / max(len(per_label), 1),
        "exact_match": exact / len(references),
    }


def _ranks(values: Sequence[float]) -> list[float]:
    """Ranks starting at 1, ties given their average rank."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def pearson(x: Sequence[float], y: Sequence[float]) -> float:
    n = len(x)
    mx, my = sum(x) / n, sum(y) / n
    sxy = sum((a - mx) * (b - my) for a, b in zip(x, y, strict=True))
    sxx = sum((a - mx) ** 2 for a in x)
    syy = sum((b - my) ** 2 for b in y)
    return sxy / math.sqrt(sxx * syy) if sxx > 0 and syy > 0 else float("nan")


def regression_scores(predictions: Sequence[float], references: Sequence[float]) -> dict[str, float]:
    mse = sum((p - r) ** 2 for p, r in zip(predictions, references, strict=True)) / len(references)
    return {
        "pearson": pearson(predictions, references),
        "spearman": pearson(_ranks(predictions), _ranks(references)),
        "mse": mse,
    }


def entity_spans(tags: Sequence[str]) -> set[tuple[str, int, int]]:
    """(type, start, end) of each entity in a BIO/IOB2 tag sequence; an I- without a matching open entity starts one
    (as seqeval's default mode does), and tags without a B-/I- prefix (other than O) are single-type entities."""
    spans = set()
    current: tuple[str, int] | None = None
    for i, tag in enumerate([*tags, "O"]):
        prefix, _, kind = tag.partition("-") if "-" in tag else ("", "", tag)
        if tag == "O" or prefix == "B" or (prefix == "I" and (current is None or current[0] != kind)) or not prefix:
            if current is not None:
                spans.add((current[0], current[1], i))
                current = None
            if tag != "O":
                current = (kind, i)
    return spans


def entity_scores(predictions: Sequence[Sequence[str]], references: Sequence[Sequence[str]]) -> dict[str, float]:
    """Entity-level precision, recall and F1 (an entity counts when its type and both ends match), and the
    accuracy of the word tags."""
    tp = n_pred = n_ref = 0
    per_type: Counter = Counter()
    words = correct = 0
    for pred, ref in zip(predictions, references, strict=True):
        p, r = entity_spans(pred), entity_spans(ref)
        tp += len(p & r)
        n_pred += len(p)
        n_ref += len(r)
        per_type.update(kind for kind, _, _ in r)
        words += len(ref)
        correct += sum(a == b for a, b in zip(pred, ref, strict=True))
    precision = tp / n_pred if n_pred else 0.0
    recall = tp / n_ref if n_ref else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"precision": precision, "recall": recall, "f1": f1, "accuracy": correct / max(words, 1)}


PUNCTUATION = frozenset(string.punctuation)


def normalize_answer(text: str) -> str:
    """SQuAD's normalisation of an answer before comparing: lower case, no punctuation, no articles (a, an, the),
    single spaces."""
    text = "".join(character for character in text.lower() if character not in PUNCTUATION)
    return " ".join(re.sub(r"\b(a|an|the)\b", " ", text).split())


def squad_scores(predictions: Sequence[str], references: Sequence[Sequence[str]]) -> dict[str, float]:
    """Exact match and token F1 of SQuAD (v1.1's evaluation script): each predicted answer against the best of its
    reference answers, after `normalize_answer`; an unanswerable question (no reference) counts as right when the
    prediction is empty. In percent, as SQuAD reports them."""
    if len(predictions) != len(references) or not references:
        raise ValueError("predictions and references must be non-empty and of equal length")

    def f1(prediction: str, reference: str) -> float:
        predicted, expected = normalize_answer(prediction).split(), normalize_answer(reference).split()
        if not predicted or not expected:
            return float(predicted == expected)
        common = sum((Counter(predicted) & Counter(expected)).values())
        if common == 0:
            return 0.0
        precision, recall = common / len(predicted), common / len(expected)
        return 2 * precision * recall / (precision + recall)

    exact = total = 0.0
    for prediction, answers in zip(predictions, references, strict=True):
        answers = list(answers) or [""]
        exact += max(float(normalize_answer(prediction) == normalize_answer(answer)) for answer in answers)
        total += max(f1(prediction, answer) for answer in answers)
    return {"exact_match": 100 * exact / len(references), "f1": 100 * total / len(references)}
