"""Data in: the built-in offline corpus (`corpus`), local data files checked before any work with the standard library
alone (`files`), and the pipeline from a corpus to batches (`pipeline`: loading from the Hub, files, a stream or the
built-in corpus; tokenisation, packing, keyed masking, the collators)."""
