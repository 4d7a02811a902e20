"""`python training/pretrain.py --help`, in a checkout: the command line of
`sinusoidal_encoder_training.pretraining` (installed: `sinusoidal-encoder-pretrain`)."""

from sinusoidal_encoder_training.pretraining import cli

if __name__ == "__main__":
    cli()
