"""Serving the encoder on a CPU: PyTorch fp32 and bf16, ONNX Runtime fp32 and int8, each against BERT of the same
shape on the same path, and what each path costs in accuracy (`python -m benchmarks.deployment.run`; results in
results.md and results.json).
"""
