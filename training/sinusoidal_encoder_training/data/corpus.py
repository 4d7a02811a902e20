"""The built-in offline corpus: English prose that ships with Python and with this project's own dependencies.

Documents are
- the documentation topics of the Python language reference (`pydoc_data.topics`, the text `help()` shows), and
- the docstrings (modules, classes, functions) of the Python standard library and of the installed numpy,
  huggingface_hub, datasets, accelerate and transformers packages, read from their source files with `ast`
  (nothing is imported or executed).

All of it is written by people (none generated), needs no network, and is present wherever the training extras are
installed. Licences: Python (PSF License 2.0), numpy (BSD-3-Clause), huggingface_hub, datasets, accelerate and
transformers (Apache-2.0). Exact duplicates and docstrings under 8 words are dropped. Each document is assigned to
train or validation by a hash of its text, so the split is deterministic and a document keeps its side when package
versions change the rest of the corpus. The corpus is built once and cached by `datasets`,
keyed on the versions of its sources.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.metadata
import importlib.util
import os
import platform
import sysconfig
from collections import deque
from collections.abc import Iterator

import datasets

PACKAGES = ("numpy", "huggingface_hub", "datasets", "accelerate", "transformers")
SKIPPED_DIRS = {"site-packages", "test", "tests", "__pycache__", "idlelib", "turtledemo"}
MIN_WORDS = 8
VALIDATION_PER_MILLE = 20  # 2% of documents


def source_versions() -> dict[str, str]:
    """What the corpus is made of, by version: it changes exactly when one of these does."""
    versions = {"python": platform.python_version()}
    for name in PACKAGES:
        versions[name] = importlib.metadata.version(name)
    return versions


def _source_roots() -> list[tuple[str, str]]:
    roots = [("python-stdlib", sysconfig.get_paths()["stdlib"])]
    for name in PACKAGES:
        spec = importlib.util.find_spec(name)
        roots.append((name, os.path.dirname(spec.origin)))
    return roots


DOCUMENTED = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
# the nodes a module, class or function can lie in: statements, `except` clauses and `match` cases (an expression
# holds none)
HOLDERS = (ast.stmt, ast.excepthandler, ast.match_case)


def _statements(tree: ast.Module) -> Iterator[ast.AST]:
    """The nodes of `tree` that can hold statements, in the order of `ast.walk` (breadth first): `ast.walk` with the
    expressions left out, which are most of a tree's nodes."""
    queue = deque([tree])
    while queue:
        node = queue.popleft()
        queue.extend(child for child in ast.iter_child_nodes(node) if isinstance(child, HOLDERS))
        yield node


def _docstrings(path: str) -> Iterator[str]:
    try:
        with open(path, encoding="utf-8") as handle:
            tree = ast.parse(handle.read())
    except (SyntaxError, UnicodeDecodeError, ValueError):
        return
    for node in _statements(tree):
        if isinstance(node, DOCUMENTED):
            text = ast.get_docstring(node)
            if text and len(text.split()) >= MIN_WORDS:
                yield text


def _documents() -> Iterator[tuple[str, str]]:
    """(source, text) for every document, in a fixed order."""
    from pydoc_data.topics import topics

    for name in sorted(topics):
        yield "python-docs", topics[name].strip()
    for source, root in _source_roots():
        for directory, subdirs, files in os.walk(root):
            subdirs[:] = sorted(d for d in subdirs if d not in SKIPPED_DIRS and not d.startswith("."))
            for file in sorted(files):
                if file.endswith(".py"):
                    for text in _docstrings(os.path.join(directory, file)):
                        yield source, text


def is_validation(text: str) -> bool:
    digest = hashlib.sha1(text.encode("utf-8")).digest()
    return int.from_bytes(digest[:4], "big") % 1000 < VALIDATION_PER_MILLE


def _generate(versions: dict[str, str]) -> Iterator[dict[str, str]]:
    # `versions` is unused here but part of the cache key that `Dataset.from_generator` derives from its arguments
    seen: set[bytes] = set()
    for source, text in _documents():
        key = hashlib.sha1(text.encode("utf-8")).digest()
        if key not in seen:
            seen.add(key)
            yield {"text": text, "source": source, "split": "validation" if is_validation(text) else "train"}


def load_builtin_corpus() -> datasets.DatasetDict:
    """The built-in corpus as a `DatasetDict` with "train" and "validation" splits, columns "text" and "source"."""
    features = datasets.Features(
        {"text": datasets.Value("string"), "source": datasets.Value("string"), "split": datasets.Value("string")}
    )
    everything = datasets.Dataset.from_generator(
        _generate, gen_kwargs={"versions": source_versions()}, features=features
    )
    return datasets.DatasetDict(
        {
            split: everything.filter(
                lambda batch, s=split: [x == s for x in batch], input_columns="split", batched=True
            ).remove_columns("split")
            for split in ("train", "validation")
        }
    )


if __name__ == "__main__":
    corpus = load_builtin_corpus()
    for split, dataset in corpus.items():
        size = sum(len(t.encode("utf-8")) for t in dataset["text"])
        print(f"{split}: {len(dataset):,} documents, {size / 1e6:.2f} MB")
    print("sources:", source_versions())
