"""Work-memory projection: include modes, closed scopes, kinds, outline, and a property test."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from om_core.errors import InvalidScopeInputError, UnknownScopeError
from om_core.ledger.fold import fold_ledger
from om_core.read.render import OUTLINE_HEADING, render_observational_memory
from om_core.scopes.index import fold_work_scope_map
from om_core.scopes.records import SESSION_SCOPE_ID, ScopeBound, ScopeClosed, ScopeOpened
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
