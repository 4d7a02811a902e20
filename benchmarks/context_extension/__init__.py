"""Context extension: each arm of the length study continued briefly at 512 tokens, beside the same arm trained at 512
tokens from the start on as many tokens (`python -m benchmarks.context_extension.run`; results in results.md and
results.json).
"""
