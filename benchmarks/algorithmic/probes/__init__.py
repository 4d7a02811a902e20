"""Single-seed probes behind choices of the algorithmic benchmark; each module trains when run."""
