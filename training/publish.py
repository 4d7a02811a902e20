"""`python training/publish.py --help`, in a checkout: the command line of
`sinusoidal_encoder_training.publishing.hub` (installed: `sinusoidal-encoder-publish`),
through the same entry as the console script (`sinusoidal_encoder_training.cli.console`)."""

from sinusoidal_encoder_training.cli.console import publish

if __name__ == "__main__":
    publish()
