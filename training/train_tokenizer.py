"""`python training/train_tokenizer.py --help`, in a checkout: the command line of
`sinusoidal_encoder_training.stages.tokenizer_training` (installed: `sinusoidal-encoder-train-tokenizer`),
through the same entry as the console script (`sinusoidal_encoder_training.cli.console`)."""

from sinusoidal_encoder_training.cli.console import train_tokenizer

if __name__ == "__main__":
    train_tokenizer()
