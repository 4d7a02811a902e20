"""Shared fixtures: tiny configs (hidden 32, 2 layers) so the whole suite runs in minutes on 2 CPU cores."""

from __future__ import annotations

import atexit
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
WORKER = os.environ.get("PYTEST_XDIST_WORKER")  # under pytest-xdist (`scripts/test.sh` runs two): "gw0", "gw1", ...
# a scratch folder of this process, removed when it ends: the temporary folder of the processes the tests start (what
# they leave, such as torch's `torchelastic_*` launch logs, goes with it). Made in the machine's temporary folder, as
# pytest-xdist's workers' are beside their controller's, not in it: a nested path left too little room for the Unix
# sockets through which DataLoader workers hand their batches over (runs/accelerator.py, `check_worker_handover`)
TEMPORARY_ROOT = os.environ.setdefault("SINUSOIDAL_ENCODER_TESTS_TEMPORARY_ROOT", tempfile.gettempdir())
SCRATCH = tempfile.mkdtemp(prefix=f"sinusoidal-encoder-tests-{WORKER or 'main'}-", dir=TEMPORARY_ROOT)
atexit.register(shutil.rmtree, SCRATCH, ignore_errors=True)
os.environ["TMPDIR"] = SCRATCH
if WORKER:
    # one thread per worker (the workers share the cores), and a code cache of its own for `trust_remote_code`
    # (transformers copies a model's code there; two workers writing one cache could race)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("HF_MODULES_CACHE", os.path.join(SCRATCH, "hf-modules"))

import pytest  # noqa: E402  (after the environment that transformers reads at import)
import torch  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

import sinusoidal_encoder as se  # noqa: E402

if WORKER:
    torch.set_num_threads(1)

# Test modules whose tests share a costly module-scoped fixture (a training run, an environment, an export): under
# pytest-xdist all the tests of each go to one worker, which makes the fixture once; every other test is sent on its
# own. (What xdist's `--dist loadgroup` does from `xdist_group` marks, which pytest 9.2 ignores: pytest-xdist#1386.)
ONE_WORKER_MODULES = (
    "tests/lab/test_deployment.py",  # `run`: a deployment benchmark of ours and BERT
    "tests/model/test_serving.py",  # `folders`: exports for Infinity and Optimum
    "tests/repository/test_packaging.py",  # `wheel`, `installed`: a built wheel in a fresh environment
    "tests/training/runs/test_fsdp_cpu.py",  # `runs`: sharded two-process runs
    "tests/training/stages/test_model_evaluation.py",  # `pretrained_run`
    "tests/training/stages/test_sentence_embeddings.py",  # `distilled`: a distillation, killed and resumed
)


