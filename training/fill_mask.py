"""`python training/fill_mask.py --help`, in a checkout: the command line of
`sinusoidal_encoder_training.stages.fill_mask` (installed: `sinusoidal-encoder-fill-mask`),
through the same entry as the console script (`sinusoidal_encoder_training.cli.console`)."""

from sinusoidal_encoder_training.cli.console import fill_mask

if __name__ == "__main__":
    fill_mask()
