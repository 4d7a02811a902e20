"""`python training/finetune.py --help`, in a checkout: the command line of
`sinusoidal_encoder_training.finetuning` (installed: `sinusoidal-encoder-finetune`)."""

from sinusoidal_encoder_training.finetuning import cli

if __name__ == "__main__":
    cli()
