"""The fine-tuning gap: the built-in downstream task fine-tuned from the main job's model against a TF-IDF baseline,
and what closes the gap (`python -m benchmarks.finetuning_gap.run` records a finished `scripts/finetune.sh` run;
the shipped run in builtin.json, every run in results.jsonl).
"""
