"""Sentence embeddings: does an exported folder, loaded with sentence-transformers, score a sentence higher against
its paraphrase than against an unrelated sentence, on a hand-checked set
(`python -m benchmarks.sentence_embeddings.run`; the recorded runs in results.jsonl).
"""
