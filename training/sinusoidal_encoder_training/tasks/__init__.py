"""The tasks a model folder can be made for: the table (`registry`, which imports nothing but the standard library)
and the fine-tuning recipe of each task family (`classification`, `question_answering`, `multiple_choice`)."""
