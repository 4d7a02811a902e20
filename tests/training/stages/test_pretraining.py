"""training/pretrain.py end to end: the exported folder, exact resume after SIGKILL, data parallelism, tracking,
publishing, and flag errors."""

from __future__ import annotations

import itertools
import json
import math
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml
from conftest import (
    PRETRAIN,
    REPO,
    TINY,
    TWO_PROCESSES,
    VOCAB_SIZE,
    FakeHfApi,
    assert_same_training,
    env,
    metrics,
    pretrain_cmd,
    random_ids,
    run,
    run_command,
    run_command_afresh,
    tiny_config,
    tiny_pretraining,
    write_text_corpus,
)
from huggingface_hub.errors import LocalTokenNotFoundError
from safetensors.torch import load_file

from sinusoidal_encoder_training.cli.command_line import UsageError
from sinusoidal_encoder_training.publishing.hub import files_to_upload

ACCELERATE = str(Path(sys.executable).with_name("accelerate"))


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return write_text_corpus(tmp_path_factory.mktemp("corpus"), n_train=25, n_validation=6)


@pytest.fixture(scope="module")
def small_corpus(tmp_path_factory):
    """About 100 blocks of 32 tokens: a few optimizer steps per epoch."""
    train, validation = write_text_corpus(tmp_path_factory.mktemp("small"), n_train=25, n_validation=6)
    train.write_text("\n".join(line[:1500] for line in train.read_text().splitlines()[:8]) + "\n")
    return train, validation


def weights(output_dir):
    return load_file(str(Path(output_dir) / "model.safetensors"))


def masked_batch(batch: int = 4, length: int = 16) -> dict[str, torch.Tensor]:
    ids = random_ids(batch, length, seed=5)
    masked = torch.rand(batch, length, generator=torch.Generator().manual_seed(6)) < 0.3
    masked[:, 0] = False
    return {
        "input_ids": torch.where(masked, torch.full_like(ids, 4), ids),
        "labels": torch.where(masked, ids, -100),
        "example_id": torch.arange(batch),
    }


class Counting:
    """Counts the forwards of a model and the calls of `torch.nn.functional.cross_entropy`."""

    def __init__(self, model, monkeypatch):
        self.forwards, self.cross_entropies = 0, 0
        model.register_forward_hook(lambda *_: setattr(self, "forwards", self.forwards + 1))
        cross_entropy = torch.nn.functional.cross_entropy

        def counted(*args, **kwargs):
            self.cross_entropies += 1
            return cross_entropy(*args, **kwargs)

        monkeypatch.setattr(torch.nn.functional, "cross_entropy", counted)


def test_a_batch_runs_one_forward_and_its_loss_is_the_models(monkeypatch):
    """The masked-LM task calls the model once per batch and takes the loss the model computed (the sum over the
    masked tokens divided by `num_items_in_batch`): one cross-entropy per forward in training; in evaluation (where
    the order gap scores the permuted blocks in a second forward) the model's, and one of each token of the same
    logits for the blocks' standard errors (`evaluation.masked_lm.block_losses`)."""
    from accelerate import Accelerator

    import sinusoidal_encoder as se
    from sinusoidal_encoder_training.stages.pretraining import MaskedLMTask

    model = se.SinusoidalEncoderForMaskedLM(tiny_config(sparse_prediction=True))
    task = MaskedLMTask(torch.Generator(), None, 0, torch.zeros(VOCAB_SIZE, dtype=torch.float64))
    batch = masked_batch()
    counting = Counting(model, monkeypatch)
    model.train()
    loss_sum, count = task.loss_sum(model, batch)
    assert (counting.forwards, counting.cross_entropies) == (1, 1)
    labels = batch["labels"]
    with torch.no_grad():
        logits = model(input_ids=batch["input_ids"], labels=labels).logits  # (N, V): the masked positions
    expected = torch.nn.functional.cross_entropy(logits, labels[labels != -100], reduction="sum")
    torch.testing.assert_close(loss_sum, expected, rtol=1e-5, atol=1e-5)
    assert count == (labels != -100).sum()

    counting.forwards, counting.cross_entropies = 0, 0
    evaluation = task.evaluate(model, [batch], Accelerator(cpu=True))
    assert (counting.forwards, counting.cross_entropies) == (2, 4)  # as written, and permuted
    assert evaluation["eval_loss"] == pytest.approx(expected.item() / count.item(), rel=1e-5)
    assert evaluation["eval_masked_tokens"] == count


@pytest.mark.parametrize("task_name", ["masked-lm", "token_classification", "single_label_classification"])
def test_the_counts_of_a_batch_stay_on_its_device(task_name):
    """The loss units and the tokens of a batch are scalars on the batch's device (the training loop stacks them
    there): a batch on the meta device stands in for one on a GPU, where a CPU count stopped the first step."""
    from sinusoidal_encoder_training.stages.pretraining import MaskedLMTask
    from sinusoidal_encoder_training.tasks.classification.recipe import ClassificationTask

    if task_name == "masked-lm":
        task = MaskedLMTask(torch.Generator(), None, 0, torch.zeros(VOCAB_SIZE, dtype=torch.float64))
    else:
        task = ClassificationTask(0, task_name, None, torch.Generator())
    labels = (4, 16) if task_name != "single_label_classification" else (4,)
    for batch in (
        {"input_ids": torch.ones(4, 16, dtype=torch.long), "labels": torch.ones(labels, dtype=torch.long)},
        {"input_ids": torch.ones(4, 16, dtype=torch.long), "attention_mask": torch.ones(4, 16, dtype=torch.long)},
    ):
        batch = {name: tensor.to("meta") for name, tensor in batch.items()}
        if "labels" in batch:
            assert task.loss_units(batch).device.type == "meta"
        assert task.tokens(batch).device.type == "meta"


