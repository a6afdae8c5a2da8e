"""Revocation: the tombstone port (read path) and the drop handler (write path) agree."""

from __future__ import annotations

from collections.abc import Iterable
from itertools import count

import pytest

from om_core.errors import AppendNotVisibleError, InvalidInputError, WrongSessionError
from om_core.flush.compaction import ObservationalMemoryCompactionStrategy
from om_core.flush.revocation import (
    ObservationalMemoryDropHandler,
    Tombstone,
    TombstoneSource,
    list_invalidated_ids,
)
from om_core.ledger.fold import fold_ledger
from om_core.ledger.models import SessionEntry
from om_core.read.context import build_context_blocks
from om_core.settings import resolve_settings

from .builders import Branch, mid, obs, ref

SCOPE = "tenant-1/corpus-a"


class Tombstones:
    """An in-memory tombstone store (the port a SQL store implements)."""

    def __init__(self, *tombstones: Tombstone) -> None:
        self.items = list(tombstones)
        self.reads = 0

    def list_tombstones(self, scope: str) -> Iterable[Tombstone]:
        self.reads += 1
        return [t for t in self.items if t.scope == scope]


def handler(b: Branch, *, with_get: bool = True) -> ObservationalMemoryDropHandler:
    ids = count(1)
    return ObservationalMemoryDropHandler(
        session_id=b.session_id,
        append_entry=b.entries.append,
        get_entries=(lambda: b.entries) if with_get else None,
        new_entry_id=lambda: f"drop-{next(ids)}",
    )


def branch() -> Branch:
    """m1 feeds observations 1 and 3 (3 also rests on m2); m2 feeds 2; reflection 9 on 2."""
    b = Branch()
    m1 = b.message("user", "payroll export needs approval", id="m1")
    m2 = b.message("user", "the cat is called Tom", id="m2")
    b.observe(obs(1, m1.id), obs(2, m2.id), obs(3, m1.id, m2.id), covers=m2.id)
    b.reflect(ref(9, mid(2)))
    return b


def test_list_invalidated_ids_reads_one_exact_scope_and_keeps_corrected_visible() -> None:
    store = Tombstones(
        Tombstone(id="m1", scope=SCOPE),
        Tombstone(id="m9", scope=SCOPE, reason="deleted"),
        Tombstone(id="m5", scope=SCOPE, reason="corrected"),
        Tombstone(id="m6", scope=SCOPE, reason="corrected"),
        Tombstone(id="m6", scope=SCOPE, reason="revoked"),
        Tombstone(id="m7", scope=f"{SCOPE}/sub"),
        Tombstone(id="m8", scope="tenant-1"),
    )
    assert isinstance(store, TombstoneSource)
    assert list_invalidated_ids(store, SCOPE) == ("m1", "m6", "m9")
    assert store.reads == 1
    # A plain iterable of tombstones works the same; other scopes never leak in.
    assert list_invalidated_ids(store.items, SCOPE) == ("m1", "m6", "m9")
    assert list_invalidated_ids(Tombstones(), SCOPE) == ()


def test_drop_handler_appends_one_entry_naming_every_observation_resting_on_tombstones() -> None:
    b = branch()
    dropped = handler(b).delete(list_invalidated_ids([Tombstone(id="m1", scope=SCOPE)], SCOPE))
    assert dropped == (mid(1), mid(3))
    drops = [e for e in b.entries if e.record_type == "om.observations.dropped"]
    assert len(drops) == 1
    # Ids only: no coversUpToId, no observation text.
    assert drops[0].data == {"type": "om.observations.dropped", "observationIds": [mid(1), mid(3)]}
    assert drops[0].parent_id is None  # the sink appends it at the leaf of its moment
    ledger = fold_ledger(b.entries)
    assert [o.id for o in ledger.active_observations] == [mid(2)]
    assert ledger.observation_covers_up_to_id == "m2"  # a drop is not progress


def test_drop_handler_matches_observation_ids_too() -> None:
    b = branch()
    assert handler(b).delete([mid(2)]) == (mid(2),)


