"""Load an exported folder with sentence-transformers and check, on a small hand-checked set, that a sentence scores
higher against its paraphrase than against an unrelated sentence (cosine similarity of mean-pooled embeddings).

    python training/similarity_check.py outputs/small-builtin

Every exported folder carries the sentence-transformers files (transformer + mean pooling), so
`SentenceTransformer(folder)` loads it with no extra code. The set is written in the domain of the built-in corpus
(Python and library documentation): each paraphrase says the same thing in other words, each unrelated sentence is
about something else, and the three sentences of a triple have similar lengths.
"""

from __future__ import annotations

import argparse

# (anchor, paraphrase, unrelated), checked by hand
TRIPLES = [
    (
        "Return a new array of the given shape, filled with zeros.",
        "Create an array of zeros with the requested shape.",
        "The connection to the server timed out after ten seconds.",
    ),
    (
        "Open the file for reading and return a file object.",
        "This opens a file in read mode and gives back the file object.",
        "Raise an error if the learning rate is negative.",
    ),
    (
        "Load a pretrained model from a folder on the local disk.",
        "Read the weights of a pretrained model saved in a local directory.",
        "Sort the list in place in ascending order.",
    ),
    (
        "Split the dataset into a training part and a test part.",
        "Divide the data into train and test subsets.",
        "The tokenizer lowercases every word before encoding it.",
    ),
    (
        "Remove all items from the dictionary.",
        "Delete every key and value so the dictionary becomes empty.",
        "Compute the matrix product of two arrays.",
    ),
    (
        "Upload the folder to a repository on the Hub.",
        "Push the directory to a Hub repository.",
        "Convert the string to upper case letters.",
    ),
    (
        "The number of processes used for distributed training.",
        "How many processes take part in training across devices.",
        "Return the absolute value of a number.",
    ),
    (
        "Iterate over the lines of a text file.",
        "Loop through each line in the text file.",
        "Save the optimizer state to a checkpoint.",
    ),
]


# The same kind of triple, made harder: the paraphrase shares no content word with the sentence and the unrelated
# sentence shares at least one, so counting shared words ranks them the wrong way round. Written before any model was
# scored on them.
LOW_OVERLAP_TRIPLES = [
    (
        "Delete the temporary directory when the program exits.",
        "Remove the scratch folder at shutdown.",
        "Print the directory where the program was installed.",
    ),
    (
        "Return the number of elements in the list.",
        "Give back how many items the sequence contains.",
        "Return the list of names sorted by number.",
    ),
    (
        "Raise an exception if the input is empty.",
        "Throw an error when no data is given.",
        "The exception message names the input file.",
    ),
    (
        "Download the weights from the internet.",
        "Fetch the parameters over the network.",
        "Plot the weights of the first layer.",
    ),
    (
        "Convert the text to lower case.",
        "Make every letter of the string small.",
        "Split the text into a list of words.",
    ),
    (
        "Wait until all processes reach this point.",
        "Block every worker at a barrier before continuing.",
        "Print the point at which each process started.",
    ),
    (
        "Stop training when the validation loss stops improving.",
        "End the run early once the held-out error no longer decreases.",
        "The validation set holds a tenth of the training data.",
    ),
    (
        "Shuffle the examples before each epoch.",
        "Randomly reorder the samples at the start of every pass.",
        "Count the examples seen in each epoch.",
    ),
]


def similarity_scores(encoder) -> list[tuple[float, float]]:
    """(cosine to the paraphrase, cosine to the unrelated sentence) for every triple."""
    from sentence_transformers import util

    scores = []
    for anchor, paraphrase, unrelated in TRIPLES:
        embeddings = encoder.encode([anchor, paraphrase, unrelated], convert_to_tensor=True)
        similar = float(util.cos_sim(embeddings[0], embeddings[1]))
        other = float(util.cos_sim(embeddings[0], embeddings[2]))
        scores.append((similar, other))
    return scores


def main(argv: list[str] | None = None) -> list[tuple[float, float]]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", help="An exported folder (or Hub id) with the sentence-transformers files.")
    args = parser.parse_args(argv)
    from sentence_transformers import SentenceTransformer

    import sinusoidal_encoder  # noqa: F401  (registers the model with the Auto classes)

    encoder = SentenceTransformer(args.model, device="cpu")
    scores = similarity_scores(encoder)
    for (anchor, _, _), (similar, other) in zip(TRIPLES, scores, strict=True):
        print(f"{similar:+.3f} paraphrase  {other:+.3f} unrelated  {'ok ' if similar > other else 'NO '} {anchor}")
    right = sum(similar > other for similar, other in scores)
    print(f"{right}/{len(scores)} triples rank the paraphrase above the unrelated sentence")
    return scores


if __name__ == "__main__":
    main()
