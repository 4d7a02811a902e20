"""The length study: every way of giving positions pretrained at an equal budget and evaluated at the training length
and past it, with the order gap and fine-tuning of every seed (`python -m benchmarks.length_generalization.run`;
results in results.md and results.json, pictures and the twice-the-budget runs beside them, the pilot of the paper's
encoding and its remedies in paper_encoding_pilot/).
"""
