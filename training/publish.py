"""`python training/publish.py --help`, in a checkout: the command line of
`sinusoidal_encoder_training.hub` (installed: `sinusoidal-encoder-publish`)."""

from sinusoidal_encoder_training.hub import cli

if __name__ == "__main__":
    cli()
