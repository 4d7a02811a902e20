"""Data in: the built-in offline corpus (`corpus`), local data files checked before any work with the standard library
alone (`files`), the pipeline from a corpus to packed blocks and tokenised splits (`pipeline`: loading from the Hub,
files, a stream or the built-in corpus; tokenisation, packing), and the batches read from them (`batches`: a batch's
rows at once, keyed masking, the collators)."""
