"""How long attention takes to learn position, by sequence length, on a toy where only order helps
(`python -m benchmarks.position_toy.run`; the table in results.md).
"""
