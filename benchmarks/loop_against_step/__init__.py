"""The training loop against its bare step: how much of the step's speed the real pretraining loop keeps
(`python -m benchmarks.loop_against_step.run`; results in loop-against-step.md and .json).
"""
