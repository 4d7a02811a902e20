"""The paths that need CUDA: torch's and flash-attn's variable-length kernels against sdpa (outputs and gradients),
activation checkpointing over them, bf16 training and save/load, `accelerate launch` with the shipped single-GPU
configuration (a kill and an exact resume), the multi-GPU and FSDP configurations, and FSDP checkpoint + resume.

Run them with `bash scripts/test_gpu.sh RESULTS_DIR` on a machine with a GPU (the multi-GPU and FSDP tests need
two). Without CUDA every test here skips, with the reason; the CPU suite covers the rest (the packed layout and the
dispatch with stand-in kernels: tests/model/test_model.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest
import torch
from conftest import REPO, TINY, env, metrics, pretrain_cmd, random_ids, run, tiny_config, write_text_corpus
from safetensors.torch import load_file
from transformers import AutoModelForMaskedLM

import sinusoidal_encoder as se
from sinusoidal_encoder import fast_paths

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        not torch.cuda.is_available(), reason="needs a CUDA GPU: run `bash scripts/test_gpu.sh RESULTS_DIR` there"
    ),
]
GPUS = torch.cuda.device_count() if torch.cuda.is_available() else 0
two_gpus = pytest.mark.skipif(GPUS < 2, reason=f"needs 2 CUDA GPUs, found {GPUS}")
ACCELERATE = (sys.executable, "-m", "accelerate.commands.accelerate_cli")  # also where no `accelerate` script is
CONFIGS = REPO / "training" / "accelerate_configs"


def padded_batch(batch: int = 4, length: int = 48):
    ids = random_ids(batch, length, seed=3)
    mask = torch.ones_like(ids)
    for row, keep in enumerate((length, length - 7, 11, 1)[:batch]):
        mask[row, keep:] = 0
    return ids, mask


def launch(config: Path, *flags: str) -> tuple[str, ...]:
    return (*ACCELERATE, "launch", "--config_file", str(config), "--main_process_port", "0", *flags)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return write_text_corpus(tmp_path_factory.mktemp("corpus"), n_train=25, n_validation=6)


def weights(folder: Path) -> dict[str, torch.Tensor]:
    return load_file(str(folder / "model.safetensors"))


def test_sdpa_on_cuda_equals_the_cpu():
    model = se.SinusoidalEncoderModel(tiny_config()).eval()
    ids, mask = padded_batch()
    with torch.no_grad():
        expected = model(ids, attention_mask=mask).last_hidden_state
        got = model.cuda()(ids.cuda(), attention_mask=mask.cuda()).last_hidden_state.cpu()
    real = mask.bool()
    torch.testing.assert_close(got[real], expected[real], atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_flash_attention_varlen_equals_sdpa(tmp_path, dtype):
    pytest.importorskip("flash_attn", reason="flash-attn is not installed")
    se.SinusoidalEncoderForMaskedLM(tiny_config(hidden_size=64, num_attention_heads=4)).save_pretrained(tmp_path)
    ids, mask = padded_batch()
    outputs = {}
    for implementation in ("sdpa", "flash_attention_2"):
        model = AutoModelForMaskedLM.from_pretrained(tmp_path, dtype=dtype, attn_implementation=implementation)
        model = model.cuda().eval()
        assert model.config._attn_implementation == implementation
        with torch.no_grad():
            outputs[implementation] = model(ids.cuda(), attention_mask=mask.cuda()).logits.float().cpu()
    real = mask.bool()
    torch.testing.assert_close(outputs["flash_attention_2"][real], outputs["sdpa"][real], atol=2e-2, rtol=2e-2)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_torchs_varlen_kernel_equals_sdpa_on_padded_batches_with_gradients(dtype):
    """The unpadded path on CUDA (packed tokens through `varlen_attn`, no flash-attn package) against the padded
    batch through sdpa: the same masked-LM loss, logits on the real tokens and gradients of every weight, within
    half-precision tolerances; and the kernel is really the one called."""
    if fast_paths.varlen_attn is None:
        pytest.skip(f"torch {torch.__version__} has no torch.nn.attention.varlen (torch 2.10 and later do)")
    calls = []
    kernel = fast_paths.varlen_attn

    def counted(*args, **kwargs):
        calls.append(args[0].shape)
        return kernel(*args, **kwargs)

    ids, mask = padded_batch(batch=4, length=48)
    ids, mask = ids.cuda(), mask.cuda()
    labels = torch.where(mask.bool(), ids, -100)
    results = {}
    for unpad in (True, False):
        torch.manual_seed(0)
        config = tiny_config(hidden_size=128, num_attention_heads=4, intermediate_size=256, unpad_inputs=unpad)
        model = AutoModelForMaskedLM.from_config(config).to(device="cuda", dtype=dtype).train()
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(fast_paths, "varlen_attn", counted)
            output = model(ids, attention_mask=mask, labels=labels)
            output.loss.backward()
        grads = {name: p.grad.float().cpu() for name, p in model.named_parameters()}
        results[unpad] = output.loss.float().item(), output.logits.float().cpu(), grads
    assert len(calls) == config.num_hidden_layers  # the unpadded model's layers, not the padded one's
    (loss, logits, grads), (padded_loss, padded_logits, padded_grads) = results[True], results[False]
    real = mask.bool().cpu()
    assert loss == pytest.approx(padded_loss, rel=2e-2)
    torch.testing.assert_close(logits[real], padded_logits[real], atol=5e-2, rtol=5e-2)
    for name, grad in grads.items():
        assert torch.isfinite(grad).all(), name
        torch.testing.assert_close(grad, padded_grads[name], atol=5e-2, rtol=1e-1, msg=name)


def test_torchs_varlen_kernel_serves_inference_in_bf16_and_equals_sdpa_of_each_row_alone():
    """bf16 inference as users load it (`dtype=torch.bfloat16`): a padded batch's real tokens equal each row run
    alone without padding (sdpa, no mask), within bf16 rounding."""
    if fast_paths.varlen_attn is None:
        pytest.skip(f"torch {torch.__version__} has no torch.nn.attention.varlen (torch 2.10 and later do)")
    config = tiny_config(hidden_size=128, num_attention_heads=4, intermediate_size=256)
    model = se.SinusoidalEncoderModel(config).to(device="cuda", dtype=torch.bfloat16).eval()
    ids, mask = padded_batch(batch=4, length=48)
    with torch.no_grad():
        batched = model(ids.cuda(), attention_mask=mask.cuda()).last_hidden_state.float().cpu()
        for row in range(ids.shape[0]):
            length = int(mask[row].sum())
            alone = model(ids[row : row + 1, :length].cuda()).last_hidden_state.float().cpu()
            torch.testing.assert_close(batched[row, :length], alone[0], atol=3e-2, rtol=3e-2)
    assert batched[~mask.bool()].abs().max() == 0


def test_training_with_attention_dropout_runs_the_flash_kernel_on_packed_sequences():
    """In training with attention dropout the packed sequences go to the flash kernel itself (`varlen_attn` has no
    dropout): on average over many draws it gives the attention without dropout (kept probabilities scaled by
    1/(1-p)), each sequence attends within itself, and a model's training step through it has finite gradients."""
    if fast_paths.varlen_attn is None or fast_paths.flash_varlen_forward is None:
        pytest.skip(f"torch {torch.__version__} lacks torch.nn.attention.varlen or aten._flash_attention_forward")
    torch.manual_seed(0)
    heads, head_dim = 4, 32
    cu_seq_lens = torch.tensor([0, 12, 20, 25, 40], dtype=torch.int32, device="cuda")
    qkv = torch.randn(1, 40, 3 * heads * head_dim, device="cuda", dtype=torch.bfloat16)
    exact = fast_paths.varlen_attention(qkv, cu_seq_lens, 15, heads, head_dim).float()
    draws = [fast_paths.varlen_attention(qkv, cu_seq_lens, 15, heads, head_dim, dropout=0.3) for _ in range(1000)]
    assert not torch.equal(draws[0], draws[1])  # dropout is drawn anew
    error = (torch.stack(draws).float().mean(0) - exact).abs().mean()  # about 0.01 (each draw's spread, averaged)
    assert error < 0.03 < 0.3 * exact.abs().mean(), (error, exact.abs().mean())  # unscaled kept weights: 0.3 |exact|
    calls = []
    kernel = fast_paths.flash_varlen_forward

    def counted(*args, **kwargs):
        calls.append(args[7])  # the dropout
        return kernel(*args, **kwargs)

    config = tiny_config(hidden_size=128, num_attention_heads=4, intermediate_size=256, num_labels=3)
    config.attention_probs_dropout_prob = 0.1
    model = se.SinusoidalEncoderForSequenceClassification(config).to(device="cuda", dtype=torch.bfloat16).train()
    ids, mask = padded_batch(batch=4, length=48)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(fast_paths, "flash_varlen_forward", counted)
        loss = model(ids.cuda(), attention_mask=mask.cuda(), labels=torch.tensor([0, 1, 2, 0]).cuda()).loss
        loss.backward()
    assert calls == [0.1] * config.num_hidden_layers and torch.isfinite(loss)
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


