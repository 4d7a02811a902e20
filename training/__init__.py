"""Training scripts: pretraining, tokenizer training and their shared pieces (`sinusoidal_encoder.training`)."""
