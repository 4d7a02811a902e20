"""Corpus loading (built-in, local files in every format, a dataset by name, streaming), packing and masking."""

from __future__ import annotations

import dataclasses
import json
import tempfile
from pathlib import Path

import datasets
import pytest
import torch
from conftest import write_text_corpus

from sinusoidal_encoder_training.cli.command_line import UsageError
from sinusoidal_encoder_training.data import corpus
from sinusoidal_encoder_training.data.batches import (
    BatchedRows,
    IndexedExamples,
    IndexedStream,
    KeyedMaskingCollator,
    take_rows,
)
from sinusoidal_encoder_training.data.pipeline import (
    DataConfig,
    load_raw_datasets,
    pack_blocks,
    tokenize_and_pack,
    tokenize_documents,
    validation_split,
)

SEED = 42  # the seed of a validation split drawn from the training data


def data_config(**settings) -> DataConfig:
    return DataConfig(**settings)


def test_builtin_corpus_is_real_offline_text_of_at_least_5_mb():
    raw = load_raw_datasets(data_config(), SEED)
    assert isinstance(raw, datasets.DatasetDict) and set(raw) == {"train", "validation"}
    sizes = {split: sum(len(t.encode("utf-8")) for t in raw[split]["text"]) for split in raw}
    assert sizes["train"] + sizes["validation"] >= 5_000_000
    assert sizes["validation"] > 50_000
    assert {"python-docs", "python-stdlib", "transformers"} <= set(raw["train"]["source"])
    # the split is a function of each document's text: deterministic, and disjoint
    assert all(corpus.is_validation(t) for t in raw["validation"]["text"][:200])
    assert not any(corpus.is_validation(t) for t in raw["train"]["text"][:200])
    assert not set(raw["validation"]["text"]) & set(raw["train"]["text"][:2000])
    # prose, not code: most documents are mostly letters and spaces
    sample = raw["train"]["text"][:500]
    letters = sum(sum(c.isalpha() or c.isspace() for c in t) / len(t) > 0.8 for t in sample)
    assert letters > 0.8 * len(sample)


NESTED = """\"\"\"A module.\"\"\"
import sys
if sys.version_info >= (3, 8):
    def a():
        \"\"\"In an if.\"\"\"
        class B:
            \"\"\"In a function.\"\"\"
            async def c(self):
                \"\"\"In a class.\"\"\"
                return [lambda: 1 for _ in range(2)]
else:
    def d():
        \"\"\"In an else.\"\"\"
try:
    def e():
        \"\"\"In a try.\"\"\"
except ImportError:
    def f():
        \"\"\"In an except.\"\"\"
finally:
    def g():
        \"\"\"In a finally.\"\"\"
for _ in ():
    with open(__file__) as handle:
        def h():
            \"\"\"In a with in a for.\"\"\"
match sys.platform:
    case "linux":
        def i():
            \"\"\"In a case.\"\"\"
def j(x=print(1)):
    \"\"\"After them.\"\"\"
"""


@pytest.mark.parametrize("source", ["nested", "dataclasses", "argparse", "typing"])
def test_the_corpus_reads_the_docstrings_that_a_whole_walk_finds_in_its_order(source):
    """The corpus walks only what can hold a definition (statements, `except` clauses, `match` cases), in the order
    of `ast.walk` over the whole tree: the same documents in the same order, so the same corpus."""
    import ast
    import importlib.util

    text = NESTED if source == "nested" else Path(importlib.util.find_spec(source).origin).read_text()
    tree = ast.parse(text)
    whole = [node for node in ast.walk(tree) if isinstance(node, corpus.DOCUMENTED)]
    assert [node for node in corpus._statements(tree) if isinstance(node, corpus.DOCUMENTED)] == whole
    assert len(whole) >= 11


def _write(folder, fmt, rows):
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"train.{fmt}"
    if fmt == "txt":
        path.write_text("\n".join(r["body"] for r in rows) + "\n")
    elif fmt == "json":
        path.write_text(json.dumps(rows))
    elif fmt == "jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    else:
        frame = datasets.Dataset.from_list(rows)
        frame.to_csv(str(path)) if fmt == "csv" else frame.to_parquet(str(path))
    return path


ROWS = [
    {"id": i, "body": f"Document {i} describes how positions are encoded with sines and cosines."} for i in range(60)
]


@pytest.mark.parametrize("fmt", ["txt", "json", "jsonl", "csv", "parquet"])
def test_local_files_in_every_format(tmp_path, tokenizer, fmt):
    path = _write(tmp_path, fmt, ROWS)
    column = {} if fmt == "txt" else {"text_column_name": "body"}
    raw = load_raw_datasets(data_config(train_file=str(path), validation_split_percentage=10, **column), SEED)
    assert len(raw["train"]) == 54 and len(raw["validation"]) == 6
    packed = tokenize_and_pack(raw, tokenizer, 16, None if fmt == "txt" else "body")
    blocks = packed["train"]["input_ids"]
    assert blocks and all(len(b) == 16 and b[0] == tokenizer.cls_token_id for b in blocks)
    assert all(tokenizer.pad_token_id not in b for b in blocks)  # packed: no padding anywhere
    assert sum(b.count(tokenizer.sep_token_id) for b in blocks) >= 40  # documents are separated


