"""Policies: worker limits and hard caps, exact-value redaction, retry backoff, rate limits and
fair queueing across tenants. Pure rules, each tested with tables."""