def test_activation_checkpointing_gives_the_plain_steps_gradients_on_the_fast_paths():
    """--activation_checkpointing on CUDA, where the layers run the packed kernels and attention dropout goes
    through the flash kernel, whose random draws the recomputation must replay (torch's checkpoint restores the CUDA
    generator): the loss and the gradients of the same bf16 step without it."""
    from sinusoidal_encoder_training.runs.accelerator import enable_activation_checkpointing

    config = tiny_config(hidden_size=128, num_attention_heads=4, intermediate_size=256, num_labels=3)
    config.attention_probs_dropout_prob = config.hidden_dropout_prob = 0.1
    model = se.SinusoidalEncoderForSequenceClassification(config).to(device="cuda", dtype=torch.bfloat16).train()
    ids, mask = (tensor.cuda() for tensor in padded_batch(batch=4, length=48))
    labels = torch.tensor([0, 1, 2, 0], device="cuda")

    def step() -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        model.zero_grad()
        torch.manual_seed(7)  # the same dropout in both steps (it seeds CUDA's generator too)
        loss = model(ids, attention_mask=mask, labels=labels).loss
        loss.backward()
        return loss.detach(), {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}

    plain_loss, plain = step()
    enable_activation_checkpointing(model)
    assert all(layer.gradient_checkpointing for layer in model.model.encoder.layers)
    loss, checkpointed = step()
    assert torch.equal(loss, plain_loss) and plain.keys() == checkpointed.keys()
    for name in plain:
        torch.testing.assert_close(checkpointed[name], plain[name], msg=name)