def test_packing_joins_the_documents_with_the_separator_and_cuts_blocks_after_the_classification_token(tokenizer):
    """Blocks of a tokenised corpus, at two lengths from one tokenisation: [CLS] and then the next `length - 1` ids of
    the stream of every non-blank document's ids followed by [SEP], the stream's tail shorter than a block dropped;
    an empty or blank document adds nothing, not even a separator. Each block names the document (its row) its first
    id after [CLS] comes from, the separator counting with the document it ends."""
    texts = [f"Document {i} describes how positions are encoded." for i in range(12)]
    texts[3], texts[7] = "", "   "
    raw = datasets.DatasetDict({"train": datasets.Dataset.from_dict({"text": texts})})
    tokenized = tokenize_documents(raw, tokenizer)
    assert tokenized["train"]["input_ids"][3] is None and tokenized["train"]["input_ids"][7] is None
    stream, owners = [], []
    for row, text in enumerate(texts):
        if text.strip():
            ids = [*tokenizer(text, add_special_tokens=False)["input_ids"], tokenizer.sep_token_id]
            stream, owners = stream + ids, owners + [row] * len(ids)
    for length in (16, 24):
        span = length - 1
        starts = range(0, len(stream) // span * span, span)
        expected = [[tokenizer.cls_token_id, *stream[i : i + span]] for i in starts]
        packed = pack_blocks(tokenized, tokenizer, length)["train"]
        assert packed["input_ids"] == expected
        assert packed["document"] == [owners[i] for i in starts]
        assert tokenize_and_pack(raw, tokenizer, length)["train"]["input_ids"] == expected
        every_block = list(range(len(packed)))  # read as a batch is: each block with its document
        assert IndexedExamples(packed).__getitems__(every_block)["document"].tolist() == [owners[i] for i in starts]
        assert len(set(packed["document"])) > 1 and 3 not in packed["document"] and 7 not in packed["document"]


def test_a_dataset_by_name_takes_the_load_dataset_path(tmp_path, tokenizer):
    """--dataset_name goes to datasets.load_dataset as a Hub id would; here it names a local dataset folder."""
    folder = tmp_path / "my_dataset"
    _write(folder / "data", "jsonl", ROWS)
    (folder / "data" / "train.jsonl").rename(folder / "data" / "train-00000.jsonl")
    _write(folder / "val", "jsonl", ROWS[:5])
    (folder / "val" / "train.jsonl").rename(folder / "data" / "validation-00000.jsonl")
    config = data_config(dataset_name=str(folder), text_column_name="body")
    raw = load_raw_datasets(config, SEED)
    assert len(raw["train"]) == 60 and len(raw["validation"]) == 5
    assert validation_split(config, raw["validation"]) == "validation"


@pytest.mark.parametrize("streaming", [False, True])
def test_the_validation_split_of_a_dataset_by_name_can_be_named(tmp_path, streaming):
    """A dataset of train and test splits (IMDb's kind): by default a share of train is held out and test is not
    read; --validation_split_name test validates on test, whole; a split the dataset lacks is one line naming those
    it has. `validation_split` says which split was read, after tokenisation too: none for a share held out."""
    folder = tmp_path / "my_dataset"
    _write(folder / "data", "jsonl", ROWS)
    (folder / "data" / "train.jsonl").rename(folder / "data" / "train-00000.jsonl")
    _write(folder / "other", "jsonl", ROWS[:7])
    (folder / "other" / "train.jsonl").rename(folder / "data" / "test-00000.jsonl")
    config = data_config(
        dataset_name=str(folder), text_column_name="body", streaming=streaming, streaming_validation_examples=3
    )
    held_out = load_raw_datasets(config, SEED)
    assert [len(list(held_out[split])) for split in ("train", "validation")] == [57, 3]
    tokenized = held_out["validation"].map(lambda row: {"length": len(row["body"])})
    assert validation_split(config, held_out["validation"]) is None and validation_split(config, tokenized) is None
    named_config = dataclasses.replace(config, validation_split_name="test")
    named = load_raw_datasets(named_config, SEED)
    assert [row["body"] for row in named["validation"]] == [row["body"] for row in ROWS[:7]]
    assert len(list(named["train"])) == 60
    assert validation_split(named_config, named["validation"]) == "test"
    missing = r"^--dataset_name '.*my_dataset' has no split 'valid' \(it has \['train', 'test'\]\): name one of them "
    with pytest.raises(UsageError, match=missing):
        load_raw_datasets(dataclasses.replace(config, validation_split_name="valid"), SEED)


def test_a_dataset_by_name_too_small_to_split_is_one_line(tmp_path):
    """A dataset with no validation split and too few rows to hold one out: the flag named, not datasets' error."""
    folder = tmp_path / "my_dataset"
    _write(folder / "data", "jsonl", ROWS[:10])
    config = data_config(dataset_name=str(folder), text_column_name="body", validation_split_percentage=95)
    with pytest.raises(UsageError, match=r"^--dataset_name '.*my_dataset' holds 10 row\(s\): too few to hold out "):
        load_raw_datasets(config, SEED)
    assert len(load_raw_datasets(dataclasses.replace(config, validation_split_percentage=90), SEED)["train"]) == 1


def test_streaming_packs_on_the_fly_into_the_same_blocks(tmp_path, tokenizer):
    train, validation = write_text_corpus(tmp_path)
    files = {"train_file": str(train), "validation_file": str(validation)}
    eager = tokenize_and_pack(load_raw_datasets(data_config(**files), SEED), tokenizer, 32)
    streamed = tokenize_and_pack(load_raw_datasets(data_config(**files, streaming=True), SEED), tokenizer, 32)
    assert isinstance(streamed["train"], datasets.IterableDataset)
    assert [row["input_ids"] for row in streamed["train"]] == eager["train"]["input_ids"]
    assert [row["document"] for row in streamed["train"]] == eager["train"]["document"]
    stream = list(IndexedStream(streamed["validation"]))
    assert [row["example_id"] for row in stream] == list(range(len(eager["validation"])))
    assert [row["document"] for row in stream] == eager["validation"]["document"]


@pytest.mark.parametrize("shards", [1, 3])
def test_a_stream_read_by_workers_tags_every_block_with_an_index_of_its_own(tmp_path, tokenizer, shards):
    """Read by two DataLoader workers (the default beside a GPU), a stream of several shards is shared out between
    them: every block still has an index (the key of its masks) no other block has. A stream of one shard is read
    by one worker: the indices of no workers."""
    train, _ = write_text_corpus(tmp_path / "corpus")
    lines = train.read_text().splitlines()
    folder = tmp_path / "sharded"  # a dataset by name of `shards` files, as on the Hub
    folder.mkdir()
    for shard in range(shards):
        (folder / f"part{shard}.txt").write_text("\n".join(lines[shard::shards]) + "\n")
    settings = data_config(dataset_name=str(folder), streaming=True, streaming_validation_examples=3)
    raw = load_raw_datasets(settings, SEED)
    blocks = tokenize_and_pack(raw, tokenizer, 16)["train"]
    assert IndexedStream(blocks).shards == shards

    def read(workers):
        loader = torch.utils.data.DataLoader(
            IndexedStream(blocks), batch_size=4, num_workers=workers, collate_fn=lambda rows: rows
        )
        return [(row["example_id"], tuple(row["input_ids"]), row["document"]) for batch in loader for row in batch]

    alone, shared = read(0), read(2)
    indices = [index for index, _, _ in shared]
    assert len(set(indices)) == len(indices) > 0
    if shards == 1:
        assert shared == alone
    else:  # both workers read (each packs its own shards' documents: blocks of their own)
        assert {index % 2 for index in indices} == {0, 1}
    readers, owners = min(2, shards), {}  # the documents of two readers never share a number (standard errors')
    for index, _, document in shared:
        owners.setdefault(document, set()).add(index % readers)
    assert all(len(reader) == 1 for reader in owners.values()) and len(owners) > shards


@pytest.mark.parametrize(
    ("settings", "step", "message"),
    [
        (  # the 40 documents all held out
            {"streaming_validation_examples": 1000},
            1,
            r"^--train_file '.*train\.txt' holds no document past the first 1000, which --streaming holds out for "
            r"validation \(--streaming_validation_examples\): lower it, or give a --validation_file\.$",
        ),
        (
            {"streaming_validation_examples": 5},
            10**6,
            r"^The streamed train split holds \d+ complete block\(s\) of --max_seq_length=16 tokens, fewer than the "
            r"1000000 of one optimizer step \(the global batch\): give it more text, or lower the length or the "
            r"batch size\.$",
        ),
        (
            {"validation_file": "{short}"},
            1,
            r"^The streamed validation split holds no complete block of --max_seq_length=16 tokens: give it more "
            r"text, or lower the length\.$",
        ),
    ],
)
def test_a_stream_too_short_to_run_on_is_one_line_before_training(tmp_path, tokenizer, settings, step, message):
    """What a map-style split's block count tells before training (`pack_blocks`, `plan_steps`), a stream's first
    blocks tell: an empty training stream, one shorter than an optimizer step, a validation stream of no block (a
    stream would otherwise end before its first step, or stop the loader with accelerate's traceback)."""
    from sinusoidal_encoder_training.data.pipeline import check_stream_blocks

    train, _ = write_text_corpus(tmp_path)
    short = tmp_path / "short.txt"
    short.write_text("Too short.\n")
    settings = {key: value.format(short=short) if isinstance(value, str) else value for key, value in settings.items()}
    with pytest.raises(UsageError, match=message):
        raw = load_raw_datasets(data_config(train_file=str(train), streaming=True, **settings), SEED)
        check_stream_blocks(tokenize_and_pack(raw, tokenizer, 16), 16, step)


def test_streaming_without_validation_holds_out_the_first_documents(tmp_path):
    train, _ = write_text_corpus(tmp_path)
    config = data_config(train_file=str(train), streaming=True, streaming_validation_examples=5)
    raw = load_raw_datasets(config, SEED)
    assert validation_split(config, raw["validation"]) is None  # held out
    texts = [row["text"] for row in raw["validation"]]
    assert len(texts) == 5
    assert next(iter(raw["train"]))["text"] == train.read_text().splitlines()[5]


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"train_file": "/nonexistent.txt"}, "--train_file"),
        ({"train_file": "{here}/x.docx"}, "extension"),
        ({"validation_file": "{here}/validation.txt"}, "--validation_file needs --train_file"),
        ({"dataset_name": "x", "train_file": "{here}/train.txt"}, "either --dataset_name"),
        ({"train_file": "{here}/train.txt", "validation_split_percentage": 0}, "--validation_split_percentage"),
        ({"streaming": True}, "--streaming needs --dataset_name or --train_file"),
        (
            {"train_file": "{here}/train.txt", "validation_split_name": "test"},
            "--validation_split_name names a split of --dataset_name; local files give theirs with --validation_file",
        ),
    ],
)
def test_bad_data_settings_name_the_flag_when_the_config_is_built(tmp_path, settings, message):
    write_text_corpus(tmp_path)
    (tmp_path / "x.docx").write_text("x")
    settings = {k: v.format(here=tmp_path) if isinstance(v, str) else v for k, v in settings.items()}
    with pytest.raises(ValueError, match=message):
        data_config(**settings)


