"""The model under torch.compile computes what eager computes, without recompiling for every sequence length."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from conftest import pretrain_cmd, random_ids, run_command, tiny_config, tiny_pretraining, write_text_corpus
from safetensors.torch import load_file
from transformers import AutoModelForMaskedLM

import sinusoidal_encoder as se


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.mark.slow
def test_compiled_equals_eager_across_lengths():
    model = se.SinusoidalEncoderForMaskedLM(tiny_config()).eval()
    compiled = torch.compile(model, dynamic=True, fullgraph=True)
    with torch.no_grad():
        for length in (9, 17, 40):
            ids = random_ids(2, length, seed=length)
            torch.testing.assert_close(compiled(ids).logits, model(ids).logits, atol=1e-5, rtol=1e-5)


@pytest.mark.slow
def test_compiled_training_step_equals_eager():
    config = tiny_config(sparse_prediction=True)
    eager = se.SinusoidalEncoderForMaskedLM(config)
    twin = se.SinusoidalEncoderForMaskedLM(config)
    twin.load_state_dict(eager.state_dict())
    compiled = torch.compile(twin, dynamic=True)
    ids = random_ids(2, 16)
    labels = torch.where(torch.rand(ids.shape) < 0.3, ids, torch.full_like(ids, -100))
    labels[0, 0] = 5
    loss_eager, loss_compiled = eager(ids, labels=labels).loss, compiled(ids, labels=labels).loss
    torch.testing.assert_close(loss_compiled, loss_eager, atol=1e-5, rtol=1e-5)
    loss_eager.backward()
    loss_compiled.backward()
    for (name, a), b in zip(eager.named_parameters(), twin.parameters(), strict=True):
        torch.testing.assert_close(b.grad, a.grad, atol=1e-5, rtol=1e-4, msg=name)


def test_one_graph_serves_every_sequence_length():
    from torch._dynamo.testing import CompileCounter

    counter = CompileCounter()
    model = se.SinusoidalEncoderModel(tiny_config()).eval()
    compiled = torch.compile(model, backend=counter, dynamic=True, fullgraph=True)
    with torch.no_grad():
        for length in (5, 11, 64, 300):
            compiled(random_ids(2, length, seed=length))
    assert counter.frame_count == 1  # no recompilation per length, no graph break (fullgraph)


@pytest.mark.slow
def test_padded_batches_compile_without_graph_breaks():
    """Unpadding has data-dependent shapes, so compiled graphs take the padded path: still one graph, same result."""
    from torch._dynamo.testing import CompileCounter

    counter = CompileCounter()
    model = se.SinusoidalEncoderModel(tiny_config()).eval()
    compiled = torch.compile(model, backend=counter, dynamic=True, fullgraph=True)
    ids = random_ids(3, 12)
    mask = torch.ones_like(ids)
    mask[1, 7:] = 0
    with torch.no_grad():
        got = compiled(ids, attention_mask=mask).last_hidden_state
        expected = model(ids, attention_mask=mask).last_hidden_state
    torch.testing.assert_close(got[mask.bool()], expected[mask.bool()], atol=1e-5, rtol=1e-5)
    assert counter.frame_count == 1


# --torch_compile in the training scripts. The backend is aot_eager: the same capture, functionalisation and
# autograd tracing as inductor, without the C++ compilation that would cost minutes here (the tests above check
# inductor's numbers against eager).
COMPILED = ("--torch_compile", "--torch_compile_backend", "aot_eager")


def same_weights(a, b) -> bool:
    first, second = load_file(str(Path(a) / "model.safetensors")), load_file(str(Path(b) / "model.safetensors"))
    return first.keys() == second.keys() and all(torch.equal(first[k], second[k]) for k in first)


@pytest.mark.slow
@pytest.mark.usefixtures("_fresh_accelerate_state")
def test_compiled_pretraining_exports_plain_weights_and_resumes_eagerly(tmp_path, monkeypatch, capsys):
    """`--torch_compile` pretraining exports the plain model's weights, and an eager run resumes its checkpoint to the
    same weights. Both runs go through the command line in-process (`run_command`; each subprocess would cost a start
    of Python, torch and transformers), one after the other as in a notebook: the compiled run must compile, the
    eager one must not (accelerate keeps the first run's compile plugin for the process unless the run clears it).
    """
    from torch._dynamo.utils import counters

    from sinusoidal_encoder_training.stages import pretraining

    corpus = write_text_corpus(tmp_path / "corpus", n_train=25, n_validation=6)
    common = ("--max_train_steps", "4", "--checkpointing_steps", "2", "--gradient_accumulation_steps", "2")

    def pretrain(output_dir, *flags) -> str:
        argv = pretrain_cmd(corpus, output_dir, *common, *flags)[2:]  # without the interpreter and the script
        counters.clear()
        status, out, err = run_command(pretraining.main, "pretrain.py", argv, monkeypatch, capsys)
        assert status == 0, out[-3000:] + err[-3000:]
        return out

    full = tmp_path / "full"
    out = pretrain(full, *COMPILED)
    assert counters["aot_autograd"]["ok"] > 0  # the flags took effect: dynamo captured graphs for aot_eager
    exported = load_file(str(full / "model.safetensors"))
    assert not any(name.startswith("_orig_mod") for name in exported)  # the plain model's keys, loadable as such
    loaded, info = AutoModelForMaskedLM.from_pretrained(full, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and "saved the model" in out
    assert torch.equal(loaded.get_input_embeddings().weight, exported["model.embeddings.word_embeddings.weight"])

    # an eager run resumes the compiled one's checkpoint (bitwise resume under compile: the fine-tuning test below,
    # through the same training loop)
    torch._dynamo.reset()  # no compiled code left to reuse: a compiled run would have to capture frames anew
    checkpoint = ("--resume_from_checkpoint", str(full / "checkpoints" / "step_2"))
    pretrain(tmp_path / "eager", *checkpoint)
    assert not counters["frames"]["total"]  # eager: dynamo saw no frame
    eager = load_file(str(tmp_path / "eager" / "model.safetensors"))
    for name, value in exported.items():
        torch.testing.assert_close(eager[name], value, atol=1e-5, rtol=1e-4, msg=name)


@pytest.fixture
def _fresh_accelerate_state():
    """accelerate keeps its state (the compile plugin included) for the whole process: reset it before an in-process
    compiled run (an earlier in-process run of another test left its eager state) and after it, so that later
    in-process runs of other tests are not compiled; the dynamo settings a compiled run sets
    (`compilation.compile_once_per_mode`) are put back after it."""
    import torch._dynamo.config
    import torch.fx.experimental._config
    from accelerate.state import AcceleratorState

    settings = (torch._dynamo.config.capture_dynamic_output_shape_ops, torch.fx.experimental._config.use_duck_shape)
    AcceleratorState._reset_state(reset_partial_state=True)
    yield
    AcceleratorState._reset_state(reset_partial_state=True)
    torch._dynamo.config.capture_dynamic_output_shape_ops, torch.fx.experimental._config.use_duck_shape = settings


@pytest.mark.slow
@pytest.mark.usefixtures("_fresh_accelerate_state")
def test_compiled_finetuning_resumes_exactly(tmp_path, tokenizer):
    """A compiled fine-tuning run resumed from its checkpoint ends with the weights of the uninterrupted run, and
    compiles once per mode whatever the padded length of its batches."""
    from torch._dynamo.utils import counters

    from sinusoidal_encoder_training.stages import finetuning

    folder = tmp_path / "pretrained"
    se.SinusoidalEncoderForMaskedLM(
        tiny_config(vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id)
    ).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    words = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta"]
    rows = [{"text": " ".join(words[: 2 + i % 5]), "label": ["a", "b"][i % 2]} for i in range(24)]
    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    common = dict(
        model_name_or_path=str(folder),
        train_file=str(data),
        validation_file=str(data),
        per_device_train_batch_size=4,
        max_train_steps=6,
        checkpointing_steps=3,
        torch_compile=True,
        torch_compile_backend="aot_eager",
    )

    def run_finetune(**settings) -> None:
        config = finetuning.FinetuningConfig(**common, **settings)
        finetuning.export(config, finetuning.finetune(config))

    counters.clear()
    run_finetune(output_dir=str(tmp_path / "a"))
    # batches padded to their longest rows (of different lengths) and evaluation: one graph per mode, not per length
    assert counters["stats"]["unique_graphs"] <= 2, dict(counters["stats"])
    run_finetune(output_dir=str(tmp_path / "b"), resume_from_checkpoint=str(tmp_path / "a" / "checkpoints" / "step_3"))
    assert same_weights(tmp_path / "a", tmp_path / "b")


@pytest.mark.slow
@pytest.mark.usefixtures("_fresh_accelerate_state")
def test_a_compiled_run_compiles_once_per_mode_whatever_the_lengths(tmp_path):
    """A compiled pretraining run under a sequence-length schedule (rows of 8, 16, then 32 tokens: batches of 32 x 8,
    16 x 16, 8 x 32) with an evaluation midway captures one graph for training and one for each kind of evaluation
    (with and without labels), never one per length or per step: the sparse prediction's data-dependent size is
    traced (it broke the graph at every forward) and equal sizes are not assumed (32 x 32 recompiled)."""
    from torch._dynamo.utils import counters

    from sinusoidal_encoder_training.stages.pretraining import pretrain

    corpus = write_text_corpus(tmp_path / "corpus", n_train=25, n_validation=6)
    config = tiny_pretraining(
        corpus,
        tmp_path / "out",
        max_train_steps=4,
        seq_length_schedule="8:1,16:2",
        eval_steps=2,
        torch_compile=True,
        torch_compile_backend="aot_eager",
    )
    counters.clear()
    pretrain(config)
    assert counters["stats"]["unique_graphs"] <= 3, dict(counters["stats"])


@pytest.mark.slow
@pytest.mark.usefixtures("_fresh_accelerate_state")
def test_a_cuda_graph_mode_marks_each_forward_and_keeps_the_accumulated_gradients(tmp_path, monkeypatch, capsys):
    """`--torch_compile_mode reduce-overhead` (CUDA graphs) runs on a CPU, where the graphs run as in the default
    mode, and says so in the run's header. The loop tells torch that a step begins before every micro-batch's forward,
    and copies the first micro-batch's gradients out of the graphs' memory when a step accumulates several (the
    next replay reuses it): once per optimizer step."""
    from sinusoidal_encoder_training.runs import loop
    from sinusoidal_encoder_training.stages.pretraining import MaskedLMTask, pretrain

    calls = {"marks": 0, "kept": 0}

    def mark():
        calls["marks"] += 1

    def keep(model):
        calls["kept"] += 1
        loop_keep(model)

    loop_keep = loop.keep_gradients
    monkeypatch.setattr(torch.compiler, "cudagraph_mark_step_begin", mark)
    monkeypatch.setattr(loop, "keep_gradients", keep)
    counts = []  # the masked tokens of each training batch: one number, so one shape of the sparse prediction
    loss_units = MaskedLMTask.loss_units

    def counted(self, batch):
        units = loss_units(self, batch)
        counts.append(int(units))
        return units

    monkeypatch.setattr(MaskedLMTask, "loss_units", counted)
    corpus = write_text_corpus(tmp_path / "corpus", n_train=25, n_validation=6)
    config = tiny_pretraining(
        corpus,
        tmp_path / "out",
        max_train_steps=3,
        gradient_accumulation_steps=2,
        torch_compile=True,
        torch_compile_backend="eager",
        torch_compile_mode="reduce-overhead",
    )
    result = pretrain(config)
    assert result.progress.completed_steps == 3 and calls == {"marks": 6, "kept": 3}
    out = capsys.readouterr().out
    expected = "torch.compile = eager, mode reduce-overhead (CUDA graphs need a CUDA GPU: here the graphs run as"
    assert expected in out, out[-2000:]
    length = config.max_seq_length
    count = round(0.15 * length)
    assert f"Masking = exactly {count} of each block's {length} tokens" in out, out[-2000:]
    rows = config.per_device_train_batch_size
    assert len(counts) >= 6 and set(counts) == {rows * count}, counts


def test_kept_gradients_are_the_same_values_in_memory_of_their_own():
    model = torch.nn.Linear(3, 2)
    model(torch.ones(1, 3)).sum().backward()
    model.bias.grad = None  # a parameter without a gradient keeps none
    before = model.weight.grad
    from sinusoidal_encoder_training.runs.compilation import keep_gradients

    keep_gradients(model)
    assert torch.equal(model.weight.grad, before) and model.bias.grad is None
    assert model.weight.grad.untyped_storage().data_ptr() != before.untyped_storage().data_ptr()