class SyncWarnings:
    """Within it, torch's CUDA sync debug mode warns at every call that makes the host wait for the GPU (a value
    read, a copy from pageable memory, `nonzero`); `calls` counts them, except within what `unwatched` wraps."""

    def __init__(self):
        self.calls = 0

    def __enter__(self):
        self.caught = warnings.catch_warnings(record=True)
        self.records = self.caught.__enter__()
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        return self

    def __exit__(self, *exc):
        torch.cuda.set_sync_debug_mode("default")
        self.calls += sum("synchronizing CUDA operation" in str(record.message) for record in self.records)
        self.caught.__exit__(*exc)

    def unwatched(self, function):
        def call(*args, **kwargs):
            torch.cuda.set_sync_debug_mode("default")
            try:
                return function(*args, **kwargs)
            finally:
                torch.cuda.set_sync_debug_mode("warn")

        return call


def test_the_training_loop_waits_for_the_gpu_only_at_logging_steps(tmp_path, monkeypatch):
    """On a GPU the loop's own work in a step (the batches' copies from page-locked memory, the step's reduction,
    the loss kept for its check, clipping, the fused AdamW, the scheduler) makes no call that waits for the GPU, so
    the host queues the next step while the GPU runs this one; a logging step reads what it logs. The model's
    forward and backward passes are left out (the padded batch's real tokens are found once a forward pass:
    tests/model/test_model.py). The first step, with its one-time setup, is not checked."""
    from accelerate.state import AcceleratorState
    from test_loop_phases import TinyTask, examples

    from sinusoidal_encoder_training.configs import TrainingConfig
    from sinusoidal_encoder_training.runs import loop
    from sinusoidal_encoder_training.runs.accelerator import make_accelerator
    from sinusoidal_encoder_training.runs.optimization import make_optimizer

    config = TrainingConfig(
        output_dir=str(tmp_path / "out"),
        per_device_train_batch_size=2,
        gradient_accumulation_steps=2,
        max_train_steps=6,
        logging_steps=3,
        mixed_precision="bf16",
    )
    try:
        accelerator = make_accelerator(config)
        model = se.SinusoidalEncoderForMaskedLM(tiny_config(num_hidden_layers=1)).to(accelerator.device)
        optimizer = make_optimizer(model, config)
        loader = torch.utils.data.DataLoader(examples(12), batch_size=2, pin_memory=True)
        model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
        run = loop.start_run(accelerator, config, model, optimizer, loader, [], TinyTask(), [])
        watch = SyncWarnings()
        monkeypatch.setattr(run.task, "loss", watch.unwatched(run.task.loss))
        monkeypatch.setattr(accelerator, "backward", watch.unwatched(accelerator.backward))
        windows = loop.step_windows(run, loader, streaming=False)
        calls = []
        for _ in range(config.max_train_steps):
            with watch:
                started, batches = next(windows)
                loop.optimizer_step(run, batches)
                loop.after_step(run, started)
            calls.append(watch.calls)
            watch.calls = 0
        run.bar.close()
    finally:
        AcceleratorState._reset_state(reset_partial_state=True)
    assert all(batch["input_ids"].is_cuda for batch in batches)
    assert [calls[1], calls[3], calls[4]] == [0, 0, 0] and calls[2] > 0 and calls[5] > 0, calls