def test_a_column_that_is_not_in_the_data_names_the_flag(tmp_path, tokenizer):
    train, _ = write_text_corpus(tmp_path)
    config = data_config(train_file=str(train), text_column_name="nope")
    with pytest.raises(ValueError, match="--text_column_name"):
        tokenize_and_pack(load_raw_datasets(config, SEED), tokenizer, 32, config.text_column_name)


def test_a_column_that_is_not_text_is_refused(tmp_path, tokenizer):
    path = _write(tmp_path, "jsonl", ROWS)
    config = data_config(train_file=str(path), text_column_name="id")
    with pytest.raises(ValueError, match="not text"):
        tokenize_and_pack(load_raw_datasets(config, SEED), tokenizer, 16, config.text_column_name)


def test_an_empty_corpus_after_filtering_is_refused(tmp_path, tokenizer):
    (tmp_path / "blank.txt").write_text("\n   \n\t\n" * 50)
    (tmp_path / "short.txt").write_text("A few words only.\n" * 3)
    blank = str(tmp_path / "blank.txt")
    with pytest.raises(ValueError, match="holds no text: every line is empty"):  # refused when the config is built
        data_config(train_file=blank, validation_file=blank)
    short = str(tmp_path / "short.txt")
    config = data_config(train_file=short, validation_file=short)
    with pytest.raises(ValueError, match="no complete block"):
        tokenize_and_pack(load_raw_datasets(config, SEED), tokenizer, 64)


