"""Which pretraining recipe makes a small model use word order on a CPU budget: arms of training/pretrain.py on the
built-in corpus, scored by eval loss, unigram baseline and order gap (`python -m benchmarks.order_recipe.run`;
the table in results.md).
"""
