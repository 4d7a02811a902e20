"""Algorithmic length generalisation (Ruoss et al. 2023; Delétang et al. 2023): tasks that need position.

tasks.py     the task generators (Reverse String, Duplicate String, Odds First, Bucket Sort)
arms.py      the models compared: ours and its remedies, no position encoding, BERT's learned positions
run.py       training and evaluation of (task, arm, seed) runs, resumable; the command line
records.py   a study's finished runs, one JSON Lines file (<study folder>/results.jsonl): append and load
report.py    the table and plot of the finished runs, beside the paper's Table 1
"""
