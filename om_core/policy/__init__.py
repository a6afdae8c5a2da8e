"""Policies: worker limits and hard caps, exact-value redaction, retry backoff, rate limits,
fair queueing across tenants and webhook signing. Pure rules, each tested with tables."""
