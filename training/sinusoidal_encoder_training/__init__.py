"""The training library of sinusoidal-encoder: masked-LM pretraining, fine-tuning, tokenizer training, export.

The tree is the table of contents (docs/layout.md lists every module): `cli` (the command-line front and the table
of commands), `configs` (the run configuration of every command, a module each), `data` (corpora in, masked batches
out), `runs` (the training loop in its phases and the run's folder), `tasks` (the task table and the fine-tuning
recipes), `evaluation` (masked-LM evaluation and the tasks' metrics, as a library), `stages` (what each command
runs: pretraining, fine-tuning, evaluation, tokenizer training, fill-mask, distillation) and `publishing` (the
exported folder, its model card, ONNX, the Hub). Imports run one way, from `cli` and `stages` down to `runs`, `data`
and `configs`. A stage's module holds its function (`pretrain(config)`) and its command (`run(config)`, which the
console script `sinusoidal-encoder-pretrain`, `python -m sinusoidal_encoder_training pretrain` and
`training/pretrain.py` call once `cli.console` has parsed the flags).

`SHIPPED_TOKENIZER` is the folder of the tokenizer the package ships, installed or in a checkout:
`AutoTokenizer.from_pretrained(SHIPPED_TOKENIZER)`. Importing this package imports nothing else.
"""

from sinusoidal_encoder_training.resources import SHIPPED_TOKENIZER

__all__ = ["SHIPPED_TOKENIZER"]