def test_bf16_weights_save_and_load_on_cuda(tmp_path):
    model = se.SinusoidalEncoderForMaskedLM(tiny_config()).to(device="cuda", dtype=torch.bfloat16).eval()
    model.save_pretrained(tmp_path)
    loaded = AutoModelForMaskedLM.from_pretrained(tmp_path, dtype=torch.bfloat16).cuda().eval()
    ids, mask = padded_batch()
    with torch.no_grad():
        a = model(ids.cuda(), attention_mask=mask.cuda()).logits
        b = loaded(ids.cuda(), attention_mask=mask.cuda()).logits
    assert loaded.dtype == torch.bfloat16 and torch.equal(a, b)


def test_bf16_training_with_the_single_gpu_config(tmp_path, corpus):
    out = tmp_path / "single"
    proc = run(
        pretrain_cmd(
            corpus,
            out,
            "--max_train_steps",
            "6",
            "--eval_steps",
            "3",
            launcher=launch(CONFIGS / "single_gpu_bf16.yaml"),
        )
    )
    assert "Processes = 1, mixed precision = bf16" in proc.stdout
    model = AutoModelForMaskedLM.from_pretrained(out)
    assert model.dtype == torch.float32  # float32 master weights, bf16 autocast
    assert all(torch.isfinite(p).all() for p in model.parameters())


def test_single_gpu_bf16_training_is_killed_resumes_exactly_and_reloads_in_bf16(tmp_path, corpus):
    """As users run it: `accelerate launch` with the shipped single-GPU bf16 configuration, SIGKILL after a
    checkpoint, `--resume_from_checkpoint latest`; the run ends with the uninterrupted run's losses and weights (up to
    the GPU's nondeterministic kernels), and the saved folder reloads in bf16 on the GPU with the fp32 model's
    predictions within bf16 rounding."""
    common = ("--max_train_steps", "40", "--checkpointing_steps", "4", "--eval_steps", "20")
    launcher = launch(CONFIGS / "single_gpu_bf16.yaml")
    whole = tmp_path / "whole"
    run(pretrain_cmd(corpus, whole, *common, launcher=launcher))
    killed = tmp_path / "killed"
    proc = subprocess.Popen(
        pretrain_cmd(corpus, killed, *common, launcher=launcher),
        env=env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # the launcher and the training process it starts: killed together
    )
    try:
        deadline = time.time() + 300
        while not (killed / "checkpoints" / "step_8").exists():
            assert proc.poll() is None, proc.stderr.read()[-3000:]
            assert time.time() < deadline, "no checkpoint step_8 within 300 s"
            time.sleep(0.05)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert not (killed / "model.safetensors").exists()  # it died before the end
    resumed = run(pretrain_cmd(corpus, killed, *common, "--resume_from_checkpoint", "latest", launcher=launcher))
    assert "Resuming from" in resumed.stdout and "mixed precision = bf16" in resumed.stdout
    losses = [m["train_loss"] for m in metrics(killed) if "train_loss" in m]
    expected = [m["train_loss"] for m in metrics(whole) if "train_loss" in m]
    assert [m["step"] for m in metrics(killed) if "train_loss" in m] == list(range(1, 41))
    assert losses == pytest.approx(expected, rel=1e-3)
    a, b = weights(whole), weights(killed)
    assert a.keys() == b.keys()
    for name in a:
        torch.testing.assert_close(b[name], a[name], atol=1e-4, rtol=1e-3, msg=name)
    # reload in bf16 on the GPU: the fp32 model's predictions, within bf16 rounding
    ids, mask = padded_batch()
    fp32 = AutoModelForMaskedLM.from_pretrained(killed).cuda().eval()
    bf16 = AutoModelForMaskedLM.from_pretrained(killed, dtype=torch.bfloat16).cuda().eval()
    assert bf16.dtype == torch.bfloat16
    with torch.no_grad():
        reference = fp32(ids.cuda(), attention_mask=mask.cuda()).logits.float()
        got = bf16(ids.cuda(), attention_mask=mask.cuda()).logits.float()
    real = mask.bool().cuda()
    agreement = (got[real].argmax(-1) == reference[real].argmax(-1)).float().mean().item()
    assert agreement >= 0.9, agreement
    torch.testing.assert_close(got[real], reference[real], atol=0.15, rtol=0.05)