@pytest.mark.parametrize(
    "problem",
    [
        "masked-lm",
        "token_classification",
        "single_label_classification",
        "multi_label_classification",
        "regression",
        "span_classification",
    ],
)
def test_the_loss_units_of_the_tasks_are_those_the_heads_divide_by(problem):
    """One loss convention: every head's loss is its sum over the batch's units divided by `num_items_in_batch`, or
    by its own count of units without it; the training library counts the same units (`loss_units`), so that the
    loss it asks for with `num_items_in_batch=loss_units(batch)` is the head's own mean."""
    import sinusoidal_encoder as se
    from sinusoidal_encoder_training.stages.pretraining import MaskedLMTask
    from sinusoidal_encoder_training.tasks.classification.recipe import ClassificationTask
    from sinusoidal_encoder_training.tasks.recipes import model_inputs

    ids = torch.randint(1, VOCAB_SIZE, (3, 10), generator=torch.Generator().manual_seed(0))
    if problem == "masked-lm":
        model = se.SinusoidalEncoderForMaskedLM(tiny_config(sparse_prediction=True)).eval()
        task = MaskedLMTask(torch.Generator(), None, 0, torch.zeros(VOCAB_SIZE, dtype=torch.float64))
        batch = masked_batch()
    elif problem == "span_classification":
        from sinusoidal_encoder_training.tasks.span_classification.recipe import SpanClassificationTask

        model = se.SinusoidalEncoderForSpanClassification(tiny_config(num_labels=3)).eval()
        task = SpanClassificationTask(0, torch.Generator())
        labels = torch.zeros(3, 10, 8, 3)
        labels[:, 0] = labels[:, 7:] = -100  # spans on the first token or running past the text: no candidates
        labels[0, 2, 1, 0] = labels[1, 4, 0, 2] = 1.0
        batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": labels}
    else:
        labels = {
            "token_classification": torch.tensor([[-100, 1, 0, 2, -100, 1, 1, 0, 2, -100]] * 3),
            "single_label_classification": torch.tensor([0, 2, 1]),
            "multi_label_classification": torch.tensor([[1.0, 0.0, 1.0], [0.0, 0.0, 1.0], [1.0, 1.0, 0.0]]),
            "regression": torch.tensor([[0.5], [1.5], [-2.0]]),
        }[problem]
        num_labels = 1 if problem == "regression" else 3
        head = (
            se.SinusoidalEncoderForTokenClassification
            if problem == "token_classification"
            else (se.SinusoidalEncoderForSequenceClassification)
        )
        config = tiny_config(num_labels=num_labels)
        config.problem_type = None if problem == "token_classification" else problem
        model = head(config).eval()
        task = ClassificationTask(0, problem, None, torch.Generator())
        batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": labels}
    units = task.loss_units(batch)
    with torch.no_grad():
        own = model(**(batch if problem == "masked-lm" else model_inputs(batch))).loss
        asked = task.loss(model, batch, units)
        doubled = task.loss(model, batch, 2 * units)
    torch.testing.assert_close(asked, own, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(doubled, own / 2, rtol=1e-6, atol=1e-6)


def test_the_rows_accelerate_repeats_in_the_last_batch_lose_their_labels():
    """Two processes, 4 examples each in the last batch, 5 real ones in all (`remainder`): process 0 keeps its four,
    process 1 its first; every other batch, and a loader accelerate did not prepare, keep all their labels."""
    from types import SimpleNamespace

    from sinusoidal_encoder_training.runs.even_batches import unlabel_repeated_examples

    labels = torch.arange(12).reshape(4, 3)
    for process, kept in ((0, 4), (1, 1)):
        last = SimpleNamespace(
            gradient_state=SimpleNamespace(end_of_dataloader=True, remainder=5), process_index=process
        )
        got = unlabel_repeated_examples(labels, last)
        assert torch.equal(got[:kept], labels[:kept]) and (got[kept:] == -100).all()
    for state in (
        SimpleNamespace(end_of_dataloader=False, remainder=5),
        SimpleNamespace(end_of_dataloader=True, remainder=-1),
    ):
        assert unlabel_repeated_examples(labels, SimpleNamespace(gradient_state=state, process_index=1)) is labels


@pytest.mark.slow
def test_a_pretraining_run_computes_each_loss_once(tmp_path, corpus, tokenizer, monkeypatch):
    """Through the loop: each training micro-batch one forward, each evaluation batch two (as written and
    permuted); the model's own cross-entropy in each, and in evaluation one more per forward, each token's from the
    same logits for the blocks' standard errors. A ready model passed to `pretrain` is the one trained."""
    import sinusoidal_encoder as se
    from sinusoidal_encoder_training.stages import pretraining

    config = tiny_pretraining(corpus, tmp_path / "out", max_train_steps=3, gradient_accumulation_steps=2)
    model = se.SinusoidalEncoderForMaskedLM(
        tiny_config(vocab_size=len(tokenizer), max_position_embeddings=32, sparse_prediction=True)
    )
    modes = []
    model.register_forward_hook(lambda module, *_: modes.append(module.training))
    counting = Counting(model, monkeypatch)
    result = pretraining.pretrain(config, model)
    assert result.accelerator.unwrap_model(result.model) is model
    assert modes.count(True) == 3 * 2  # steps × micro-batches
    assert modes.count(False) % 2 == 0 and modes.count(False) >= 2
    assert counting.forwards == len(modes)
    assert counting.cross_entropies == modes.count(True) + 2 * modes.count(False)
    with pytest.raises(ValueError, match="vocabulary"):
        pretraining.pretrain(config, se.SinusoidalEncoderForMaskedLM(tiny_config()))


@pytest.mark.parametrize(
    "compiled, mode, given, exact",
    [
        (False, None, None, False),
        (True, "default", None, False),
        (True, "reduce-overhead", None, True),
        (True, "max-autotune", None, True),
        (True, "reduce-overhead", "sampled", False),
        (False, None, "exact", True),
    ],
)
def test_masks_are_counted_exactly_where_the_run_replays_cuda_graphs(compiled, mode, given, exact):
    from sinusoidal_encoder_training.configs import PretrainingConfig
    from sinusoidal_encoder_training.stages.pretraining import describe_masking, exact_mask_count

    config = PretrainingConfig(
        output_dir="out", torch_compile=compiled, torch_compile_mode=mode, mask_count=given, max_seq_length=128
    )
    assert exact_mask_count(config) is exact
    expected = "exactly 19 of each block's 128 tokens" if exact else "15% of tokens, each drawn on its own"
    assert describe_masking(config) == f"{expected}; 80% [MASK], 10% random, 10% kept"


def test_a_model_whose_vocabulary_is_smaller_than_the_tokenizers_is_refused():
    import sinusoidal_encoder as se
    from sinusoidal_encoder_training.stages.pretraining import check_vocabulary

    ours = se.SinusoidalEncoderForMaskedLM(tiny_config())
    check_vocabulary(ours, ours.config.vocab_size)
    with pytest.raises(ValueError, match="vocabulary"):
        check_vocabulary(ours, ours.config.vocab_size + 1)


@pytest.mark.slow
def test_pretraining_exports_a_hub_ready_folder(tmp_path, corpus, monkeypatch, capsys):
    """(The command runs in-process: `run_command_afresh`.)"""
    from types import SimpleNamespace

    from sinusoidal_encoder_training.stages import pretraining

    out = tmp_path / "out"
    argv = (
        pretrain_cmd(
            corpus,
            out,
            "--max_train_steps",
            "6",
            "--eval_steps",
            "3",
            "--with_tracking",
            "--report_to",
            "tensorboard",
            "--seq_length_schedule",
            "16:2",  # a parsed flag the trackers must take too
        )
    )[2:]
    status, stdout, stderr = run_command_afresh(pretraining.main, "pretrain.py", argv, monkeypatch, capsys)
    assert status == 0, stderr[-3000:]
    proc = SimpleNamespace(stdout=stdout, stderr=stderr)
    assert "***** Running training *****" in proc.stdout
    for line in ("Training examples", "global batch = 8", "Tokens = 256 per step, 1,536 in all"):
        assert line in proc.stdout, line
    files = set(os.listdir(out))
    assert {
        "config.json",
        "model.safetensors",
        "modeling_sinusoidal_encoder.py",
        "configuration_sinusoidal_encoder.py",
        "tokenizer.json",
        "tokenizer_config.json",
        "README.md",
        "metrics.jsonl",
        "modules.json",  # sentence-transformers: transformer + mean pooling
        "sentence_bert_config.json",
    } <= files
    assert (out / "1_Pooling" / "config.json").exists()
    config = json.loads((out / "config.json").read_text())
    assert config["max_position_embeddings"] == 32 and config["sparse_prediction"] is False
    assert config["hidden_size"] == 32 and "AutoModelForMaskedLM" in config["auto_map"]
    tokenizer_config = json.loads((out / "tokenizer_config.json").read_text())
    assert "model_max_length" not in tokenizer_config  # no cap: the training length is max_position_embeddings
    assert json.loads((out / "sentence_bert_config.json").read_text())["max_seq_length"] == 32
    assert tokenizer_config["tokenizer_class"] == "PreTrainedTokenizerFast"  # a name transformers 4.x knows too
    logged = metrics(out)
    train_steps = [m["step"] for m in logged if "train_loss" in m]
    assert train_steps == [1, 2, 3, 4, 5, 6]
    train_lines = [m for m in logged if "train_loss" in m]
    # the default schedule: linear decay from 5e-4 over 6 steps, no warmup (6% of 6 steps rounds to 0)
    assert [m["learning_rate"] for m in train_lines] == pytest.approx([5e-4 * (6 - k) / 6 for k in range(1, 7)])
    assert [m["tokens_seen"] for m in train_lines] == [256 * k for k in range(1, 7)]
    for before, line in itertools.pairwise(train_lines):  # training time only, so at least the wall-clock rate
        assert line["tokens_per_second"] >= 256 / (line["time"] - before["time"]) * 0.999
    evals = [m for m in logged if "eval_loss" in m]
    assert [m["step"] for m in evals] == [3, 6]
    assert evals[0]["eval_masked_tokens"] == evals[1]["eval_masked_tokens"]  # the same masks at every evaluation
    # the unigram baseline beats the uniform guess over the 16,384-token vocabulary; the untrained model does not
    assert all(0 < m["eval_unigram_loss"] < math.log(16384) - 1 < m["eval_loss"] for m in evals)
    assert all(abs(m["eval_order_gap"]) < 5 for m in evals)
    assert f"step 3 evaluation: eval_loss {evals[0]['eval_loss']:.4f}" in proc.stdout + proc.stderr
    assert "nats above the unigram baseline" in proc.stdout and "order gap" in proc.stdout  # worse, as asserted above
    assert evals[-1]["eval_perplexity"] == pytest.approx(torch.tensor(evals[-1]["eval_loss"]).exp().item())
    logs = [path.relative_to(out).as_posix() for path in out.glob("**/events.out.tfevents.*")]
    assert logs and all(path.startswith("runs/pretraining/") for path in logs)  # where transformers' Trainer logs
    assert not set(logs) & set(files_to_upload(str(out)))  # and stay local
    # the model card: YAML metadata and the figures of this run
    card = (out / "README.md").read_text()
    front = yaml.safe_load(card.split("---")[1])
    assert front["library_name"] == "transformers" and front["pipeline_tag"] == "fill-mask"
    result = front["model-index"][0]["results"][0]
    assert {m["type"] for m in result["metrics"]} == {"loss", "perplexity", "unigram_baseline_loss", "order_gap"}
    assert result["dataset"]["split"] == "validation"  # the run's validation file
    assert f"{evals[-1]['eval_order_gap']:.4f}" in card and "unigram baseline" in card
    assert "are two standard errors, the validation documents taken as the sample. In short:" in card
    assert f"{evals[-1]['eval_loss']:.4f}" in card and "6 optimizer steps" in card and "1,536 tokens seen" in card
    assert "trust_remote_code=True" in card
    assert "sequence-length warmup: each block cut into rows of 16 tokens until step 2" in card
    assert "Setting\n  `long_input_attention_window`" in card and "configured with" not in card
    # loads with AutoModel in a fresh process, and fills masks
    script = (
        "import sinusoidal_encoder, sys\n"
        "from transformers import AutoModel, pipeline\n"
        "print(type(AutoModel.from_pretrained(sys.argv[1])).__name__)\n"
        "print(pipeline('fill-mask', model=sys.argv[1])('The value is [MASK].', top_k=1)[0]['token_str'])\n"
    )
    loaded = run([sys.executable, "-c", script, str(out)])
    assert loaded.stdout.splitlines()[0] == "SinusoidalEncoderModel"


@pytest.mark.slow
def test_killed_run_resumes_to_the_same_weights_bitwise(tmp_path, small_corpus):
    """SIGKILL a run (gradient accumulation, dropout, several epochs, a sequence-length warmup whose second phase
    the kill interrupts) after a checkpoint; resuming with `--resume_from_checkpoint latest` ends with exactly the
    weights of the uninterrupted run. The killed run and its resumption read their batches through two DataLoader
    workers kept from one epoch to the next (the default beside a GPU), the uninterrupted one in the main process:
    the masks of each epoch travel with its indices, and the order and dropout do not depend on the loaders."""
    common = (
        "--max_train_steps",
        "40",
        "--seq_length_schedule",
        "8:6,16:15",
        "--gradient_accumulation_steps",
        "2",
        "--checkpointing_steps",
        "3",
        "--checkpoints_total_limit",
        "2",
        "--config_overrides",
        TINY + ",hidden_dropout_prob=0.1",
    )
    corpus = small_corpus
    reference = tmp_path / "reference"
    run(pretrain_cmd(corpus, reference, *common))
    epochs = {m["epoch"] for m in metrics(reference) if "epoch" in m}
    assert len(epochs) >= 2  # the run crosses epoch boundaries

    killed = tmp_path / "killed"
    workers = ("--dataloader_num_workers", "2")
    proc = subprocess.Popen(
        pretrain_cmd(corpus, killed, *common, *workers),
        env=env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.time() + 300
    while not (killed / "checkpoints" / "step_9").exists():
        assert proc.poll() is None, proc.stderr.read()[-3000:]
        assert time.time() < deadline
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not (killed / "model.safetensors").exists()  # it really died before the end
    steps = sorted(int(p.name.split("_")[1]) for p in (killed / "checkpoints").glob("step_*"))
    assert steps[-1] >= 9

    resumed = run(pretrain_cmd(corpus, killed, *common, *workers, "--resume_from_checkpoint", "latest"))
    assert "Resuming from" in resumed.stdout
    steps = sorted(int(p.name.split("_")[1]) for p in (killed / "checkpoints").glob("step_*"))
    assert steps == [36, 39]  # --checkpoints_total_limit 2
    expected, got = weights(reference), weights(killed)
    assert expected.keys() == got.keys()
    for name in expected:
        assert torch.equal(expected[name], got[name]), name
    # the metrics log reads as one uninterrupted run
    assert [m["step"] for m in metrics(killed) if "train_loss" in m] == list(range(1, 41))
    assert [m["train_loss"] for m in metrics(killed) if "train_loss" in m] == [
        m["train_loss"] for m in metrics(reference) if "train_loss" in m
    ]


def test_activation_checkpointing_trains_to_the_same_losses(tmp_path, corpus, capsys):
    """--activation_checkpointing recomputes every layer's activations in the backward pass (non-reentrant: the
    dropout of the first pass replayed): the run's losses and weights are those of the run without it, and its header
    says it."""
    from sinusoidal_encoder_training.stages import pretraining

    results = {}
    for checkpointing in (False, True):
        config = tiny_pretraining(
            corpus,
            tmp_path / str(checkpointing),
            max_train_steps=3,
            config_overrides=TINY + ",hidden_dropout_prob=0.1,attention_probs_dropout_prob=0.1",
            activation_checkpointing=checkpointing,
        )
        result = pretraining.pretrain(config)
        layers = result.accelerator.unwrap_model(result.model).model.encoder.layers
        assert all(layer.gradient_checkpointing == checkpointing for layer in layers)
        results[checkpointing] = result
    plain, checkpointed = (metrics(tmp_path / name) for name in ("False", "True"))
    assert [m["train_loss"] for m in checkpointed if "train_loss" in m] == pytest.approx(
        [m["train_loss"] for m in plain if "train_loss" in m], rel=1e-6
    )
    for (name, a), (_, b) in zip(
        results[False].model.named_parameters(), results[True].model.named_parameters(), strict=True
    ):
        torch.testing.assert_close(b, a, atol=1e-6, rtol=1e-5, msg=name)
    header = "Activation checkpointing = every layer's activations recomputed in the backward pass"
    assert capsys.readouterr().out.count(header) == 1


@pytest.mark.slow
def test_resume_skips_damaged_checkpoints_for_the_newest_whole_one(tmp_path, corpus, monkeypatch, capsys):
    """A checkpoint is taken only if it is whole (its manifest's files present at their sizes, safetensors readable):
    a truncated model file, a deleted optimizer file or a garbled header in the newer checkpoints is named and
    skipped, a save interrupted before its rename is no checkpoint, and the run resumes from the newest whole one.
    Passed by path, a damaged checkpoint stops the command before any work with one line naming the damage. (The
    commands run in-process.)"""
    from sinusoidal_encoder_training.runs.checkpoints import MANIFEST, checkpoint_damage
    from sinusoidal_encoder_training.stages import pretraining

    def pretrain(out, *argv):
        return run_command(pretraining.main, "pretrain.py", pretrain_cmd(corpus, out, *argv)[2:], monkeypatch, capsys)

    out = tmp_path / "out"
    assert pretrain(out, "--max_train_steps", "6", "--checkpointing_steps", "2")[0] == 0
    folders = {step: out / "checkpoints" / f"step_{step}" for step in (2, 4, 6)}
    assert all((folder / MANIFEST).exists() and checkpoint_damage(str(folder)) is None for folder in folders.values())
    model = folders[6] / "model.safetensors"
    model.write_bytes(model.read_bytes()[: model.stat().st_size // 2])  # cut short, as by a full disk
    (folders[4] / "optimizer.bin").unlink()
    interrupted = out / "checkpoints" / ".incomplete-step_8"  # a save killed before its rename: never a checkpoint
    interrupted.mkdir()
    (interrupted / "model.safetensors").write_text("half written")
    assert "model.safetensors has" in checkpoint_damage(str(folders[6]))
    assert checkpoint_damage(str(folders[4])) == "optimizer.bin is missing"
    status, stdout, _ = pretrain(out, "--max_train_steps", "8", "--resume_from_checkpoint", "latest")
    assert status == 0
    assert f"Skipping the damaged checkpoint {folders[6]}: model.safetensors has" in stdout
    assert f"Skipping the damaged checkpoint {folders[4]}: optimizer.bin is missing" in stdout
    assert f"Resuming from {folders[2]}" in stdout and stdout.count("Resuming from") == 1
    assert f"removed what a killed run left half-written in {out}: checkpoints/.incomplete-step_8" in stdout
    assert not interrupted.exists()

    garbled = tmp_path / "garbled"
    shutil.copytree(folders[2], garbled)
    header = garbled / "model.safetensors"
    header.write_bytes(b"\xff" * 8 + header.read_bytes()[8:])  # same size, unreadable header
    assert "model.safetensors cannot be read" in checkpoint_damage(str(garbled))
    status, _, stderr = pretrain(tmp_path / "again", "--resume_from_checkpoint", str(garbled))
    lines = stderr.strip().splitlines()
    expected = f"pretrain.py: error: --resume_from_checkpoint {str(garbled)!r} is damaged: model.safetensors cannot"
    assert status == 2 and len(lines) == 1 and lines[0].startswith(expected), stderr[-2000:]
    assert "Pass another checkpoint, or 'latest'" in stderr and not (tmp_path / "again").exists()


@pytest.mark.slow
def test_a_resumed_stream_of_shards_read_by_workers_trains_as_the_uninterrupted_run_bitwise(
    tmp_path, corpus, monkeypatch, capsys
):
    """A streamed dataset of two files read by two DataLoader workers (the default beside a GPU), with dropout,
    resumed from a checkpoint halfway: the same weights and logged losses as the run that went through (the
    blocks' mask keys are unique across the workers, and the stream's loader, which accelerate hands back without
    its generator, draws nothing from the global RNG when the resumed run starts its iterator). In-process."""
    from sinusoidal_encoder_training.stages import pretraining

    folder = tmp_path / "sharded"
    folder.mkdir()
    lines = corpus[0].read_text().splitlines()
    for shard in range(2):
        (folder / f"part{shard}.txt").write_text("\n".join(lines[shard::2]) + "\n")
    flags = ["--dataset_name", str(folder), "--streaming", "--streaming_validation_examples", "4"]
    flags += ["--dataloader_num_workers", "2", "--max_train_steps", "8", "--checkpointing_steps", "4"]
    flags += ["--config_overrides", TINY + ",hidden_dropout_prob=0.1"]

    def pretrain(out, *argv):
        argv = [*pretrain_cmd(corpus, out)[6:], *flags, *argv]  # the files' flags left out
        status, _, err = run_command_afresh(pretraining.main, "pretrain.py", argv, monkeypatch, capsys)
        assert status == 0, err[-3000:]

    through, resumed = tmp_path / "through", tmp_path / "resumed"
    pretrain(through)
    (resumed / "checkpoints").mkdir(parents=True)
    shutil.copytree(through / "checkpoints" / "step_4", resumed / "checkpoints" / "step_4")
    shutil.copy(through / "checkpoints" / "run.json", resumed / "checkpoints" / "run.json")
    pretrain(resumed, "--resume_from_checkpoint", "latest")
    expected, got = weights(through), weights(resumed)
    assert all(torch.equal(expected[name], got[name]) for name in expected)
    losses = [(m["step"], m["train_loss"]) for m in metrics(through) if "train_loss" in m]
    assert [(m["step"], m["train_loss"]) for m in metrics(resumed) if "train_loss" in m][-4:] == losses[-4:]
    # a stream's blocks carry their documents too (numbered apart per reader): the standard errors' sample
    assert "two standard errors, the validation documents taken as the sample." in (through / "README.md").read_text()


@pytest.mark.slow
def test_two_processes_give_the_losses_of_one(tmp_path, corpus, monkeypatch, capsys):
    """accelerate launch with 2 CPU processes (gloo) and the same global batch: same losses within noise (the one
    process runs in-process)."""
    from sinusoidal_encoder_training.stages import pretraining

    no_dropout = (
        TINY + ",hidden_dropout_prob=0.0,attention_probs_dropout_prob=0.0"
    )  # dropout streams differ per process
    common = ("--max_train_steps", "5", "--eval_steps", "5", "--config_overrides", no_dropout)
    one = tmp_path / "one"
    argv = pretrain_cmd(
        corpus, one, *common, "--per_device_train_batch_size", "8", "--per_device_eval_batch_size", "8"
    )
    assert run_command(pretraining.main, "pretrain.py", argv[2:], monkeypatch, capsys)[0] == 0
    two = tmp_path / "two"
    launcher = TWO_PROCESSES
    proc = run(
        pretrain_cmd(
            corpus,
            two,
            *common,
            "--per_device_train_batch_size",
            "4",
            "--per_device_eval_batch_size",
            "4",
            launcher=launcher,
        ),
        ACCELERATE_USE_CPU="1",
    )
    assert "Processes = 2" in proc.stdout
    assert_same_training(metrics(one), metrics(two))


@pytest.mark.slow
@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ("data", "pretrain.py: error: The validation split holds no complete block"),
        ("a flag's value", "pretrain.py: error: --learning_rate must be positive, got -1.0."),
        ("a flag", "pretrain.py: error: unrecognized arguments: --no_such_flag"),
    ],
)
def test_bad_input_under_two_processes_stops_both_in_one_line_and_leaves_no_folder(bad, message, tmp_path, corpus):
    """Every process of a launch finds the same bad flag, and bad data shows when the main process reads it
    (`runs.accelerator.main_process_first`): both processes stop at once and the line is shown once, by the first
    process; the other no longer waits at a barrier the main process never reaches (its traceback when the main
    process exited), and the new folder the run claimed is taken back."""
    short = tmp_path / "short.txt"
    short.write_text("Too short for a block.\n")
    out = tmp_path / "new" / "out"
    launcher = TWO_PROCESSES
    extra = {"data": (), "a flag's value": ("--learning_rate", "-1"), "a flag": ("--no_such_flag",)}[bad]
    command = pretrain_cmd((corpus[0], short), out, "--max_train_steps", "2", *extra, launcher=launcher)
    proc = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env(ACCELERATE_USE_CPU="1"))
    ours = [line for line in proc.stderr.splitlines() if "pretrain.py: error:" in line]
    assert proc.returncode != 0 and len(ours) == 1 and ours[0].startswith(message), proc.stderr[-4000:]
    assert "[rank1]" not in proc.stderr and "[rank0]" not in proc.stderr, proc.stderr[-4000:]
    assert "usage: pretrain.py" not in proc.stderr
    assert sorted(path.name for path in tmp_path.iterdir()) == ["short.txt"]


@pytest.mark.slow
def test_fsdp_config_on_cpu_fails_instead_of_silently_replicating(tmp_path, corpus):
    """accelerate (1.x) enables FSDP on GPU-like devices only: launched on CPUs with the FSDP configuration, it runs
    the processes as plain data parallel. The script says so and stops before training, instead of training a
    replicated model under an FSDP configuration."""
    launcher = (
        ACCELERATE,
        "launch",
        "--config_file",
        str(REPO / "training" / "accelerate_configs" / "fsdp.yaml"),
        "--num_processes",
        "2",
        "--mixed_precision",
        "no",
        "--main_process_port",
        "0",
    )
    out = tmp_path / "fsdp"
    proc = subprocess.run(
        pretrain_cmd(corpus, out, "--max_train_steps", "2", launcher=launcher),
        capture_output=True,
        text=True,
        timeout=600,
        env=env(ACCELERATE_USE_CPU="1"),
    )
    assert proc.returncode != 0
    assert "asks for FSDP, but accelerate runs this job as MULTI_CPU on cpu" in proc.stderr
    assert "Running training" not in proc.stdout and not (out / "model.safetensors").exists()


@pytest.mark.slow
def test_bf16_mixed_precision_through_accelerate_on_cpu(tmp_path, corpus):
    out = tmp_path / "bf16"
    launcher = (
        ACCELERATE,
        "launch",
        "--num_processes",
        "1",
        "--num_machines",
        "1",
        "--mixed_precision",
        "bf16",
        "--dynamo_backend",
        "no",
    )
    proc = run(pretrain_cmd(corpus, out, "--max_train_steps", "3", launcher=launcher), ACCELERATE_USE_CPU="1")
    assert "mixed precision = bf16" in proc.stdout
    assert all(torch.isfinite(torch.tensor(m.get("train_loss", 0.0))) for m in metrics(out))
    assert all(t.dtype == torch.float32 for t in weights(out).values())  # master weights stay fp32


@pytest.mark.slow
def test_push_to_hub_uploads_the_folder_but_not_checkpoints(tmp_path, corpus, monkeypatch):
    """The upload is tested offline with a fake HfApi standing in for huggingface_hub's."""
    import huggingface_hub

    from sinusoidal_encoder_training.stages import pretraining

    api = FakeHfApi(user="someone")
    monkeypatch.setattr(huggingface_hub, "HfApi", api)
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", False)
    out = tmp_path / "out"
    config = tiny_pretraining(
        corpus, out, max_train_steps=2, checkpointing_steps=1, push_to_hub=True, hub_model_id="someone/tiny-sinusoidal"
    )
    pretraining.export(config, pretraining.pretrain(config))
    assert api.calls[0] == ("create_repo", "someone/tiny-sinusoidal", False, True)
    assert api.calls[1][:2] == ("create_commit", "someone/tiny-sinusoidal")
    assert {"model.safetensors", "config.json", "README.md", "tokenizer.json"} <= set(api.uploaded)
    assert not any(name.startswith("checkpoints/") for name in api.uploaded)
    assert (out / "checkpoints" / "step_2").is_dir() and (out / "README.md").exists()
    assert "someone/tiny-sinusoidal" in (out / "README.md").read_text()


@pytest.mark.parametrize(
    ("api", "offline", "message"),
    [
        (FakeHfApi(user="someone"), True, "HF_HUB_OFFLINE is set"),
        (FakeHfApi(fail_whoami=LocalTokenNotFoundError("Token is required")), False, "hf auth login"),
        (FakeHfApi(user="other", orgs=("team",)), False, "cannot write to 'someone'"),
        (FakeHfApi(user="someone", role="read"), False, "read-only"),
    ],
)
def test_push_to_hub_is_checked_before_any_work(tmp_path, corpus, monkeypatch, api, offline, message):
    """No token, no Hub, a namespace the token may not write to: found before the data is read."""
    import huggingface_hub

    from sinusoidal_encoder_training.stages import pretraining

    monkeypatch.setattr(huggingface_hub, "HfApi", api)
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", offline)
    monkeypatch.setattr(pretraining, "load_raw_datasets", lambda *a, **k: pytest.fail("the data was read"))
    config = tiny_pretraining(corpus, tmp_path / "out", push_to_hub=True, hub_model_id="someone/tiny")
    with pytest.raises(UsageError, match=message):
        pretraining.pretrain(config)


@pytest.mark.slow
def test_a_failed_upload_keeps_the_saved_model_and_says_how_to_retry(tmp_path, corpus, monkeypatch):
    import huggingface_hub

    from sinusoidal_encoder_training.stages import pretraining

    api = FakeHfApi(user="someone", fail_commit=ConnectionError("[Errno 111] Connection refused"))
    monkeypatch.setattr(huggingface_hub, "HfApi", api)
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", False)
    out = tmp_path / "out"
    config = tiny_pretraining(corpus, out, max_train_steps=1, push_to_hub=True, hub_model_id="someone/tiny")
    result = pretraining.pretrain(config)
    with pytest.raises(UsageError, match=r"saved in .*Connection refused.*sinusoidal-encoder-publish"):
        pretraining.export(config, result)
    for name in ("model.safetensors", "config.json", "tokenizer.json", "README.md"):
        assert (out / name).exists(), name


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"config_overrides": "hidden_size=33"}, "hidden_size"),
        ({"config_overrides": "no_such_field=1"}, "no_such_field"),
        ({"text_column_name": "body"}, "--text_column_name"),
    ],
)
def test_bad_settings_found_in_the_data_or_the_model_fail_before_training(tmp_path, corpus, settings, message):
    """What the configuration cannot check alone (a model config field, a column of the data) stops the stage
    before its first step; the configuration's own checks are in test_run_config.py."""
    from sinusoidal_encoder_training.stages import pretraining

    config = tiny_pretraining(corpus, tmp_path / "out", max_train_steps=1, **settings)
    with pytest.raises(ValueError, match=message):
        pretraining.pretrain(config)
    assert not (tmp_path / "out" / "model.safetensors").exists()


