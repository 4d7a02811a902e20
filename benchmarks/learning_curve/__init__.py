"""The learning curve of a pretraining run: eval loss, unigram baseline and order gap against tokens seen, from the
run's metrics.jsonl (`python -m benchmarks.learning_curve.run FOLDER`; results.md and results.png).
"""
