"""What the sinusoidal encoding costs next to one encoder layer on a CPU, at the paper's base dimensions
(`python -m benchmarks.encoding_cost.run`, which prints its timings).
"""