@two_gpus
def test_ddp_with_the_multi_gpu_config(tmp_path, corpus):
    out = tmp_path / "ddp"
    proc = run(
        pretrain_cmd(
            corpus,
            out,
            "--max_train_steps",
            "4",
            launcher=launch(CONFIGS / "multi_gpu_ddp.yaml", "--num_processes", "2"),
        )
    )
    assert "Processes = 2, mixed precision = bf16" in proc.stdout
    _, info = AutoModelForMaskedLM.from_pretrained(out, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]


@two_gpus
def test_fsdp_trains_checkpoints_resumes_and_exports_the_unsharded_model(tmp_path, corpus):
    """FSDP2 with the shipped configuration (full shard, one unit per encoder layer, sharded checkpoints), in float32
    so that a resumed run can be compared with the uninterrupted one."""
    launcher = launch(CONFIGS / "fsdp.yaml", "--num_processes", "2", "--mixed_precision", "no")
    common = ("--max_train_steps", "6", "--checkpointing_steps", "3", "--config_overrides", TINY)
    full = tmp_path / "full"
    proc = run(pretrain_cmd(corpus, full, *common, launcher=launcher))
    assert "Processes = 2" in proc.stdout
    shards = list((full / "checkpoints" / "step_3").glob("pytorch_model_fsdp_0*"))
    assert shards, "the checkpoint is not sharded"
    resumed = tmp_path / "resumed"
    checkpoint = ("--resume_from_checkpoint", str(full / "checkpoints" / "step_3"))
    run(pretrain_cmd(corpus, resumed, *common, *checkpoint, launcher=launcher))
    a, b = weights(full), weights(resumed)
    assert a.keys() == b.keys()
    for name in a:
        torch.testing.assert_close(b[name], a[name], atol=1e-6, rtol=1e-5, msg=name)
    # the exported folder is the plain model: it loads without FSDP, and its config's auto_map is ours
    model = AutoModelForMaskedLM.from_pretrained(full)
    assert type(model).__name__ == "SinusoidalEncoderForMaskedLM"
    assert not list(full.glob("_fsdp*.py"))
    # and equals the last sharded checkpoint, merged by accelerate
    merged = tmp_path / "merged"
    subprocess.run(
        [*ACCELERATE, "merge-weights", str(full / "checkpoints" / "step_6" / "pytorch_model_fsdp_0"), str(merged)],
        check=True,
        env=env(),
        timeout=600,
    )
    last = load_file(str(next(merged.glob("*.safetensors"))))
    shared = set(last) & set(a)
    assert shared >= {name for name in a if not name.startswith("lm_head.decoder")}
    for name in shared:
        assert torch.equal(last[name], a[name]), name


def test_an_algorithmic_run_trains_on_cuda_and_resumes_after_a_kill(tmp_path, monkeypatch):
    """`benchmarks.algorithmic.run --device cuda`: the randomized arm (positions drawn on the GPU) killed after
    step 5 resumes from its step-4 checkpoint (the GPU's RNG state included) to the uninterrupted run's result, up
    to the GPU's nondeterministic kernels; its kept weights load without a GPU."""
    from test_algorithmic_benchmark import _tiny_settings, kill_then_resume

    from benchmarks.algorithmic import run

    settings = _tiny_settings("randomized")
    whole = run.train_run(settings, tmp_path / "whole", tmp_path / "ck-whole", device="cuda")
    resumed = kill_then_resume(settings, tmp_path, monkeypatch, device="cuda")
    assert resumed["device"] == torch.cuda.get_device_name(0)
    torch.testing.assert_close(
        [p["train_loss"] for p in resumed["curve"]], [p["train_loss"] for p in whole["curve"]], rtol=1e-4, atol=1e-5
    )
    for n, score in whole["lengths"].items():
        assert abs(resumed["lengths"][n]["accuracy"] - score["accuracy"]) <= 0.02, n
    kept = torch.load(tmp_path / "ck" / "reverse_string" / "randomized-seed0" / "model.pt", weights_only=False)
    assert all(tensor.device.type == "cpu" for tensor in kept["model"].values())