def test_nothing_is_appended_when_nothing_matches() -> None:
    b = branch()
    before = list(b.entries)
    h = handler(b)
    assert h.delete(["unrelated"]) == ()
    assert h.delete([]) == ()
    assert h.delete(["m1"]) == (mid(1), mid(3))
    # Already dropped observations are not active: a second pass appends nothing.
    after_first = list(b.entries)
    assert h.delete(["m1"]) == ()
    assert b.entries == after_first and len(after_first) == len(before) + 1


def test_drop_handler_fails_closed_on_foreign_entries_and_missing_input() -> None:
    b = branch()
    other = Branch("s2")
    other.user("theirs")
    h = ObservationalMemoryDropHandler(session_id="s1", append_entry=b.entries.append)
    before = list(b.entries)
    with pytest.raises(WrongSessionError):
        h.delete(["m1"], [*b.entries, *other.entries])
    with pytest.raises(InvalidInputError):
        h.delete(["m1"])
    assert b.entries == before
    # With explicit entries and no get_entries it works without a read-back.
    assert h.delete(["m2"], b.entries) == (mid(2), mid(3))


def test_a_drop_that_lands_elsewhere_is_reported() -> None:
    b = branch()
    elsewhere: list[SessionEntry] = []
    h = ObservationalMemoryDropHandler(
        session_id="s1", append_entry=elsewhere.append, get_entries=lambda: b.entries
    )
    with pytest.raises(AppendNotVisibleError):
        h.delete(["m1"])
    assert len(elsewhere) == 1


def memory_text(entries: list[SessionEntry], invalidated: Iterable[str] = ()) -> str:
    settings = resolve_settings({"context": {"recentMessages": 0}})
    return build_context_blocks(entries, settings, invalidated_ids=invalidated)[0].text


def test_read_path_and_write_path_render_the_same_memory() -> None:
    b = branch()
    tombstones = [Tombstone(id="m1", scope=SCOPE)]
    blocked = list_invalidated_ids(tombstones, SCOPE)
    read_path = memory_text(b.entries, blocked)
    assert f"om:{mid(1)}" not in read_path and f"om:{mid(3)}" not in read_path
    handler(b).delete(blocked)
    # No reflection rests on the dropped observations: the ledger alone renders the same.
    assert memory_text(b.entries) == read_path
    # And with the tombstones still listed, both paths stay identical.
    assert memory_text(b.entries, blocked) == read_path


def test_parity_when_a_reflection_rests_on_a_revoked_observation() -> None:
    b = branch()
    blocked = list_invalidated_ids([Tombstone(id="m2", scope=SCOPE)], SCOPE)
    read_path = memory_text(b.entries, blocked)
    assert f"reflection:{mid(9)}" not in read_path
    handler(b).delete(blocked)
    # The drop entry retires observations only; the read path keeps withholding the reflection
    # for as long as the tombstone exists, so memory is identical before and after the drop.
    assert memory_text(b.entries, blocked) == read_path


def test_revocation_holds_across_local_compaction() -> None:
    b = branch()
    b.assistant("later turn")
    blocked = list_invalidated_ids([Tombstone(id="m1", scope=SCOPE)], SCOPE)
    # Compaction before the drop lands: the summary withholds, the payload keeps the audit.
    result = ObservationalMemoryCompactionStrategy(keep_recent_entries=1).compact(
        b.entries, invalidated_ids=blocked
    )
    assert mid(1) not in result.summary and mid(3) not in result.summary
    b.compaction(result.summary, result.data.to_json_dict())
    assert f"om:{mid(1)}" not in memory_text(b.entries, blocked)
    # The drop handler folds from the snapshot and still retires the same observations.
    assert handler(b).delete(blocked) == (mid(1), mid(3))
    after = list(b.entries)
    b.assistant("another turn")
    second = ObservationalMemoryCompactionStrategy(keep_recent_entries=1).compact(b.entries)
    assert mid(1) not in second.summary and mid(3) not in second.summary
    assert set(second.data.memory.dropped_observation_ids) >= {mid(1), mid(3)}
    assert after[-1].record_type == "om.observations.dropped"
