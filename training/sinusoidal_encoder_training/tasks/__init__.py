"""The tasks a model folder can be made for: one package per task (or family of tasks), each declaring its entries
and task-data flags in its `__init__.py` (standard library only) and fine-tuning them in its `recipe.py`; the table
that gathers them (`registry`), what an entry is (`task`), and what the recipes share (`recipes`)."""
