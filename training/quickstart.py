"""Build a small sinusoidal encoder, save it as a Hub-ready folder, and load it back through AutoModel.

python training/quickstart.py --output_dir outputs/quickstart
"""

from __future__ import annotations

import argparse
import os

import torch
from transformers import AutoModel, AutoModelForMaskedLM

import sinusoidal_encoder as se


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output_dir", default="outputs/quickstart", help="Where the model folder is written.")
    parser.add_argument("--seed", type=int, default=0, help="Seed of the random initialisation.")
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    torch.manual_seed(args.seed)
    config = se.SinusoidalEncoderConfig(
        vocab_size=1000, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=256
    )
    model = AutoModelForMaskedLM.from_config(config).eval()
    print(f"built {type(model).__name__}: {model.num_parameters():,} parameters")
    model.save_pretrained(args.output_dir)
    print(f"saved to {args.output_dir}: {', '.join(sorted(os.listdir(args.output_dir)))}")

    ids = torch.randint(1, 1000, (2, 16))
    with torch.no_grad():
        logits = model(ids).logits
        reloaded = AutoModelForMaskedLM.from_pretrained(args.output_dir).eval()
        same = torch.equal(reloaded(ids).logits, logits)
        encoder = AutoModel.from_pretrained(args.output_dir).eval()
        long_ids = torch.randint(1, 1000, (1, 4 * config.max_position_embeddings))
        hidden = encoder(long_ids).last_hidden_state
    print(f"reloaded with AutoModelForMaskedLM: identical logits = {same}")
    print(f"AutoModel ran {long_ids.shape[1]} tokens (4x max_position_embeddings): output {tuple(hidden.shape)}")
    if not same:
        raise SystemExit("the reloaded model differs from the saved one")


if __name__ == "__main__":
    main()
