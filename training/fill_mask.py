"""`python training/fill_mask.py --help`, in a checkout: the command line of
`sinusoidal_encoder_training.fill_mask` (installed: `sinusoidal-encoder-fill-mask`)."""

from sinusoidal_encoder_training.fill_mask import cli

if __name__ == "__main__":
    cli()
