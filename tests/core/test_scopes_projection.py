"""Work-memory projection: include modes, closed scopes, kinds, outline, and a property test."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from om_core.errors import InvalidScopeInputError, UnknownScopeError
from om_core.ledger.fold import fold_ledger
from om_core.read.render import OUTLINE_HEADING, render_observational_memory
from om_core.scopes.index import fold_work_scope_map
from om_core.scopes.records import (
    SESSION_SCOPE_ID,
    ScopeBound,
    ScopeClosed,
    ScopeEntered,
    ScopeGranted,
    ScopeLeft,
    ScopeOpened,
    ScopeRecord,
    ScopeRevoked,
    ScopeUnbound,
)
from om_core.scopes.work_memory import has_host_scopes, project_work_memory

from .builders import Branch, mid, obs, ref


def om(n: int) -> str:
    return f"om:{mid(n)}"


def tree() -> Branch:
    """session > plan > (task1 > sub, task2 [closed]); observation n bound to one scope each."""
    b = Branch()
    u = b.user("source")
    b.observe(*(obs(n, u.id) for n in range(1, 8)))
    b.reflect(ref(20, mid(2)))
    b.custom(ScopeOpened(id="plan", kind="plan", label="The plan").to_json_dict())
    b.custom(ScopeOpened(id="task1", parent_id="plan", kind="task").to_json_dict())
    b.custom(ScopeOpened(id="sub", parent_id="task1", kind="step").to_json_dict())
    b.custom(ScopeOpened(id="task2", parent_id="plan", kind="task").to_json_dict())
    for scope_id, n in [(SESSION_SCOPE_ID, 1), ("plan", 2), ("task1", 3), ("sub", 4), ("task2", 5)]:
        b.custom(ScopeBound(scope_id=scope_id, refs=(om(n),)).to_json_dict())
    b.custom(ScopeBound(scope_id="plan", refs=(f"reflection:{mid(20)}",)).to_json_dict())
    b.custom(ScopeClosed(scope_id="task2").to_json_dict())
    # Observation 6 is never bound; observation 7 is bound and then dropped.
    b.custom(ScopeBound(scope_id="task1", refs=(om(7),)).to_json_dict())
    b.drop(mid(7))
    return b


def ids(b: Branch, from_: str, include: str, **options: object) -> list[int]:
    projection = project_work_memory(
        fold_ledger(b.entries),
        fold_work_scope_map(b.entries),
        from_=from_,
        include=include,
        **options,  # type: ignore[arg-type]
    )
    return [int(o.id, 16) for o in projection.observations]


def test_without_host_scopes_the_projection_is_the_whole_active_pool() -> None:
    b = Branch()
    u = b.user("x")
    b.observe(obs(1, u.id), obs(2, u.id))
    b.reflect(ref(9, mid(1)))
    b.drop(mid(2))
    ledger = fold_ledger(b.entries)
    scope_map = fold_work_scope_map(b.entries)
    assert not has_host_scopes(scope_map)
    for include in ("self", "self+ancestors", "self+descendants", "lineage"):
        projection = project_work_memory(ledger, scope_map, from_=SESSION_SCOPE_ID, include=include)
        assert projection.observations == ledger.active_observations
        assert projection.reflections == ledger.reflections
        assert projection.outline == ()


def test_include_modes() -> None:
    b = tree()
    assert ids(b, "task1", "self") == [3]
    assert ids(b, "task1", "self+ancestors") == [1, 2, 3]
    assert ids(b, "task1", "self+descendants") == [3, 4]
    assert ids(b, "task1", "lineage") == [1, 2, 3, 4]
    # Closed task2 is hidden; unbound observation 6 and dropped observation 7 never show.
    assert ids(b, SESSION_SCOPE_ID, "self+descendants") == [1, 2, 3, 4]
    assert ids(b, SESSION_SCOPE_ID, "self+descendants", closed="include") == [1, 2, 3, 4, 5]


def test_closed_ancestors_of_from_stay_available() -> None:
    b = tree()
    b.custom(ScopeClosed(scope_id="plan").to_json_dict())
    assert ids(b, "task1", "self+ancestors") == [1, 2, 3]
    # From the root, closed plan is no ancestor: its own memory is hidden.
    assert ids(b, SESSION_SCOPE_ID, "self+descendants") == [1, 3, 4]
    # A closed from_ itself is hidden unless closed scopes are included.
    assert ids(b, "task2", "self") == []
    assert ids(b, "task2", "self", closed="include") == [5]


def test_kinds_filter_the_selected_scopes() -> None:
    b = tree()
    assert ids(b, SESSION_SCOPE_ID, "self+descendants", kinds=["task"]) == [3]
    assert ids(b, SESSION_SCOPE_ID, "self+descendants", kinds=["task", "step"]) == [3, 4]
    assert ids(b, SESSION_SCOPE_ID, "self+descendants", kinds=[]) == [1, 2, 3, 4]


def test_reflections_and_outline() -> None:
    b = tree()
    projection = project_work_memory(
        fold_ledger(b.entries),
        fold_work_scope_map(b.entries),
        from_="sub",
        include="self+ancestors",
    )
    assert [r.id for r in projection.reflections] == [mid(20)]
    assert [item.id for item in projection.outline] == [SESSION_SCOPE_ID, "plan", "task1", "sub"]
    assert projection.outline_lines == (
        "- session",
        "  - plan [plan]: The plan",
        "    - task1 [task]",
        "      - sub [step]",
    )
    text = render_observational_memory(
        projection.reflections, projection.observations, outline=projection.outline_lines
    )
    assert text.index(OUTLINE_HEADING) < text.index("## Reflections") < text.index("## Obs")
    assert f"om:{mid(5)}" not in text and f"om:{mid(6)}" not in text


def test_bad_queries_fail_closed() -> None:
    b = tree()
    ledger, scope_map = fold_ledger(b.entries), fold_work_scope_map(b.entries)
    with pytest.raises(UnknownScopeError):
        project_work_memory(ledger, scope_map, from_="nope", include="self")
    with pytest.raises(InvalidScopeInputError):
        project_work_memory(ledger, scope_map, from_="bad..id", include="self")
    with pytest.raises(InvalidScopeInputError):
        project_work_memory(ledger, scope_map, from_="plan", include="everything")
    with pytest.raises(InvalidScopeInputError):
        project_work_memory(ledger, scope_map, from_="plan", include="self", closed="show")


def test_has_host_scopes_counts_closed_scopes() -> None:
    b = Branch()
    b.custom(ScopeOpened(id="a").to_json_dict())
    b.custom(ScopeClosed(scope_id="a").to_json_dict())
    assert has_host_scopes(fold_work_scope_map(b.entries))


@st.composite
def scope_trees(draw: st.DrawFn) -> Branch:
    """A branch with N observations, a random scope tree (some closed) and random binds."""
    n_obs = draw(st.integers(min_value=1, max_value=12))
    n_scopes = draw(st.integers(min_value=0, max_value=15))
    b = Branch()
    u = b.user("source")
    b.observe(*(obs(i, u.id) for i in range(1, n_obs + 1)))
    names = [SESSION_SCOPE_ID]
    for i in range(n_scopes):
        parent = draw(st.sampled_from(names))
        b.custom(ScopeOpened(id=f"s{i}", parent_id=parent).to_json_dict())
        names.append(f"s{i}")
    for name in names:
        refs = draw(st.sets(st.integers(min_value=1, max_value=n_obs), max_size=n_obs))
        if refs:
            b.custom(ScopeBound(scope_id=name, refs=tuple(om(r) for r in refs)).to_json_dict())
    for name in draw(st.sets(st.sampled_from(names[1:]))) if n_scopes else ():
        b.custom(ScopeClosed(scope_id=name).to_json_dict())
    return b


@settings(max_examples=150, deadline=None)
@given(scope_trees(), st.sampled_from(["hide", "include"]))
def test_root_self_and_descendants_is_the_union_of_every_scope_self(b: Branch, closed: str) -> None:
    ledger, scope_map = fold_ledger(b.entries), fold_work_scope_map(b.entries)
    whole = project_work_memory(
        ledger, scope_map, from_=SESSION_SCOPE_ID, include="self+descendants", closed=closed
    )
    union: set[str] = set()
    for scope in scope_map.scopes:
        part = project_work_memory(ledger, scope_map, from_=scope.id, include="self", closed=closed)
        union.update(o.id for o in part.observations)
    assert {o.id for o in whole.observations} == union
    if closed == "include" and has_host_scopes(scope_map):
        bound = {r for refs in scope_map.refs_by_scope.values() for r in refs}
        assert union == {o.id for o in ledger.active_observations if om(int(o.id, 16)) in bound}


_SCOPES = [SESSION_SCOPE_ID, "a", "b", "c"]
_PEOPLE = st.lists(st.sampled_from(["p1", "p2", "p3"]), min_size=1, max_size=3, unique=True)
_REFS = st.lists(st.integers(min_value=1, max_value=5), min_size=1, max_size=3, unique=True)


@st.composite
def scope_records(draw: st.DrawFn) -> ScopeRecord:
    """One scope record of any kind, on one of a few scopes (often refused by the fold)."""
    scope = draw(st.sampled_from(_SCOPES))
    kind = draw(st.integers(min_value=0, max_value=7))
    if kind == 0:
        return ScopeOpened(id=scope, parent_id=draw(st.sampled_from(_SCOPES)))
    if kind == 1:
        return ScopeClosed(scope_id=scope)
    if kind == 2:
        return ScopeEntered(scope_id=scope)
    if kind == 3:
        return ScopeLeft()
    if kind in (4, 5):
        refs = tuple(om(r) for r in draw(_REFS))
        return (
            ScopeBound(scope_id=scope, refs=refs)
            if kind == 4
            else ScopeUnbound(scope_id=scope, refs=refs)
        )
    people = tuple(draw(_PEOPLE))
    if kind == 6:
        return ScopeGranted(scope_id=scope, principal_ids=people)
    return ScopeRevoked(scope_id=scope, principal_ids=people)


@settings(max_examples=200, deadline=None)
@given(st.lists(scope_records(), max_size=25))
def test_folding_nothing_over_a_folded_map_gives_it_back(records: list[ScopeRecord]) -> None:
    # A store answers a context read with the stored map itself when no record follows it.
    b = Branch()
    opened = [ScopeOpened(id="a", parent_id=SESSION_SCOPE_ID), ScopeOpened(id="b", parent_id="a")]
    for record in [*opened, *records]:
        b.custom(record.to_json_dict())
    folded = fold_work_scope_map(b.entries)
    assert fold_work_scope_map([], initial=folded) == folded