@pytest.mark.parametrize("fmt", ["json", "parquet", "csv"])
def test_a_malformed_file_names_the_flag(tmp_path, fmt):
    path = tmp_path / f"train.{fmt}"
    path.write_bytes(b"\x00\xff\xfe not a " + fmt.encode() + b" file {[\n" * 3)
    with pytest.raises(ValueError, match="--train_file"):
        load_raw_datasets(data_config(train_file=str(path)), SEED)


def test_a_folder_is_not_a_file(tmp_path):
    (tmp_path / "folder.txt").mkdir()
    with pytest.raises(ValueError, match="not a file"):
        data_config(train_file=str(tmp_path / "folder.txt"))


def test_masks_are_keyed_by_seed_epoch_and_example(tokenizer):
    blocks = [[tokenizer.cls_token_id, *range(10, 73)] for _ in range(6)]
    dataset = IndexedExamples(datasets.Dataset.from_dict({"input_ids": blocks}))
    masking = KeyedMaskingCollator(tokenizer, 0.15, seed=1)
    whole = masking([dataset[i] for i in range(6)])
    halves = [masking([dataset[i] for i in part]) for part in ([0, 1, 2], [3, 4, 5])]
    # the same masks whatever the batching (so whatever the number of processes or where a run resumed)
    assert torch.equal(whole["labels"], torch.cat([h["labels"] for h in halves]))
    assert torch.equal(whole["input_ids"], torch.cat([h["input_ids"] for h in halves]))
    masked = whole["labels"] != -100
    assert 0.05 < masked.float().mean() < 0.3
    assert not masked[:, 0].any()  # special tokens are never masked
    assert torch.equal(whole["labels"][masked], torch.tensor(blocks)[masked])
    assert (whole["input_ids"][masked] == tokenizer.mask_token_id).float().mean() > 0.5  # mostly [MASK]
    # rows with identical tokens get different masks; another epoch (or seed) masks differently
    assert not torch.equal(whole["labels"][0], whole["labels"][1])
    masking.epoch = 1
    assert not torch.equal(masking([dataset[0]])["labels"], whole["labels"][:1])
    eval_masking = KeyedMaskingCollator(tokenizer, 0.15, seed=1, epoch="eval")
    assert torch.equal(eval_masking([dataset[2]])["labels"], eval_masking([dataset[2]])["labels"])
    with pytest.raises(ValueError, match="mlm_probability"):
        KeyedMaskingCollator(tokenizer, 1.5, seed=1)


