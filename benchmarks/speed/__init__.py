"""Speed of the sinusoidal encoder against transformers' BERT of identical size on a CPU: training steps, inference
(dense and padded batches) and peak memory, eager and compiled, each model in a worker process of its own and the two
timed alternately (`python -m benchmarks.speed.run`; results in results-<size>.md).
"""
