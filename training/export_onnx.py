"""`python training/export_onnx.py --help`, in a checkout: the command line of
`sinusoidal_encoder_training.publishing.onnx_export` (installed: `sinusoidal-encoder-export-onnx`),
through the same entry as the console script (`sinusoidal_encoder_training.cli.console`)."""

from sinusoidal_encoder_training.cli.console import export_onnx

if __name__ == "__main__":
    export_onnx()
