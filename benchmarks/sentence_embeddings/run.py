"""Load an exported folder with sentence-transformers and check, on a small hand-checked set, that a sentence scores
higher against its paraphrase than against an unrelated sentence (cosine similarity of mean-pooled embeddings).

    python -m benchmarks.sentence_embeddings.run outputs/small-builtin
    python -m benchmarks.sentence_embeddings.run outputs/small-builtin --results results.jsonl --label "the main job"
    python -m benchmarks.sentence_embeddings.run outputs/small-builtin --random_init 0   # the same model, untrained

Every exported folder carries the sentence-transformers files (transformer + mean pooling), so
`SentenceTransformer(folder)` loads it with no extra code. The set (`sinusoidal_encoder_training.evaluation.
similarity`: distillation evaluates on it and never trains on it) is written in the domain of the built-in corpus
(Python and library documentation): each paraphrase says the same thing in other words, each unrelated sentence is
about something else.
TRIPLES' paraphrases share words with their sentence; LOW_OVERLAP_TRIPLES' share none, so only a model that has
learnt meaning ranks those. A model made for sentence embeddings (`python training/distill.py`) is what this check
is for: masked-LM pretraining alone ranks no better than a random initialisation (docs/deployment.md).
"""

from __future__ import annotations

import argparse
import re

# the hand-checked set, which the distillation never trains on: (anchor, paraphrase, unrelated) triples
from sinusoidal_encoder_training.evaluation.similarity import ALL_TRIPLES, LOW_OVERLAP_TRIPLES, TRIPLES  # noqa: F401

# Function words left out when comparing the content of two sentences (the set's rule for LOW_OVERLAP_TRIPLES).
STOP_WORDS = frozenset(
    "a an the of to in on at by for from with into over as if when until before so and or not no is are be it its "
    "this that each every all which how".split()
)


def content_words(sentence: str) -> set[str]:
    """Lower-cased words of a sentence, without function words."""
    return {word for word in re.findall(r"[a-z]+", sentence.lower()) if word not in STOP_WORDS}


def similarity_scores(encoder, triples=ALL_TRIPLES) -> list[tuple[float, float]]:
    """(cosine to the paraphrase, cosine to the unrelated sentence) for every triple."""
    from sentence_transformers import util

    scores = []
    for anchor, paraphrase, unrelated in triples:
        embeddings = encoder.encode([anchor, paraphrase, unrelated], convert_to_tensor=True)
        similar = float(util.cos_sim(embeddings[0], embeddings[1]))
        other = float(util.cos_sim(embeddings[0], embeddings[2]))
        scores.append((similar, other))
    return scores


def summary(scores: list[tuple[float, float]]) -> dict[str, dict[str, float]]:
    """Per set (shared-word, low-overlap, all): how many triples rank the paraphrase first, of how many, and the mean
    margin (cosine to the paraphrase minus cosine to the unrelated sentence)."""
    parts = {"shared_word": scores[: len(TRIPLES)], "low_overlap": scores[len(TRIPLES) :], "all": scores}
    return {
        name: {
            "ranked": sum(similar > other for similar, other in part),
            "of": len(part),
            "margin": sum(similar - other for similar, other in part) / len(part),
        }
        for name, part in parts.items()
    }


def reinitialise(encoder, seed: int) -> None:
    """Give the transformer of a SentenceTransformer the weights a fresh model of its config gets with `seed`."""
    import torch

    transformer = encoder[0].auto_model
    torch.manual_seed(seed)
    fresh = type(transformer)(transformer.config)
    transformer.load_state_dict(fresh.state_dict())


def record(path: str, label: str, model: str, scores: list[tuple[float, float]]) -> dict:
    """Append one line to the results file `path`: the label the tables show, the model, the date, the commit of
    the checkout (when there is one), each set's summary and every triple's two cosines."""
    import datetime
    import json
    import subprocess

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False)
    line = {
        "label": label,
        "model": model,
        "date": datetime.date.today().isoformat(),
        "commit": commit.stdout.strip() or None,
        **summary(scores),
        "scores": [[round(similar, 6), round(other, 6)] for similar, other in scores],
    }
    with open(path, "a") as handle:
        handle.write(json.dumps(line) + "\n")
    return line


def main(argv: list[str] | None = None) -> list[tuple[float, float]]:
    """Print every triple's two cosines and the count per set (appended to --results with --label); return the
    scores of ALL_TRIPLES, in order."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", help="An exported folder (or Hub id) with the sentence-transformers files.")
    parser.add_argument("--results", help="A JSON-lines file to append this measurement to.")
    parser.add_argument("--label", help="What the model is, as a table of results names it (with --results).")
    parser.add_argument(
        "--random_init",
        type=int,
        metavar="SEED",
        help="Score the model's architecture with freshly initialised weights (this seed) instead of its own: the "
        "baseline that training has to beat.",
    )
    args = parser.parse_args(argv)
    if args.results and not args.label:
        parser.error("--results needs --label: the name of this measurement in the tables.")
    from sinusoidal_encoder_training.cli.arguments import check_model_source
    from sinusoidal_encoder_training.cli.command_line import UsageError

    try:
        check_model_source("MODEL", args.model)
    except UsageError as error:
        parser.error(str(error))
    from sentence_transformers import SentenceTransformer

    import sinusoidal_encoder  # noqa: F401  (registers the model with the Auto classes)

    encoder = SentenceTransformer(args.model, device="cpu")
    if args.random_init is not None:
        reinitialise(encoder, args.random_init)
    scores = similarity_scores(encoder)
    for (anchor, _, _), (similar, other) in zip(ALL_TRIPLES, scores, strict=True):
        print(f"{similar:+.3f} paraphrase  {other:+.3f} unrelated  {'ok ' if similar > other else 'NO '} {anchor}")
    for name, part in summary(scores).items():
        print(
            f"{name.replace('_', '-')}: {part['ranked']}/{part['of']} triples rank the paraphrase first "
            f"(mean margin {part['margin']:+.3f})"
        )
    if args.results:
        model = args.model if args.random_init is None else f"{args.model} --random_init {args.random_init}"
        record(args.results, args.label, model, scores)
        print(f"appended to {args.results}")
    return scores


if __name__ == "__main__":
    main()
