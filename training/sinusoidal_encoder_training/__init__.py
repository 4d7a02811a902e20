"""The training library of sinusoidal-encoder: masked-LM pretraining, fine-tuning, tokenizer training, export.

One job per module: `loop` (the accelerate training loop), `checkpoints`, `optimization`, `metrics_log`, `data` and
`corpus` (datasets, packing, masking), `configs` (the run configuration of every command), `arguments` (the command
lines made from them), `pretraining` and `finetuning` (the stages), `export`, `model_card`, `plots`, `hub`,
`onnx_export`, `tokenizer_training`, `fill_mask`. A stage's module holds its function (`pretrain(config)`) and its
command (`run(config)`, which the console script `sinusoidal-encoder-pretrain` and `training/pretrain.py` call once
`console.py` has parsed the flags; `main` for `python -m sinusoidal_encoder_training.pretraining`).

`SHIPPED_TOKENIZER` is the folder of the tokenizer the package ships, installed or in a checkout:
`AutoTokenizer.from_pretrained(SHIPPED_TOKENIZER)`. Importing this package imports nothing else.
"""

from .resources import SHIPPED_TOKENIZER

__all__ = ["SHIPPED_TOKENIZER"]
