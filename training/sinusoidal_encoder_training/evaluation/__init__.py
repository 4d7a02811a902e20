"""Evaluation as a library, called by the training loop, the evaluate command and the lab: masked-LM scores on masked
blocks (`masked_lm`: loss, perplexity, order gap, unigram baseline), the tasks' metrics (`metrics`) and the
hand-checked sentence-similarity set (`similarity`)."""
