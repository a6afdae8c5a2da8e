"""Alembic migrations of the store, shipped in the package (see ``om_workers.store.migrate``)."""
