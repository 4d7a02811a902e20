"""The stages the commands run, one module each, each with its function and its command (`run(config)`):
`pretraining`, `finetuning`, `evaluate`, `tokenizer_training`, `fill_mask`, `distillation`."""
