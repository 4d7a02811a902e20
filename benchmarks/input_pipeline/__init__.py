"""The input pipeline alone: tokens/s from a packed `datasets` dataset to a masked-LM batch on one CPU thread,
against the per-row way, and the fine-tuning batches (`python -m benchmarks.input_pipeline.run`; results in
input-pipeline.md and .json).
"""
