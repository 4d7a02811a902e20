"""`python training/export_onnx.py --help`, in a checkout: the command line of
`sinusoidal_encoder_training.onnx_export` (installed: `sinusoidal-encoder-export-onnx`)."""

from sinusoidal_encoder_training.onnx_export import cli

if __name__ == "__main__":
    cli()
