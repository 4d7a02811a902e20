"""`python training/distill.py --help`, in a checkout: the command line of
`sinusoidal_encoder_training.stages.distillation` (installed: `sinusoidal-encoder-distill`),
through the same entry as the console script (`sinusoidal_encoder_training.cli.console`)."""

from sinusoidal_encoder_training.cli.console import distill

if __name__ == "__main__":
    distill()
