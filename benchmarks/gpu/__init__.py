"""The encoder against BERT of the same shape on one CUDA GPU: bf16 training and inference, eager and compiled, with
model-FLOPs utilisation against the GEMM peak measured in the same run (`python -m benchmarks.gpu.run`, run with the
single-GPU tests by `bash scripts/test_gpu.sh`; the committed results of that command are in this folder).
"""
