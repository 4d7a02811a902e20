"""`python training/train_tokenizer.py --help`, in a checkout: the command line of
`sinusoidal_encoder_training.tokenizer_training` (installed: `sinusoidal-encoder-train-tokenizer`)."""

from sinusoidal_encoder_training.tokenizer_training import cli

if __name__ == "__main__":
    cli()
