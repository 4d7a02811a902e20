"""How close the encoder runs to the machine's limit on a CPU: useful-work model-FLOPs utilisation of training and
inference in fp32 and bf16, eager and compiled, against BERT of the same shape (`python -m benchmarks.utilization.run`;
results in results.md and results.json, per-op profiles in results-profiles.md).
"""