def pytest_xdist_make_scheduler(config, log):
    """xdist's default scheduling (`--dist load`, each test on its own), but for the modules of ONE_WORKER_MODULES,
    each one unit of work; those go first (xdist's scheduler starts with the largest units)."""
    if config.getvalue("dist") != "load":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class OneWorkerModules(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return module if module in ONE_WORKER_MODULES else nodeid

    return OneWorkerModules(config, log)


def pytest_collection_modifyitems(config, items):
    """Under pytest-xdist, the slow tier first (in their order, then the rest in theirs): the workers' collection is
    the order the scheduler sends its units in, so the last ones are quick tests that even out the two workers'
    ends, rather than a run of a minute on one worker while the other has nothing left."""
    if WORKER:
        items.sort(key=lambda item: item.get_closest_marker("slow") is None)


aten = torch.ops.aten

VOCAB_SIZE = 99


class HostReads(TorchDispatchMode):
    """Counts the operators that make the host wait for the device where it is a GPU (`reads`): a value read
    (`.item()`, `int()`), `nonzero`, `masked_select` and a boolean index, whose sizes only the device knows; and a
    tensor made of host values (`torch.tensor`, `torch.as_tensor`), whose copy to the device waits for its queued work
    (`aten.lift_fresh`). While `paused` it counts nothing (a caller's code it does not check)."""

    def __init__(self):
        super().__init__()
        self.reads = []
        self.paused = False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        waits = func in (aten._local_scalar_dense.default, aten.nonzero.default, aten.masked_select.default)
        waits = waits or func is aten.lift_fresh.default
        if func is aten.index.Tensor:
            waits = any(index is not None and index.dtype == torch.bool for index in args[1])
        if waits and not self.paused:
            self.reads.append(func.__name__)
        return func(*args, **kwargs)


def tiny_config(**overrides) -> se.SinusoidalEncoderConfig:
    values = dict(
        vocab_size=VOCAB_SIZE,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=64,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    values.update(overrides)
    return se.SinusoidalEncoderConfig(**values)


def random_ids(batch: int, length: int, seed: int = 0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(1, VOCAB_SIZE, (batch, length), generator=generator)


def padded_batch() -> tuple[torch.Tensor, torch.Tensor]:
    """4 rows of 12 random ids, three of them right-padded (to 7, 3 and 7 real tokens), and their mask."""
    ids = random_ids(4, 12)
    mask = torch.ones_like(ids)
    mask[1, 7:] = 0
    mask[2, 3:] = 0
    mask[3, 7:] = 0
    return ids, mask


def assert_rows_match_alone(model, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Each row of a padded batch gives, on its real tokens, the hidden states of the row run alone unpadded;
    returns the batch's hidden states."""
    with torch.no_grad():
        batched = model(ids, attention_mask=mask).last_hidden_state
        for row in range(ids.shape[0]):
            length = int(mask[row].sum())
            alone = model(ids[row : row + 1, :length]).last_hidden_state
            torch.testing.assert_close(batched[row, :length], alone[0], atol=1e-5, rtol=1e-5)
    return batched


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


REPO = Path(__file__).resolve().parents[1]
SHIPPED_TOKENIZER = REPO / "tokenizer_config"

# The tests lie in folders by what they test (docs/layout.md): tests/model, tests/training (its folders the training
# package's subpackages), tests/lab and tests/repository; none is a package, so pytest imports each file by its name
# (the names are unique: tests/repository/test_test_groups.py). With every folder on the path, a file takes another's
# helpers by that name from any folder (`from test_docs import fenced_blocks`), and a single file run alone too.
TEST_FOLDERS = sorted({path.parent for path in Path(__file__).parent.rglob("test_*.py")})
sys.path.extend(str(folder) for folder in TEST_FOLDERS if str(folder) not in sys.path)


@pytest.fixture(scope="session")
def tokenizer():
    """The tokenizer the repository ships (trained on the built-in corpus by training/train_tokenizer.py)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(SHIPPED_TOKENIZER)


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory, tokenizer):
    """A tiny masked-LM folder with the shipped tokenizer, as pretrain.py would leave it."""
    folder = tmp_path_factory.mktemp("pretrained")
    config = tiny_config(vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id)
    se.SinusoidalEncoderForMaskedLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


def write_text_corpus(folder: Path, n_train: int = 40, n_validation: int = 12) -> tuple[Path, Path]:
    """Small train/validation .txt files of real text (Python documentation topics, one per line)."""
    from pydoc_data.topics import topics

    docs = [" ".join(text.split()) for _, text in sorted(topics.items())]
    folder.mkdir(parents=True, exist_ok=True)
    train, validation = folder / "train.txt", folder / "validation.txt"
    train.write_text("\n".join(docs[:n_train]) + "\n")
    validation.write_text("\n".join(docs[n_train : n_train + n_validation]) + "\n")
    return train, validation


PRETRAIN = str(REPO / "training" / "pretrain.py")
# two processes of one machine under accelerate launch (gloo on the CPU with ACCELERATE_USE_CPU=1), no precision
# or compilation of accelerate's config, a free port
TWO_PROCESSES = (
    *(str(Path(sys.executable).with_name("accelerate")), "launch", "--multi_gpu", "--num_processes", "2"),
    *("--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", "0"),
)
TINY = "hidden_size=32,num_hidden_layers=2,num_attention_heads=4,intermediate_size=64"


def pretrain_cmd(corpus, output_dir, *extra, launcher=()):
    """training/pretrain.py on a (train, validation) pair of files with the tiny model; `extra` flags come last, so
    they override these."""
    train, validation = corpus
    return [
        *(launcher or [sys.executable]),
        PRETRAIN,
        "--train_file",
        str(train),
        "--validation_file",
        str(validation),
        "--config_name",
        "tiny",
        "--config_overrides",
        TINY,
        "--max_seq_length",
        "32",
        "--per_device_train_batch_size",
        "8",
        "--per_device_eval_batch_size",
        "16",
        "--logging_steps",
        "1",
        "--output_dir",
        str(output_dir),
        *extra,
    ]


def tiny_pretraining(corpus, output_dir, **settings):
    """The run of `pretrain_cmd`, built in code: a `PretrainingConfig` of the tiny model on a (train, validation)
    pair of files; `settings` override these."""
    from sinusoidal_encoder_training.stages.pretraining import PretrainingConfig

    train, validation = corpus
    values = dict(
        train_file=str(train),
        validation_file=str(validation),
        config_name="tiny",
        config_overrides=TINY,
        max_seq_length=32,
        per_device_train_batch_size=8,
        per_device_eval_batch_size=16,
        logging_steps=1,
        output_dir=str(output_dir),
    )
    return PretrainingConfig(**{**values, **settings})


def env(**extra):
    return {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1", **extra}


def run(cmd, **extra_env):
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env(**extra_env))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    return proc


def metrics(output_dir):
    return [json.loads(line) for line in (Path(output_dir) / "metrics.jsonl").read_text().splitlines()]


def assert_same_training(a: list[dict], b: list[dict]) -> None:
    """Two metrics logs of the same steps agree: losses and learning rates within float rounding, the standard
    errors of the evaluation's differences (each validation block one sample, whichever process scored it) to
    0.1%, and every validation block counted once in both."""
    assert [m["step"] for m in a] == [m["step"] for m in b]
    for x, y in zip(a, b, strict=True):
        for key in ("train_loss", "eval_loss", "learning_rate"):
            if key in x:
                assert y[key] == pytest.approx(x[key], rel=1e-4), (x["step"], key)
        for key in ("eval_unigram_margin_stderr", "eval_order_gap_stderr"):
            if key in x:
                assert y[key] == pytest.approx(x[key], rel=1e-3), (x["step"], key)
        if "eval_masked_tokens" in x:  # every validation block counted once, none twice
            assert x["eval_masked_tokens"] == y["eval_masked_tokens"]


def run_command(main, program: str, argv, monkeypatch, capsys) -> tuple[int, str, str]:
    """`training/PROGRAM ARGV` in-process: the command's `main` behind the command-line front
    (`command_line.front`). Returns (exit status, stdout, stderr)."""
    from sinusoidal_encoder_training.cli.command_line import front

    monkeypatch.delenv("SINUSOIDAL_ENCODER_DEBUG", raising=False)
    monkeypatch.setattr(sys, "argv", [program, *map(str, argv)])
    capsys.readouterr()  # what came before
    try:
        with front():
            main()
        status = 0
    except SystemExit as stopped:
        status = stopped.code
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def run_command_afresh(main, program: str, argv, monkeypatch, capsys) -> tuple[int, str, str]:
    """`run_command` with accelerate's state reset before and after, as a new process would start it: a whole run
    in-process, unaffected by an earlier in-process run's settings, leaving none to later ones."""
    from accelerate.state import AcceleratorState

    AcceleratorState._reset_state(reset_partial_state=True)
    try:
        return run_command(main, program, argv, monkeypatch, capsys)
    finally:
        AcceleratorState._reset_state(reset_partial_state=True)


class FakeHfApi:
    """Stands in for huggingface_hub's `HfApi` offline: `whoami` answers for `user` (member of `orgs`, a token of
    `role`) or raises `fail_whoami`; `create_repo` and `create_commit` are recorded in `calls`, and the committed
    files' contents in `uploaded` ({path in repo: bytes}); `create_commit` raises `fail_commit` when set."""

    def __init__(self, user="me", orgs=(), role="write", fail_whoami=None, fail_commit=None):
        self.user, self.orgs, self.role = user, orgs, role
        self.fail_whoami, self.fail_commit = fail_whoami, fail_commit
        self.calls, self.uploaded = [], {}

    def __call__(self, *args, **kwargs):  # monkeypatched in for the class: `HfApi()` gives this instance
        return self

    def whoami(self, token=None, **kwargs):
        if self.fail_whoami is not None:
            raise self.fail_whoami
        orgs = [{"name": name} for name in self.orgs]
        return {"name": self.user, "orgs": orgs, "auth": {"accessToken": {"role": self.role}}}

    def create_repo(self, repo_id, private=False, exist_ok=False, **kwargs):
        self.calls.append(("create_repo", repo_id, private, exist_ok))

    def create_commit(self, repo_id, operations, commit_message=None, **kwargs):
        self.calls.append(("create_commit", repo_id, commit_message))
        if self.fail_commit is not None:
            raise self.fail_commit
        for operation in operations:
            content = operation.path_or_fileobj
            self.uploaded[operation.path_in_repo] = (
                content if isinstance(content, bytes) else Path(content).read_bytes()
            )
        return f"https://huggingface.co/{repo_id}/commit/fake"


def folder_digest(folder) -> dict[str, str]:
    """{relative path: sha256} of every file under `folder`: to show that a command left it as it was."""
    import hashlib

    root = Path(folder)
    return {
        str(path.relative_to(root)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(root.rglob("*"))
        if path.is_file()
    }


# the exported folders of `exported_folder`: a head and the text of its pipeline example
VARIANTS = {
    "fill-mask": ("SinusoidalEncoderForMaskedLM", "The function returns a [MASK] of positions."),
    "text-classification": ("SinusoidalEncoderForSequenceClassification", "A passage to classify."),
    "question-answering": ("SinusoidalEncoderForQuestionAnswering", None),  # no pipeline in transformers 5
    "multiple-choice": ("SinusoidalEncoderForMultipleChoice", None),
}


def exported_folder(tmp_path, tokenizer, pipeline_tag: str) -> Path:
    """A tiny randomly initialised model with the shipped tokenizer and a model card naming the folder (no Hub id),
    as an export leaves it: `tmp_path/exported`."""
    from sinusoidal_encoder_training.publishing.model_card import model_reference, pipeline_example, render_model_card

    class_name, text = VARIANTS[pipeline_tag]
    folder = tmp_path / "exported"
    config = tiny_config(vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id, num_labels=2)
    model = getattr(se, class_name)(config)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    render_model_card(
        model,
        str(folder),
        pipeline_tag=pipeline_tag,
        training_data="The built-in corpus.",
        training_procedure="A few steps.",
        metrics={"loss": 1.0},
        usage_example=pipeline_example(pipeline_tag, model_reference(str(folder), None), text),
    )
    return folder