def test_a_bad_config_override_stops_pretraining_before_the_data_is_read(tmp_path, monkeypatch):
    """The model config (preset, sizes, `--config_overrides`) is built and checked before any data is loaded."""
    from sinusoidal_encoder_training.cli.command_line import UsageError
    from sinusoidal_encoder_training.stages import pretraining

    def must_not_load(*args, **kwargs):
        raise AssertionError("the data was read before the config was checked")

    monkeypatch.setattr(pretraining, "load_raw_datasets", must_not_load)
    config = pretraining.PretrainingConfig(
        output_dir=str(tmp_path / "out"), config_name="tiny", config_overrides="position_mode=random_offset"
    )
    with pytest.raises(UsageError, match="--config_overrides: `position_mode='random_offset'` needs"):
        pretraining.pretrain(config)
    assert not (tmp_path / "out" / "checkpoints").exists()


@pytest.mark.parametrize("first, second", [(signal.SIGINT, signal.SIGINT), (signal.SIGTERM, signal.SIGINT)])
def test_a_first_signal_asks_the_loop_to_stop_and_a_second_stops_at_once(capsys, first, second):
    """The first SIGINT or SIGTERM only records the request (the loop stops after the step in progress and saves
    it), with one line; the second raises at once, as its own kind; the handlers before training come back."""
    from sinusoidal_encoder_training.cli.command_line import Interrupted, Terminated
    from sinusoidal_encoder_training.runs.stopping import StopRequest

    # as in a terminal (a suite started with `&` has SIGINT ignored, which install() leaves as it is)
    ignored = signal.signal(signal.SIGINT, signal.default_int_handler)
    before = {signum: signal.getsignal(signum) for signum in StopRequest.SIGNALS}
    stop = StopRequest(announce=True, checkpoints=True)
    stop.install()
    try:
        assert not stop.requested
        os.kill(os.getpid(), first)
        time.sleep(0.01)  # Python runs the handler at the next bytecode
        assert stop.requested and stop.kind is (Terminated if first == signal.SIGTERM else Interrupted)
        line = f"{first.name}: stopping after the step in progress (saving a checkpoint of it, a second {first.name} "
        assert line + "stops at once)" in capsys.readouterr().err
        with pytest.raises(Interrupted) as raised:
            os.kill(os.getpid(), second)
            time.sleep(1)
        assert type(raised.value) is (Terminated if second == signal.SIGTERM else Interrupted)
    finally:
        stop.uninstall()
        after = {signum: signal.getsignal(signum) for signum in StopRequest.SIGNALS}
        signal.signal(signal.SIGINT, ignored)
    assert after == before


