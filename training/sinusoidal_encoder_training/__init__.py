"""The training library of sinusoidal-encoder: masked-LM pretraining, fine-tuning, tokenizer training, export.

One job per module (docs/layout.md lists them all): `commands` (the table of commands), `configs` (the run
configuration of every command, a module each), `arguments` (the command lines made from them), `loop` (the training
loop in its phases) with `accelerator`, `compilation`, `stopping`, `divergence`, `disk_space`, `even_batches`,
`checkpoints`, `optimization`, `metrics_log`; `data`, `data_files` and `corpus` (datasets, packing, masking);
`evaluation` (masked-LM evaluation as a library); `pretraining`, `finetuning` and the evaluate command
`model_evaluation` (the stages); `export`, `model_card`, `plots`, `hub`, `onnx_export`, `tokenizer_training`,
`fill_mask`, `distillation`. A stage's module holds its function (`pretrain(config)`) and its command
(`run(config)`, which the console script `sinusoidal-encoder-pretrain`, `python -m sinusoidal_encoder_training
pretrain` and `training/pretrain.py` call once `console.py` has parsed the flags).

`SHIPPED_TOKENIZER` is the folder of the tokenizer the package ships, installed or in a checkout:
`AutoTokenizer.from_pretrained(SHIPPED_TOKENIZER)`. Importing this package imports nothing else.
"""

from .resources import SHIPPED_TOKENIZER

__all__ = ["SHIPPED_TOKENIZER"]
