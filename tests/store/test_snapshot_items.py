"""The stored snapshot (item rows advanced record by record) always equals the fold.

Random histories of messages, observation, reflection and drop records (replayed ids, unknown
and already dropped ids included), compactions and forks: after every step the store's whole
ledger, its pass view and its unobserved-token count must be what folding the branch gives.
"""

from __future__ import annotations

import random

import pytest
from store_factories import message

from om_core.flush.compaction import ObservationalMemoryCompactionStrategy
from om_core.ledger.fold import fold_ledger, is_eligible_observation_source, unscanned_entries
from om_core.ledger.ids import create_memory_id
from om_core.ledger.models import (
    Observation,
    ObservationsDropped,
    ObservationsRecorded,
    Reflection,
    ReflectionsRecorded,
    SessionEntry,
)
from om_core.ledger.tokens import estimate_entry_tokens
from om_workers.store import SqlStore


def _custom(data: dict[str, object]) -> SessionEntry:
    return SessionEntry(id=create_memory_id(), session_id="s1", kind="custom", data=data)


class _History:
    def __init__(self, store: SqlStore, tenant: str, rng: random.Random) -> None:
        self.store, self.tenant, self.rng = store, tenant, rng
        self.messages: list[str] = []
        self.observations: list[Observation] = []
        self.count = 0

    def step(self) -> None:
        roll = self.rng.random()
        if roll < 0.35 or not self.messages:
            self._messages()
        elif roll < 0.5:
            self._observe()
        elif roll < 0.6:
            self._messages_then_observed()
        elif roll < 0.72:
            self._reflect()
        elif roll < 0.84:
            self._drop()
        elif roll < 0.92:
            self._fork()
        else:
            self._compact()

    def _append(self, *entries: SessionEntry) -> None:
        self.store.append_entries(self.tenant, "s1", list(entries))

    def _messages(self) -> None:
        batch = []
        for _ in range(self.rng.randint(1, 4)):
            self.count += 1
            batch.append(message(f"m{self.count}", text=f"message number {self.count} " * 3))
        self.messages += [e.id for e in batch]
        self._append(*batch)

    def _observe(self) -> None:
        sources = self.rng.sample(self.messages, min(3, len(self.messages)))
        fresh = [
            Observation(id=create_memory_id(), text=f"fact {s}", source_entry_ids=(s,))
            for s in sources
        ]
        replayed = self.rng.sample(self.observations, min(1, len(self.observations)))
        self.observations += fresh
        record = ObservationsRecorded(
            observations=(*fresh, *replayed), covers_up_to_id=self.rng.choice(self.messages)
        )
        self._append(_custom(record.to_json_dict()))

    def _messages_then_observed(self) -> None:
        # One batch: new messages and a record covering up to one of them (or the old leaf), so
        # the unobserved count after the cursor is part batch, part stored rows, or nothing.
        self.count += 2
        batch = [message(f"m{self.count - 1}", text="x " * 7), message(f"m{self.count}", text="y")]
        self.messages += [e.id for e in batch]
        cursor = self.rng.choice(self.messages[-3:])
        sources = [m for m in self.messages[-3:] if m == cursor]
        fresh = [Observation(id=create_memory_id(), text="fact", source_entry_ids=(sources[0],))]
        self.observations += fresh
        record = ObservationsRecorded(observations=tuple(fresh), covers_up_to_id=cursor)
        self._append(*batch, _custom(record.to_json_dict()))

    def _reflect(self) -> None:
        if not self.observations:
            return
        cited = tuple(o.id for o in self.rng.sample(self.observations, 1))
        record = ReflectionsRecorded(
            reflections=(
                Reflection(id=create_memory_id(), text="a pattern", observation_ids=cited),
            ),
            covers_up_to_id=self.rng.choice(self.messages),
        )
        self._append(_custom(record.to_json_dict()))

    def _drop(self) -> None:
        ids = [o.id for o in self.rng.sample(self.observations, min(3, len(self.observations)))]
        record = ObservationsDropped(observation_ids=(*ids, create_memory_id()))
        self._append(_custom(record.to_json_dict()))

    def _fork(self) -> None:
        branch = self.store.read_branch(self.tenant, "s1")
        self.store.fork(self.tenant, "s1", self.rng.choice(branch).id)

    def _compact(self) -> None:
        branch = self.store.read_branch(self.tenant, "s1")
        result = ObservationalMemoryCompactionStrategy(2).compact(branch)
        self._append(result.to_entry(entry_id=create_memory_id(), session_id="s1", parent_id=None))


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_snapshot_always_equals_the_fold(
    store: SqlStore, tenant: str, session_id: str, seed: int
) -> None:
    history = _History(store, tenant, random.Random(seed))
    for _ in range(40):
        history.step()
        branch = store.read_branch(tenant, session_id)
        whole = fold_ledger(branch)
        assert store.read_context_state(tenant, session_id).ledger == whole
        view = store.read_memory_view(tenant, session_id)
        assert view.ledger.active_observations == whole.active_observations
        assert view.ledger.observation_covers_up_to_id == whole.observation_covers_up_to_id
        pending = whole.pending_reflection_observation_ids
        assert view.ledger.pending_reflection_observation_ids == pending
        assert list(view.unobserved) == unscanned_entries(branch, whole)
        unobserved = sum(
            estimate_entry_tokens(e) for e in view.unobserved if is_eligible_observation_source(e)
        )
        assert store.get_session(tenant, session_id).unobserved_tokens == unobserved
