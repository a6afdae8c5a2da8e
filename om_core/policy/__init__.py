"""Policies: worker limits and hard caps, exact-value redaction, retry backoff, rate limits,
fair queueing across tenants, webhook signing and the metadata key naming a session's
subject. Pure rules, each tested with tables."""
