"""The ledger: session entries and memory records, their ids and token estimates, the pure fold
of a branch into observations and reflections, and the projection of what is visible."""
