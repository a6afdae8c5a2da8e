"""Context blocks and the compaction summary render the current leaf's scope projection."""

from __future__ import annotations

from itertools import count

from om_core.flush.compaction import ObservationalMemoryCompactionStrategy
from om_core.ledger.fold import fold_ledger
from om_core.ledger.models import SessionEntry
from om_core.read.context import build_context_blocks
from om_core.read.render import OUTLINE_HEADING
from om_core.scopes.controller import WorkScopeController
from om_core.scopes.index import fold_work_scope_map
from om_core.scopes.shared import SharedScopeConfig, SharedScopeMemory, resolve_shared_scopes
from om_core.settings import resolve_settings

from .builders import Branch, mid, obs, ref

SETTINGS = resolve_settings({"context": {"recentMessages": 0}})


def controller(b: Branch) -> WorkScopeController:
    ids = count(1)
    return WorkScopeController(
        session_id=b.session_id,
        append_entry=b.entries.append,
        get_entries=lambda: b.entries,
        new_entry_id=lambda: f"{b.session_id}-scope-{next(ids)}",
    )


def memory(entries: list[SessionEntry], **options: object) -> str:
    return build_context_blocks(entries, SETTINGS, **options)[0].text  # type: ignore[arg-type]


def scoped_branch() -> tuple[Branch, WorkScopeController]:
    """plan > (task-a, task-b); observation 1 on plan, 2 on task-a, 3 on task-b; leaf task-a."""
    b = Branch()
    u = b.user("work")
    b.observe(obs(1, u.id), obs(2, u.id), obs(3, u.id))
    b.reflect(ref(9, mid(1)))
    c = controller(b)
    c.open({"id": "plan", "label": "Plan"})
    c.open({"id": "task-a", "parentId": "plan"})
    c.open({"id": "task-b", "parentId": "plan"})
    c.bind("plan", [f"om:{mid(1)}", f"reflection:{mid(9)}"])
    c.bind("task-a", [f"om:{mid(2)}"])
    c.bind("task-b", [f"om:{mid(3)}"])
    c.enter("task-a")
    return b, c


def test_without_scopes_context_renders_the_whole_active_pool() -> None:
    b = Branch()
    u = b.user("work")
    b.observe(obs(1, u.id), obs(2, u.id))
    text = memory(b.entries)
    assert OUTLINE_HEADING not in text
    assert f"om:{mid(1)}" in text and f"om:{mid(2)}" in text


def test_context_renders_the_leaf_self_and_ancestors() -> None:
    b, c = scoped_branch()
    text = memory(b.entries)
    assert text.index(OUTLINE_HEADING) < text.index("## Reflections") < text.index("## Obs")
    assert "- plan: Plan" in text and "task-b" not in text
    assert f"om:{mid(1)}" in text and f"om:{mid(2)}" in text
    assert f"om:{mid(3)}" not in text
    assert f"reflection:{mid(9)}" in text
    c.leave()
    c.enter("task-b")
    text = memory(b.entries)
    assert f"om:{mid(3)}" in text and f"om:{mid(2)}" not in text


def test_compaction_summary_renders_the_projection_and_the_payload_keeps_everything() -> None:
    b, c = scoped_branch()
    result = ObservationalMemoryCompactionStrategy(keep_recent_entries=0).compact(b.entries)
    assert f"om:{mid(2)}" in result.summary and f"om:{mid(3)}" not in result.summary
    assert OUTLINE_HEADING in result.summary
    assert {o.id for o in result.data.memory.observations} == {mid(1), mid(2), mid(3)}
    b.compaction(result.summary, result.data.to_json_dict())
    # Entering another scope still surfaces what the summary hid.
    c.leave()
    c.enter("task-b")
    assert f"om:{mid(3)}" in memory(b.entries)


def test_a_store_reading_from_the_snapshot_passes_the_scope_map() -> None:
    b, _ = scoped_branch()
    result = ObservationalMemoryCompactionStrategy(keep_recent_entries=0).compact(b.entries)
    b.compaction(result.summary, result.data.to_json_dict())
    scope_map = fold_work_scope_map(b.entries)
    tail = b.entries[-1:]
    text = memory(tail, ledger=fold_ledger(tail), scope_map=scope_map)
    assert f"om:{mid(2)}" in text and f"om:{mid(3)}" not in text


def test_shared_memory_joins_context_only_inside_the_leaf_lineage() -> None:
    owner, reader = Branch("owner"), Branch("s2")
    branches = {"owner": owner, "s2": reader}
    u = owner.user("owner work")
    owner.observe(obs(1, u.id, text="owner fact"))
    oc = controller(owner)
    oc.open({"id": "build-42"})
    oc.bind("build-42", [f"om:{mid(1)}"])
    oc.grant("build-42", ["s2"])
    v = reader.user("reader work")
    reader.observe(obs(2, v.id))
    rc = controller(reader)
    rc.open({"id": "build-42"})
    rc.open({"id": "elsewhere"})
    rc.bind("elsewhere", [f"om:{mid(2)}"])

    def shared() -> tuple[SharedScopeMemory, ...]:
        return resolve_shared_scopes(
            scopes={
                "build-42": SharedScopeConfig(
                    owner_session_id="owner", entries=lambda sid: branches[sid].entries
                )
            },
            principal_id="s2",
            scope_map=fold_work_scope_map(reader.entries),
        )

    rc.enter("elsewhere")
    assert "owner fact" not in memory(reader.entries, shared=shared())
    rc.leave()
    rc.enter("build-42")
    assert "owner fact" in memory(reader.entries, shared=shared())
    assert "owner fact" not in memory(reader.entries)
    # Revocation lands on the next read.
    oc.revoke("build-42", ["s2"])
    assert "owner fact" not in memory(reader.entries, shared=shared())


def test_context_can_render_another_scope_and_mode_and_rejects_unknown_ones() -> None:
    import pytest

    from om_core.errors import InvalidScopeInputError, UnknownScopeError

    b, _ = scoped_branch()
    other = memory(b.entries, scope="task-b", include="self")
    assert f"om:{mid(3)}" in other and f"om:{mid(1)}" not in other
    whole = memory(b.entries, scope="plan", include="self+descendants")
    assert all(f"om:{mid(i)}" in whole for i in (1, 2, 3))
    with pytest.raises(UnknownScopeError):
        memory(b.entries, scope="task-z")
    with pytest.raises(InvalidScopeInputError):
        memory(b.entries, scope="plan", include="everything")
    plain = Branch()
    plain.observe(obs(1, plain.user("x").id))
    assert f"om:{mid(1)}" in memory(plain.entries, scope="session", include="self")
    with pytest.raises(UnknownScopeError):
        memory(plain.entries, scope="task-z")


def test_scope_map_fold_resumes_from_an_initial_map() -> None:
    b, c = scoped_branch()
    half = len(b.entries) - 2
    c.leave()
    start = fold_work_scope_map(b.entries[:half])
    assert fold_work_scope_map(b.entries[half:], initial=start) == fold_work_scope_map(b.entries)
