"""The training library of sinusoidal-encoder: masked-LM pretraining, fine-tuning, tokenizer training, export.

One job per module: `loop` (the accelerate training loop), `checkpoints`, `optimization`, `metrics_log`, `data` and
`corpus` (datasets, packing, masking), `arguments` (run configurations and the command lines made from them),
`pretraining` and `finetuning` (the stages), `export`, `model_card`, `plots`, `hub`, `onnx_export`,
`tokenizer_training`, `fill_mask`. A stage's module holds its run configuration, its function (`pretrain(config)`)
and its command line (`main`: `python -m sinusoidal_encoder_training.pretraining`, the console script
`sinusoidal-encoder-pretrain`, or `training/pretrain.py` in a checkout).

`SHIPPED_TOKENIZER` is the folder of the tokenizer the package ships, installed or in a checkout:
`AutoTokenizer.from_pretrained(SHIPPED_TOKENIZER)`. Importing this package imports nothing else.
"""

from .resources import SHIPPED_TOKENIZER

__all__ = ["SHIPPED_TOKENIZER"]
