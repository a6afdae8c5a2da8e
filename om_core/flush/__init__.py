"""The flush: the memory unit of work, the runtime that runs observe, reflect, drop and bind,
the memory workers behind the Provider port, compaction, revocation and the in-process attach."""