def dataset_kinds(tmp_path) -> dict[str, datasets.Dataset]:
    """Blocks of 8 ids (rows 0..39, row i holding i*100 + position, of document i // 3) and a text column, as
    datasets holds them: in memory, in several chunks, memory-mapped from disk, a contiguous selection (a slice of
    the table), and through an indices mapping (shuffled, filtered, selected out of order)."""
    rows = {"input_ids": [[i * 100 + j for j in range(8)] for i in range(40)], "text": [f"row {i}" for i in range(40)]}
    rows["document"] = [i // 3 for i in range(40)]  # packed blocks name the document they start in
    plain = datasets.Dataset.from_dict(rows)
    plain.save_to_disk(str(tmp_path / "saved"))
    halves = [
        datasets.Dataset.from_dict({key: value[a:b] for key, value in rows.items()}) for a, b in ((0, 25), (25, 40))
    ]
    return {
        "in memory": plain,
        "chunked": datasets.concatenate_datasets(halves),
        "memory-mapped": datasets.load_from_disk(str(tmp_path / "saved")),
        "contiguous selection": plain.select(range(5, 35)),
        "shuffled": plain.shuffle(seed=0),
        "filtered": plain.filter(lambda row: row["input_ids"][0] % 300 != 0),
        "selected out of order": plain.select([9, 3, 27, 1, 30, 12, 0, 5, 21, 17]),
    }


@pytest.mark.parametrize(
    "kind",
    [
        "in memory",
        "chunked",
        "memory-mapped",
        "contiguous selection",
        "shuffled",
        "filtered",
        "selected out of order",
    ],
)
def test_a_batchs_rows_are_read_in_one_take_as_datasets_reads_them(tmp_path, kind):
    """`take_rows`: the rows of a batch in one Arrow take, one chunk per column, equal to datasets' own gather,
    wherever the rows are stored in the table's order; through an indices mapping it leaves them to datasets. Either
    way `BatchedRows` and `IndexedExamples` read the rows datasets has at those indices."""
    dataset = dataset_kinds(tmp_path)[kind]
    indices = [7, 2, 9, 2, 0, len(dataset) - 1]
    expected = dataset.with_format("arrow")[indices]
    taken = take_rows(dataset, indices)
    mapped = kind in ("shuffled", "filtered", "selected out of order")
    assert (taken is None) == mapped
    if not mapped:
        assert taken.equals(expected) and all(column.num_chunks == 1 for column in taken.columns)
    assert BatchedRows(dataset).__getitems__(indices).equals(expected)
    batch = IndexedExamples(dataset.select_columns(["input_ids", "document"])).__getitems__(indices)
    assert batch["input_ids"].dtype == torch.long and batch["input_ids"].tolist() == expected["input_ids"].to_pylist()
    assert batch["example_id"].tolist() == indices and batch["document"].tolist() == expected["document"].to_pylist()


def test_blocks_of_several_lengths_are_read_row_by_row():
    """`IndexedExamples`: where a batch's blocks differ in length (a corpus's last block), its rows come one by one,
    as datasets reads them."""
    dataset = IndexedExamples(datasets.Dataset.from_dict({"input_ids": [[1, 2, 3], [4, 5], [6, 7, 8]]}))
    assert dataset.__getitems__([0, 1]) == [
        {"input_ids": [1, 2, 3], "example_id": 0},
        {"input_ids": [4, 5], "example_id": 1},
    ]
    assert dataset.__getitems__([2, 0])["input_ids"].tolist() == [[6, 7, 8], [1, 2, 3]]


def test_keyed_masking_draws_berts_shares_for_a_whole_batch_at_once(tokenizer):
    """The vectorised masks have `DataCollatorForLanguageModeling`'s statistics: 15% of the tokens that are not
    special, of which 80% [MASK], 10% a random token, 10% unchanged; a batch read at once (`__getitems__`) is masked
    as its rows read one by one."""
    generator = torch.Generator().manual_seed(0)
    blocks = torch.randint(5, len(tokenizer), (512, 128), generator=generator)
    blocks[:, 0] = tokenizer.cls_token_id
    dataset = IndexedExamples(datasets.Dataset.from_dict({"input_ids": blocks.tolist()}))
    masking = KeyedMaskingCollator(tokenizer, 0.15, seed=3)
    indices = list(range(512))
    batch = masking(dataset.__getitems__(indices))
    assert torch.equal(batch["input_ids"], masking([dataset[i] for i in indices])["input_ids"])
    masked = batch["labels"] != -100
    assert not masked[:, 0].any() and torch.equal(batch["labels"][masked], blocks[masked])
    assert abs(masked[:, 1:].float().mean().item() - 0.15) < 0.005
    replaced = (batch["input_ids"][masked] == tokenizer.mask_token_id).float().mean().item()
    kept = (batch["input_ids"][masked] == blocks[masked]).float().mean().item()
    assert abs(replaced - 0.8) < 0.01 and abs(kept - 0.1) < 0.01
    randomised = batch["input_ids"][
        masked & (batch["input_ids"] != tokenizer.mask_token_id) & (batch["input_ids"] != blocks)
    ]
    assert randomised.min() >= 0 and randomised.max() < len(tokenizer) and randomised.unique().numel() > 500


def test_exact_masking_gives_every_row_berts_count_keyed_as_sampled_masking(tokenizer):
    """`exact_count`: each row of 128 tokens has round(0.15 x 128) = 19 masked tokens, never a special one, whatever
    the batching, with the 80/10/10 shares; a row with fewer tokens to mask has all of them masked; the positions are
    spread over the row (the smallest draws), not the row's first tokens."""
    generator = torch.Generator().manual_seed(0)
    blocks = torch.randint(5, len(tokenizer), (256, 128), generator=generator)
    blocks[:, 0] = tokenizer.cls_token_id
    blocks[::7, 40] = tokenizer.sep_token_id  # a document boundary inside some blocks
    blocks[3, 10:] = tokenizer.pad_token_id  # a row with 9 tokens to mask
    dataset = IndexedExamples(datasets.Dataset.from_dict({"input_ids": blocks.tolist()}))
    masking = KeyedMaskingCollator(tokenizer, 0.15, seed=3, exact_count=True)
    batch = masking(dataset.__getitems__(list(range(256))))
    masked = batch["labels"] != -100
    counts = masked.sum(dim=1)
    assert counts[3] == 9 and masked[3, 1:10].all()
    assert (counts[torch.arange(256) != 3] == 19).all()
    special = torch.isin(blocks, torch.tensor(tokenizer.all_special_ids))
    assert not (masked & special).any() and torch.equal(batch["labels"][masked], blocks[masked])
    assert masked[:, 64:].float().mean() > 0.1  # the second half of the rows is masked too
    halves = [masking(dataset.__getitems__(list(part))) for part in (range(0, 100), range(100, 256))]
    assert torch.equal(batch["labels"], torch.cat([half["labels"] for half in halves]))
    replaced = (batch["input_ids"][masked] == tokenizer.mask_token_id).float().mean().item()
    kept = (batch["input_ids"][masked] == blocks[masked]).float().mean().item()
    assert abs(replaced - 0.8) < 0.03 and abs(kept - 0.1) < 0.03
    sampled = KeyedMaskingCollator(tokenizer, 0.15, seed=3)(dataset.__getitems__(list(range(256))))
    assert (sampled["labels"] != -100).sum(dim=1).unique().numel() > 5  # what exact counts are there for


def test_the_loader_settings_follow_the_device_unless_given(monkeypatch):
    import argparse

    from sinusoidal_encoder_training.runs.accelerator import GPU_LOADER_WORKERS, loader_settings

    def settings(workers, persistent=True):
        return argparse.Namespace(dataloader_num_workers=workers, no_persistent_workers=not persistent)

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert loader_settings(settings(None)) == {"num_workers": 0, "pin_memory": False, "persistent_workers": False}
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    expected = {"num_workers": GPU_LOADER_WORKERS, "pin_memory": True, "persistent_workers": True}
    assert loader_settings(settings(None)) == expected
    assert loader_settings(settings(3)) == {"num_workers": 3, "pin_memory": True, "persistent_workers": True}
    assert loader_settings(settings(3, persistent=False))["persistent_workers"] is False
    # a stream is read by no more workers than it has shards (datasets would stop the others, with a warning)
    one_shard, three_shards = argparse.Namespace(shards=1), argparse.Namespace(shards=3)
    assert loader_settings(settings(None), one_shard) == {**expected, "num_workers": 1}
    assert loader_settings(settings(None), three_shards) == expected
    assert loader_settings(settings(3), one_shard)["num_workers"] == 3  # the flag as given


@pytest.mark.parametrize("too_long", [True, False])
def test_workers_that_could_not_hand_their_batches_over_are_refused_in_one_line(tmp_path, monkeypatch, too_long):
    """DataLoader workers pass a batch's tensors over a Unix socket in the temporary folder: under a folder whose
    path leaves too little room for the socket's (Python's own listener fails there; in a worker, its queue thread
    dropped the batch and the run waited forever), a run with workers is refused before it starts, in one line that
    names TMPDIR and the way out; without workers, or where the socket's path fits (/tmp), nothing is said."""
    from multiprocessing import process
    from multiprocessing.connection import Listener

    from sinusoidal_encoder_training.configs import TrainingConfig
    from sinusoidal_encoder_training.runs.accelerator import check_worker_handover

    if too_long:
        folder = tmp_path / ("t" * 80)
        folder.mkdir()
    else:
        folder = Path("/tmp")
        if not folder.is_dir():
            pytest.skip("no /tmp here")
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    monkeypatch.setitem(process.current_process()._config, "tempdir", None)  # multiprocessing's own, made anew
    with_workers = TrainingConfig(output_dir=str(tmp_path / "out"), dataloader_num_workers=2)
    check_worker_handover(TrainingConfig(output_dir=str(tmp_path / "out"), dataloader_num_workers=0))
    try:
        Listener(family="AF_UNIX").close()  # its socket's path: the folder, pymp-XXXXXXXX, listener-XXXXXXXX
    except OSError as error:
        assert too_long and "too long" in str(error), error
        with pytest.raises(UsageError) as refused:
            check_worker_handover(with_workers)
        line = str(refused.value)
        expected = len(str(folder)) + len("/pymp-12345678/listener-12345678")
        assert f"under TMPDIR={folder} its path would be {expected} characters, over the 107" in line
        assert line.endswith("set TMPDIR to a shorter folder (such as /tmp), or pass --dataloader_num_workers 0.")
    else:
        assert not too_long
        check_worker_handover(with_workers)  # (multiprocessing removes its folder at exit)


def test_indices_tagged_with_their_epoch_carry_it_to_the_masks(tokenizer):
    """`EpochTaggedSampler` draws `(epoch, index)` from its sampler with the epoch set when drawn; `IndexedExamples`
    hands the epoch on with each row, in a batch read at once or row by row; `KeyedMaskingCollator` masks each row
    with its own epoch's key, whatever epoch the collator itself was left at (as in a DataLoader worker that
    persists from one epoch to the next)."""
    from sinusoidal_encoder_training.data.batches import EpochTaggedSampler

    blocks = torch.randint(5, len(tokenizer), (12, 32), generator=torch.Generator().manual_seed(0))
    dataset = IndexedExamples(datasets.Dataset.from_dict({"input_ids": blocks.tolist()}))
    generator = torch.Generator()
    order = EpochTaggedSampler(torch.utils.data.RandomSampler(dataset, generator=generator))
    assert order.generator is generator and len(order) == 12
    order.epoch = 3
    drawn = list(order)
    assert {epoch for epoch, _ in drawn} == {3} and sorted(index for _, index in drawn) == list(range(12))
    stale = KeyedMaskingCollator(tokenizer, 0.15, seed=1, epoch=0)  # a worker's copy, started at epoch 0
    current = KeyedMaskingCollator(tokenizer, 0.15, seed=1, epoch=3)
    batch = stale(dataset.__getitems__(drawn))
    assert torch.equal(batch["labels"], current(dataset.__getitems__([index for _, index in drawn]))["labels"])
    assert torch.equal(stale([dataset[index] for index in drawn])["labels"], batch["labels"])  # row by row
    assert not torch.equal(batch["labels"], stale(dataset.__getitems__([index for _, index in drawn]))["labels"])
    mixed = [(3, 0), (4, 1)]  # rows of two epochs in one batch: each its own
    rows = stale(dataset.__getitems__(mixed))["labels"]
    later = KeyedMaskingCollator(tokenizer, 0.15, seed=1, epoch=4)
    assert torch.equal(rows[0], current(dataset.__getitems__([0]))["labels"][0])
    assert torch.equal(rows[1], later(dataset.__getitems__([1]))["labels"][0])


@pytest.mark.parametrize("multiple", [None, 8])
@pytest.mark.parametrize("problem", ["single_label", "regression", "multi_label", "pairs", "tokens"])
def test_padding_a_whole_batch_gives_transformers_collators_batches(tokenizer, problem, multiple):
    """`PaddingCollator` over a batch read at once (`BatchedRows`) equals `DataCollatorWithPadding` (and
    `DataCollatorForTokenClassification` for tags per token) over the same rows read one by one: every tensor, its
    dtype and shape, for every kind of label fine-tuning makes."""
    from transformers import DataCollatorForTokenClassification, DataCollatorWithPadding

    from sinusoidal_encoder_training.data.batches import PaddingCollator
    from sinusoidal_encoder_training.tasks.classification.recipe import encode

    words = "the function returns a new list of the items in the given order".split()
    texts = [" ".join(words[: 3 + (5 * i) % 11]) for i in range(12)]
    columns = {"text": texts, "pair": texts[::-1]}
    kind, names, pair = problem, ["a", "b", "c"], None
    if problem in ("single_label", "pairs"):
        columns["label"] = [names[i % 3] for i in range(12)]
        kind, pair = "single_label_classification", ("pair" if problem == "pairs" else None)
    elif problem == "regression":
        columns["label"], names = [i / 7 for i in range(12)], None
    elif problem == "multi_label":
        columns["label"], kind = [names[: 1 + i % 3] for i in range(12)], "multi_label_classification"
    else:
        columns = {"tokens": [text.split() for text in texts], "tags": [["a", "b"] * 8 for _ in texts]}
        columns["tags"] = [
            tags[: len(words_)] for tags, words_ in zip(columns["tags"], columns["tokens"], strict=True)
        ]
        kind = "token_classification"
    kind = {"regression": "regression"}.get(problem, kind)
    raw = datasets.DatasetDict({"train": datasets.Dataset.from_dict(columns)})
    text_col, label_col = ("tokens", "tags") if problem == "tokens" else ("text", "label")
    encoded = encode(raw, tokenizer, 24, kind, names, (text_col, pair, label_col))["train"]
    reference = (DataCollatorForTokenClassification if problem == "tokens" else DataCollatorWithPadding)(
        tokenizer, pad_to_multiple_of=multiple
    )
    indices = [5, 0, 11, 3, 7]
    ours = PaddingCollator(tokenizer, pad_to_multiple_of=multiple)(BatchedRows(encoded).__getitems__(indices))
    theirs = reference([encoded[i] for i in indices])
    assert sorted(ours) == sorted(theirs)
    for key, tensor in theirs.items():
        assert ours[key].dtype == tensor.dtype and torch.equal(ours[key], tensor), key
    assert torch.equal(
        PaddingCollator(tokenizer, multiple)([encoded[i] for i in indices])["input_ids"], theirs["input_ids"]
    )


@pytest.mark.parametrize("multiple", [None, 8])
def test_padding_the_choices_and_windows_of_a_batch_gives_transformers_collators_batches(tokenizer, multiple):
    """Multiple choice (a row of choices, each a token list: `DataCollatorForMultipleChoice`) and question-answering
    windows (start and end positions: `DataCollatorWithPadding`), padded a batch at once, equal transformers'."""
    from transformers import DataCollatorForMultipleChoice, DataCollatorWithPadding

    from sinusoidal_encoder_training.data.batches import PaddingCollator

    generator = torch.Generator().manual_seed(0)

    def ids(n):
        return torch.randint(5, 100, (n,), generator=generator).tolist()

    lengths = [[3 + (r * 3 + c * 5) % 13 for c in range(4)] for r in range(6)]
    choices = datasets.Dataset.from_dict(
        {
            "input_ids": [[ids(n) for n in row] for row in lengths],
            "attention_mask": [[[1] * n for n in row] for row in lengths],
            "labels": [r % 4 for r in range(6)],
        }
    )
    windows = datasets.Dataset.from_dict(
        {
            "input_ids": [ids(4 + r * 3) for r in range(6)],
            "attention_mask": [[1] * (4 + r * 3) for r in range(6)],
            "start_positions": list(range(6)),
            "end_positions": list(range(1, 7)),
        }
    )
    ours = PaddingCollator(tokenizer, pad_to_multiple_of=multiple)
    indices = [4, 1, 5, 0]
    for data, reference in (
        (choices, DataCollatorForMultipleChoice(tokenizer, pad_to_multiple_of=multiple)),
        (windows, DataCollatorWithPadding(tokenizer, pad_to_multiple_of=multiple)),
    ):
        got, expected = ours(BatchedRows(data).__getitems__(indices)), reference([data[i] for i in indices])
        assert sorted(got) == sorted(expected)
        for key, tensor in expected.items():
            assert got[key].dtype == tensor.dtype and torch.equal(got[key], tensor), key


def test_row_lengths_and_the_padding_of_batches_grouped_by_length():
    """The tokens of each row read from Arrow (a row of choices: its longest, after a `select`: the rows selected);
    batches drawn by `length_grouped_sampler` hold rows of similar length: their padding is a fraction of random
    batches', every row drawn once, the longest first, and the order is the generator's."""
    import numpy as np

    from sinusoidal_encoder_training.data.batches import (
        BatchedRows,
        length_grouped_sampler,
        padding_share,
        row_lengths,
    )

    flat = datasets.Dataset.from_dict({"input_ids": [[1] * 3, [1] * 5, [1] * 2]})
    assert row_lengths(BatchedRows(flat)).tolist() == [3, 5, 2]
    assert row_lengths(BatchedRows(flat.select([2, 0]))).tolist() == [2, 3]
    choices = datasets.Dataset.from_dict({"input_ids": [[[1] * 3, [1] * 7], [[1] * 4, [1] * 2]]})
    assert row_lengths(BatchedRows(choices)).tolist() == [7, 4]
    assert padding_share(np.array([2, 4, 3, 3]), [0, 1, 2, 3], 2, None) == pytest.approx(1 - 12 / 14)
    assert padding_share(np.array([2, 4, 3, 3]), [0, 1, 2, 3], 2, 8) == pytest.approx(1 - 12 / 32)

    lengths = np.random.default_rng(0).integers(4, 200, size=2000)
    order = list(length_grouped_sampler(lengths, 16, torch.Generator().manual_seed(1)))
    assert sorted(order) == list(range(2000)) and lengths[order[0]] == lengths.max()
    shuffled = torch.randperm(2000, generator=torch.Generator().manual_seed(1)).tolist()
    assert padding_share(lengths, order, 16, None) < padding_share(lengths, shuffled, 16, None) / 5
    again = list(length_grouped_sampler(lengths, 16, torch.Generator().manual_seed(1)))
    other = list(length_grouped_sampler(lengths, 16, torch.Generator().manual_seed(2)))
    assert again == order and other != order
