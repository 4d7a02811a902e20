"""What the sinusoidal encoding costs next to one encoder layer (CPU, the paper's base dimensions).

    python -m benchmarks.encoding_cost.run

Prints the median time of one encoder layer forward and of the encoding for default positions `(1, T)` (what
every forward without `position_ids` computes) and for explicit `position_ids` of shape `(B, T)`.
"""

from __future__ import annotations

import statistics
import time

import torch

import sinusoidal_encoder as se
from sinusoidal_encoder import sinusoidal_position_encoding
from sinusoidal_encoder.modeling_sinusoidal_encoder import SinusoidalEncoderLayer


def median_ms(fn, repeats: int = 7) -> float:
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def main() -> None:
    config = se.SinusoidalEncoderConfig()
    config._attn_implementation = "sdpa"
    layer = SinusoidalEncoderLayer(config).eval()
    batch, length, dim = 16, 512, config.hidden_size
    hidden = torch.randn(batch, length, dim)
    one = torch.arange(length).unsqueeze(0)
    every = torch.arange(length).repeat(batch, 1)
    with torch.inference_mode():
        t_layer = median_ms(lambda: layer(hidden))
        t_one = median_ms(lambda: sinusoidal_position_encoding(one, dim))
        t_every = median_ms(lambda: sinusoidal_position_encoding(every, dim))
    print(f"batch {batch} × {length}, d = {dim}, {torch.get_num_threads()} threads")
    print(f"one encoder layer:                    {t_layer:8.2f} ms")
    print(f"encoding, default positions (1, T):   {t_one:8.2f} ms  ({t_one / t_layer:.2%} of a layer)")
    print(f"encoding, explicit position_ids (B, T): {t_every:6.2f} ms  ({t_every / t_layer:.2%} of a layer)")


if __name__ == "__main__":
    main()