@pytest.mark.slow
@pytest.mark.parametrize(
    "stop, status, checkpointing",
    [(signal.SIGINT, 130, "2"), (signal.SIGTERM, 143, "1000")],
    ids=["SIGINT-checkpoints-due", "SIGTERM-between-checkpoints"],
)
def test_ctrl_c_ends_with_the_newest_checkpoint_and_the_command_that_resumes(
    tmp_path, small_corpus, stop, status, checkpointing
):
    """SIGINT (Ctrl-C) during training: the step in progress finishes and is saved as a checkpoint, then one line
    (no KeyboardInterrupt traceback) names that checkpoint and the same command with `--resume_from_checkpoint
    latest`, exit status 130. SIGTERM (what Slurm, Kubernetes and `docker stop` send) the same, exit status 143, and
    the step is saved even when no checkpoint is due for a long while."""
    out = tmp_path / "out"
    cmd = pretrain_cmd(
        small_corpus, out, "--max_train_steps", "400", "--checkpointing_steps", checkpointing, "--logging_steps", "1"
    )
    proc = subprocess.Popen(
        cmd,
        env=env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        # as in a terminal: a suite started in the background (`cmd &`) passes SIGINT on ignored, and Python then
        # leaves it ignored (no KeyboardInterrupt), which no user pressing Ctrl-C is in
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    deadline = time.time() + 300
    metrics = out / "metrics.jsonl"
    while not (metrics.exists() and len(metrics.read_text().splitlines()) >= 5):
        assert proc.poll() is None and time.time() < deadline
        time.sleep(0.02)
    proc.send_signal(stop)
    _, stderr = proc.communicate(timeout=120)
    last = stderr.replace("\r", "\n").strip().splitlines()[-1]
    assert proc.returncode == status and "Traceback" not in stderr, stderr[-3000:]
    assert f"{stop.name}: stopping after the step in progress (saving a checkpoint of it, " in stderr, stderr[-3000:]
    steps = sorted(int(p.name.split("_")[1]) for p in (out / "checkpoints").glob("step_*"))
    assert steps[-1] >= 5, steps
    assert last.startswith(f"pretrain.py: interrupted at step {steps[-1]}; "), last
    assert f"the newest checkpoint is {out / 'checkpoints' / f'step_{steps[-1]}'}" in last, last
    assert last.endswith(f"resume with: python {PRETRAIN} {shlex.join(cmd[2:])} --resume_from_checkpoint latest")


def test_the_processes_agreement_on_a_stop_is_read_one_step_late():
    """Several processes read their agreement on a stop from the reduction of the step before (the device has long
    computed it), not from the step's own: a sum posted at one step is what the next step reads."""
    from sinusoidal_encoder_training.runs.stopping import StopAgreement, StopRequest

    agreement = StopAgreement()
    assert not agreement.agreed()  # the first step: nothing reduced yet
    agreement.post(torch.tensor(0.0, dtype=torch.float64))
    assert not agreement.agreed()
    agreement.post(torch.tensor(1.0, dtype=torch.float64))  # one process of two asked
    assert agreement.agreed() and agreement.agreed()  # the same answer until the next reduction
    assert StopRequest(announce=False, checkpoints=True, shared=True).shared


def process_of_rank(launcher: int, rank: int, deadline: float) -> int:
    """The pid of the training process of `rank` started (at any depth) by the launcher `launcher`."""
    while time.time() < deadline:
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                environment = (entry / "environ").read_bytes().split(b"\0")
                status = (entry / "status").read_text()
            except OSError:
                continue
            if f"RANK={rank}".encode() in environment and b"LOCAL_RANK=" + str(rank).encode() in environment:
                parent = int(status.split("PPid:")[1].split()[0])
                ancestors = {parent}
                while parent > 1:
                    try:
                        parent = int(Path(f"/proc/{parent}/status").read_text().split("PPid:")[1].split()[0])
                    except OSError:
                        break
                    ancestors.add(parent)
                if launcher in ancestors:
                    return int(entry.name)
        time.sleep(0.1)
    raise AssertionError(f"no process of rank {rank} under {launcher}")


@pytest.mark.slow
def test_two_processes_stop_after_the_same_step_when_one_is_asked(tmp_path, small_corpus):
    """SIGTERM to one process of two (gloo, on the CPU; the other is not signalled): both stop after the same
    optimizer step, save its checkpoint together and name it; neither waits for the other in a collective the other
    never joins."""
    from sinusoidal_encoder_training.runs.checkpoints import complete_checkpoints

    out = tmp_path / "out"
    launcher = TWO_PROCESSES
    cmd = pretrain_cmd(
        small_corpus, out, "--max_train_steps", "400", "--checkpointing_steps", "1000", launcher=launcher
    )
    proc = subprocess.Popen(cmd, env=env(ACCELERATE_USE_CPU="1"), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.time() + 300
    metrics = out / "metrics.jsonl"
    while not (metrics.exists() and len(metrics.read_text().splitlines()) >= 3):
        assert proc.poll() is None and time.time() < deadline, proc.communicate()[1].decode()[-3000:]
        time.sleep(0.05)
    os.kill(process_of_rank(proc.pid, 1, deadline), signal.SIGTERM)
    stdout, stderr = (text.decode() for text in proc.communicate(timeout=180))
    assert proc.returncode != 0 and "Processes = 2" in stdout, stdout[-2000:] + stderr[-3000:]
    saved = [step for step, _ in complete_checkpoints(str(out))]
    assert len(saved) == 1 and saved[0] >= 3, (saved, stderr[-3000:])
    stops = {
        int(line.split("interrupted at step ")[1].split(";")[0])
        for line in stderr.splitlines()
        if "interrupted at step" in line
    }
    assert stops == {saved[0]}, stderr[-3000:]


def test_one_process_never_waits_for_the_device_between_logged_steps(tmp_path, corpus, monkeypatch):
    """The step's reduction stays on the device: a single-process run reads what the reductions give
    (`.item()`, `.tolist()` of them or of what is computed from them) as often for 8 steps as for 4 when both log
    once (at the end), so a GPU step never waits for the one before."""
    from accelerate import Accelerator

    from sinusoidal_encoder_training.stages.pretraining import pretrain

    class Watched(torch.Tensor):
        reads = 0

        def item(self):
            Watched.reads += 1
            return super().item()

        def tolist(self):
            Watched.reads += 1
            return super().tolist()

    real = Accelerator.reduce
    monkeypatch.setattr(
        Accelerator, "reduce", lambda self, *args, **kwargs: real(self, *args, **kwargs).as_subclass(Watched)
    )
    counts = []
    for steps in (4, 8):
        Watched.reads = 0
        pretrain(tiny_pretraining(corpus, tmp_path / f"out-{steps}", max_train_steps=steps, logging_steps=steps))
        counts.append(Watched.reads)
    assert counts[0] == counts[1] > 0, counts
