"""`python training/pretrain.py --help`, in a checkout: the command line of
`sinusoidal_encoder_training.stages.pretraining` (installed: `sinusoidal-encoder-pretrain`),
through the same entry as the console script (`sinusoidal_encoder_training.cli.console`)."""

from sinusoidal_encoder_training.cli.console import pretrain

if __name__ == "__main__":
    pretrain()
