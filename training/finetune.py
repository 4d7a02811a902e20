"""`python training/finetune.py --help`, in a checkout: the command line of
`sinusoidal_encoder_training.stages.finetuning` (installed: `sinusoidal-encoder-finetune`),
through the same entry as the console script (`sinusoidal_encoder_training.cli.console`)."""

from sinusoidal_encoder_training.cli.console import finetune

if __name__ == "__main__":
    finetune()
