"""Observational memory, pure core: models, fold, projection, context, recall, compaction.

Nothing here does I/O: every function is a pure function of the entries it is given.
"""
