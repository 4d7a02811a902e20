"""The paper's encoding at its best: the length study's arms that take their positions from the paper's PE(pos) alone
(added, scaled, at every layer, untied in attention, with and without a random training offset) against rotary, two
seeds, with their downstream scores and their cost (README.md)."""
