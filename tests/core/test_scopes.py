"""Work-scope records, fold and controller: every rule and cap at its boundary."""

from __future__ import annotations

from collections.abc import Callable
from itertools import count
from typing import Any

import pytest

from om_core.errors import (
    AppendNotVisibleError,
    DuplicateScopeError,
    InvalidScopeInputError,
    ReservedScopeError,
    ScopeCapError,
    ScopeOwnershipError,
    ScopeStateError,
    UnknownMemoryRefError,
    UnknownScopeError,
)
from om_core.ledger.fold import fold_ledger
from om_core.ledger.models import SessionEntry
from om_core.policy.redaction import REDACTED
from om_core.scopes.controller import ScopeView, WorkScopeController, with_work_scope
from om_core.scopes.index import fold_work_scope_map
from om_core.scopes.records import (
    MAX_WORK_SCOPE_BINDS,
    MAX_WORK_SCOPE_DEPTH,
    MAX_WORK_SCOPE_LABEL_CHARS,
    MAX_WORK_SCOPE_PRINCIPALS,
    MAX_WORK_SCOPE_STACK,
    MAX_WORK_SCOPES,
    SESSION_SCOPE_ID,
    ScopeBound,
    ScopeGranted,
    ScopeOpened,
    WorkScopeSpec,
    is_scope_id,
)

from .builders import Branch, mid, obs, ref


def controller(b: Branch, secrets: tuple[str, ...] = ()) -> WorkScopeController:
    ids = count(1)
    return WorkScopeController(
        session_id=b.session_id,
        append_entry=b.entries.append,
        get_entries=lambda: b.entries,
        secrets=secrets,
        new_entry_id=lambda: f"scope-{next(ids)}",
    )


def unchanged(b: Branch, action: Callable[[], Any], error: type[Exception]) -> None:
    """``action`` raises ``error`` and appends nothing."""
    before = list(b.entries)
    with pytest.raises(error):
        action()
    assert b.entries == before


def recorded(b: Branch, n: int) -> None:
    u = b.user("source")
    b.observe(*(obs(i, u.id) for i in range(1, n + 1)))


# -- the map ----------------------------------------------------------------------------------


def test_without_scope_records_the_map_is_the_implicit_session_root() -> None:
    b = Branch()
    recorded(b, 2)
    scope_map = fold_work_scope_map(b.entries)
    assert [s.id for s in scope_map.scopes] == [SESSION_SCOPE_ID]
    assert scope_map.leaf == SESSION_SCOPE_ID
    assert not scope_map.has_host_scopes
    assert scope_map.lineage(SESSION_SCOPE_ID) == (SESSION_SCOPE_ID,)


def test_records_use_the_wire_keys_of_the_typescript_package() -> None:
    b = Branch()
    recorded(b, 1)
    c = controller(b)
    opened = c.open({"id": "plan:memory", "kind": "plan", "label": "Memory work"})
    child = c.open(WorkScopeSpec(id="task:cleanup", parent_id="plan:memory"))
    bound = c.bind("task:cleanup", [f"om:{mid(1)}"])
    granted = c.grant("plan:memory", ["s2"])
    assert opened.data == {
        "type": "om.scope.opened",
        "id": "plan:memory",
        "kind": "plan",
        "label": "Memory work",
    }
    assert child.data == {
        "type": "om.scope.opened",
        "id": "task:cleanup",
        "parentId": "plan:memory",
    }
    assert bound is not None and bound.data == {
        "type": "om.scope.bound",
        "scopeId": "task:cleanup",
        "refs": [f"om:{mid(1)}"],
    }
    assert granted is not None and granted.data == {
        "type": "om.scope.granted",
        "scopeId": "plan:memory",
        "principalIds": ["s2"],
    }
    assert c.enter("task:cleanup").data == {"type": "om.scope.entered", "scopeId": "task:cleanup"}
    left = c.leave()
    assert left is not None and left.data == {"type": "om.scope.left"}
    assert opened.kind == "custom" and opened.session_id == "s1"
    # No entry names a parent: the sink appends each at the leaf of its moment.
    assert child.parent_id is None and opened.parent_id is None


def test_enter_pushes_and_leave_pops_back_to_the_previous_leaf() -> None:
    b = Branch()
    c = controller(b)
    c.open({"id": "a"})
    c.open({"id": "b"})
    c.enter("a")
    c.enter("b")
    assert c.leaf() == "b"
    c.leave()
    assert c.leaf() == "a"
    c.leave()
    assert c.leaf() == SESSION_SCOPE_ID
    before = len(b.entries)
    assert c.leave() is None
    assert len(b.entries) == before


def test_close_keeps_the_scope_closed_and_its_id_taken() -> None:
    b = Branch()
    c = controller(b)
    c.open({"id": "a"})
    c.close("a")
    scope = c.scope_map().get("a")
    assert scope is not None and scope.status == "closed"
    unchanged(b, lambda: c.open({"id": "a"}), DuplicateScopeError)
    unchanged(b, lambda: c.close("a"), ScopeStateError)


# -- scope ids --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    ["a", "A-z_0.9:x/y", "x" * 128, "task:v1.2", "a/b/c", "-", "."],
)
def test_valid_scope_ids(value: str) -> None:
    assert is_scope_id(value)
    b = Branch()
    controller(b).open({"id": value})
    assert fold_work_scope_map(b.entries).get(value) is not None


@pytest.mark.parametrize("value", ["", "x" * 129, "a..b", "..", "a b", "a\nb", "é", "a*", 7, None])
def test_invalid_scope_ids_fail_closed(value: Any) -> None:
    assert not is_scope_id(value)
    b = Branch()
    c = controller(b)
    unchanged(b, lambda: c.open({"id": value}), InvalidScopeInputError)
    unchanged(b, lambda: c.enter(value), InvalidScopeInputError)
    unchanged(b, lambda: c.close(value), InvalidScopeInputError)
    if value is not None:  # a missing parent means the session root
        unchanged(b, lambda: c.open({"id": "ok", "parentId": value}), InvalidScopeInputError)


def test_session_is_reserved() -> None:
    b = Branch()
    c = controller(b)
    unchanged(b, lambda: c.open({"id": SESSION_SCOPE_ID}), ReservedScopeError)
    unchanged(b, lambda: c.close(SESSION_SCOPE_ID), ReservedScopeError)
    unchanged(b, lambda: c.grant(SESSION_SCOPE_ID, ["s2"]), ReservedScopeError)
    unchanged(b, lambda: c.revoke(SESSION_SCOPE_ID, ["s2"]), ReservedScopeError)


def test_duplicate_scopes_fail_closed() -> None:
    b = Branch()
    c = controller(b)
    c.open({"id": "a"})
    unchanged(b, lambda: c.open({"id": "a", "label": "again"}), DuplicateScopeError)


def test_missing_and_closed_parents_fail_closed() -> None:
    b = Branch()
    c = controller(b)
    unchanged(b, lambda: c.open({"id": "child", "parentId": "nope"}), UnknownScopeError)
    c.open({"id": "parent"})
    c.close("parent")
    unchanged(b, lambda: c.open({"id": "child", "parentId": "parent"}), ScopeStateError)


def test_explicit_session_parent_is_the_root() -> None:
    b = Branch()
    c = controller(b)
    c.open({"id": "a", "parentId": SESSION_SCOPE_ID})
    assert c.scope_map().lineage("a") == (SESSION_SCOPE_ID, "a")


# -- caps -------------------------------------------------------------------------------------


def test_scope_cap_at_256_and_one_past_fails() -> None:
    b = Branch()
    c = controller(b)
    for i in range(MAX_WORK_SCOPES):
        c.open({"id": f"s{i}"})
    assert len(c.scope_map().scopes) == MAX_WORK_SCOPES + 1
    unchanged(b, lambda: c.open({"id": "one-more"}), ScopeCapError)


def test_closed_scopes_still_count_towards_the_scope_cap() -> None:
    b = Branch()
    # Hand-written records: the fold applies the same cap the controller does.
    for i in range(MAX_WORK_SCOPES):
        b.custom(ScopeOpened(id=f"s{i}").to_json_dict())
        b.custom({"type": "om.scope.closed", "scopeId": f"s{i}"})
    b.custom(ScopeOpened(id="late").to_json_dict())
    assert fold_work_scope_map(b.entries).get("late") is None
    unchanged(b, lambda: controller(b).open({"id": "late"}), ScopeCapError)


def test_depth_cap_at_8_and_one_past_fails() -> None:
    b = Branch()
    c = controller(b)
    parent: str | None = None
    for depth in range(1, MAX_WORK_SCOPE_DEPTH + 1):
        c.open({"id": f"d{depth}", "parentId": parent})
        parent = f"d{depth}"
    scope = c.scope_map().get(f"d{MAX_WORK_SCOPE_DEPTH}")
    assert scope is not None and scope.depth == MAX_WORK_SCOPE_DEPTH
    unchanged(b, lambda: c.open({"id": "too-deep", "parentId": parent}), ScopeCapError)


def test_stack_cap_at_8_and_one_past_fails() -> None:
    b = Branch()
    c = controller(b)
    for i in range(MAX_WORK_SCOPE_STACK + 1):
        c.open({"id": f"t{i}"})
    for i in range(MAX_WORK_SCOPE_STACK):
        c.enter(f"t{i}")
    assert len(c.scope_map().stack) == MAX_WORK_SCOPE_STACK
    unchanged(b, lambda: c.enter(f"t{MAX_WORK_SCOPE_STACK}"), ScopeCapError)


def test_bind_cap_at_4096_and_one_past_fails() -> None:
    b = Branch()
    recorded(b, MAX_WORK_SCOPE_BINDS + 1)
    c = controller(b)
    c.open({"id": "a"})
    refs = [f"om:{mid(i)}" for i in range(1, MAX_WORK_SCOPE_BINDS + 1)]
    assert c.bind("a", refs) is not None
    assert len(c.scope_map().refs("a")) == MAX_WORK_SCOPE_BINDS
    # Re-binding what is bound changes nothing, even at the cap.
    assert c.bind("a", refs[:3]) is None
    extra = [f"om:{mid(MAX_WORK_SCOPE_BINDS + 1)}"]
    unchanged(b, lambda: c.bind("a", extra), ScopeCapError)
    c.unbind("a", refs[:1])
    assert c.bind("a", extra) is not None


def test_one_bind_call_past_the_cap_fails_closed() -> None:
    b = Branch()
    recorded(b, MAX_WORK_SCOPE_BINDS + 1)
    c = controller(b)
    c.open({"id": "a"})
    refs = [f"om:{mid(i)}" for i in range(1, MAX_WORK_SCOPE_BINDS + 2)]
    unchanged(b, lambda: c.bind("a", refs), ScopeCapError)


def test_principal_cap_at_1024_and_one_past_fails() -> None:
    b = Branch()
    c = controller(b)
    c.open({"id": "shared"})
    principals = [f"p{i}" for i in range(MAX_WORK_SCOPE_PRINCIPALS)]
    assert c.grant("shared", principals) is not None
    assert c.grant("shared", principals[:5]) is None
    unchanged(b, lambda: c.grant("shared", ["one-more"]), ScopeCapError)
    c.revoke("shared", ["p0"])
    assert c.grant("shared", ["one-more"]) is not None
    unchanged(b, lambda: c.grant("shared", ["p0"]), ScopeCapError)


def test_one_grant_call_past_the_cap_fails_closed() -> None:
    b = Branch()
    c = controller(b)
    c.open({"id": "shared"})
    principals = [f"p{i}" for i in range(MAX_WORK_SCOPE_PRINCIPALS + 1)]
    unchanged(b, lambda: c.grant("shared", principals), ScopeCapError)


@pytest.mark.parametrize("field", ["label", "kind"])
def test_label_and_kind_cap_at_512_and_one_past_fails(field: str) -> None:
    b = Branch()
    c = controller(b)
    c.open({"id": "ok", field: "x" * MAX_WORK_SCOPE_LABEL_CHARS})
    scope = c.scope_map().get("ok")
    assert scope is not None and len(getattr(scope, field)) == MAX_WORK_SCOPE_LABEL_CHARS
    unchanged(
        b,
        lambda: c.open({"id": "long", field: "x" * (MAX_WORK_SCOPE_LABEL_CHARS + 1)}),
        ScopeCapError,
    )
    # Hand-written over-long text is not a valid record: the fold ignores it.
    b.custom({"type": "om.scope.opened", "id": "raw", field: "x" * 513})
    assert fold_work_scope_map(b.entries).get("raw") is None


def test_labels_and_kinds_are_redacted_like_memory_text() -> None:
    b = Branch()
    c = controller(b, secrets=("sk-123",))
    entry = c.open({"id": "a", "kind": "key sk-123", "label": "uses sk-123 twice sk-123"})
    assert "sk-123" not in str(entry.data)
    scope = c.scope_map().get("a")
    assert scope is not None
    assert scope.kind == f"key {REDACTED}"
    assert scope.label == f"uses {REDACTED} twice {REDACTED}"


def test_a_label_that_grows_past_the_cap_when_redacted_fails_closed() -> None:
    b = Branch()
    c = controller(b, secrets=("k",))
    label = "k" * MAX_WORK_SCOPE_LABEL_CHARS
    unchanged(b, lambda: c.open({"id": "a", "label": label}), ScopeCapError)


# -- binds ------------------------------------------------------------------------------------


def test_binds_must_name_recorded_memory() -> None:
    b = Branch()
    u = b.user("hi")
    b.observe(obs(1, u.id))
    b.reflect(ref(9, mid(1)))
    c = controller(b)
    c.open({"id": "a"})
    unchanged(b, lambda: c.bind("a", [f"om:{mid(2)}"]), UnknownMemoryRefError)
    unchanged(b, lambda: c.bind("a", [f"reflection:{mid(1)}"]), UnknownMemoryRefError)
    unchanged(b, lambda: c.bind("a", [f"om:{mid(1)}", f"om:{mid(3)}"]), UnknownMemoryRefError)
    unchanged(b, lambda: c.unbind("a", [f"om:{mid(2)}"]), UnknownMemoryRefError)
    entry = c.bind("a", [f"om:{mid(1)}", f"reflection:{mid(9)}", f"om:{mid(1)}"])
    assert entry is not None and entry.data is not None
    assert entry.data["refs"] == [f"om:{mid(1)}", f"reflection:{mid(9)}"]
    # Binding the session root is allowed: it is how memory is made visible everywhere.
    assert c.bind(SESSION_SCOPE_ID, [f"om:{mid(1)}"]) is not None


@pytest.mark.parametrize(
    "refs",
    [[], "om:000000000001", ["000000000001"], ["om:XYZ"], ["obs:000000000001"], [1]],
)
def test_malformed_refs_fail_closed(refs: Any) -> None:
    b = Branch()
    recorded(b, 1)
    c = controller(b)
    c.open({"id": "a"})
    unchanged(b, lambda: c.bind("a", refs), InvalidScopeInputError)


def test_bind_to_unknown_scope_fails_and_closed_scope_is_allowed() -> None:
    b = Branch()
    recorded(b, 1)
    c = controller(b)
    unchanged(b, lambda: c.bind("nope", [f"om:{mid(1)}"]), UnknownScopeError)
    c.open({"id": "done"})
    c.close("done")
    assert c.bind("done", [f"om:{mid(1)}"]) is not None


def test_unbind_removes_only_bound_refs() -> None:
    b = Branch()
    recorded(b, 2)
    c = controller(b)
    c.open({"id": "a"})
    c.bind("a", [f"om:{mid(1)}"])
    assert c.unbind("a", [f"om:{mid(2)}"]) is None
    entry = c.unbind("a", [f"om:{mid(1)}", f"om:{mid(2)}"])
    assert entry is not None and entry.data is not None
    assert entry.data["refs"] == [f"om:{mid(1)}"]
    assert c.scope_map().refs("a") == frozenset()


# -- grants -----------------------------------------------------------------------------------


def test_grant_targets_must_be_open_host_scopes() -> None:
    b = Branch()
    c = controller(b)
    unchanged(b, lambda: c.grant("nope", ["s2"]), UnknownScopeError)
    c.open({"id": "a"})
    c.grant("a", ["s2"])
    c.close("a")
    unchanged(b, lambda: c.grant("a", ["s3"]), ScopeStateError)
    # Even a grant that would change nothing is refused on a closed target.
    unchanged(b, lambda: c.grant("a", ["s2"]), ScopeStateError)
    # Revoking stays possible after close: taking access away is always safe.
    assert c.revoke("a", ["s2"]) is not None
    grant = c.scope_map().grants_by_scope["a"]
    assert grant.principal_ids == () and grant.revoked_principal_ids == ("s2",)


@pytest.mark.parametrize("principals", [[], "s2", [""], [" s2"], ["a\tb"], ["x" * 257], [3]])
def test_malformed_principals_fail_closed(principals: Any) -> None:
    b = Branch()
    c = controller(b)
    c.open({"id": "a"})
    unchanged(b, lambda: c.grant("a", principals), InvalidScopeInputError)


def test_revoke_of_a_principal_never_granted_appends_nothing() -> None:
    b = Branch()
    c = controller(b)
    c.open({"id": "a"})
    assert c.revoke("a", ["s9"]) is None
    assert "a" not in c.scope_map().grants_by_scope


def test_regrant_clears_the_revoked_mark() -> None:
    b = Branch()
    c = controller(b)
    c.open({"id": "a"})
    c.grant("a", ["s2"])
    c.revoke("a", ["s2"])
    c.grant("a", ["s2"])
    grant = c.scope_map().grants_by_scope["a"]
    assert grant.principal_ids == ("s2",) and grant.revoked_principal_ids == ()


# -- state rules ------------------------------------------------------------------------------


def test_entering_requires_an_open_lineage() -> None:
    b = Branch()
    c = controller(b)
    unchanged(b, lambda: c.enter("nope"), UnknownScopeError)
    c.open({"id": "p"})
    c.open({"id": "c", "parentId": "p"})
    c.close("p")
    unchanged(b, lambda: c.enter("c"), ScopeStateError)
    unchanged(b, lambda: c.enter("p"), ScopeStateError)


def test_closing_an_entered_scope_fails_but_its_ancestor_may_close() -> None:
    b = Branch()
    c = controller(b)
    c.open({"id": "p"})
    c.open({"id": "c", "parentId": "p"})
    c.enter("c")
    unchanged(b, lambda: c.close("c"), ScopeStateError)
    c.close("p")
    assert c.leaf() == "c"


def test_ownership_mismatch_fails_closed() -> None:
    b = Branch()
    other = Branch("s2")
    other.user("not yours")
    c = WorkScopeController(
        session_id="s1",
        append_entry=b.entries.append,
        get_entries=lambda: [*b.entries, *other.entries],
    )
    unchanged(b, lambda: c.open({"id": "a"}), ScopeOwnershipError)
    unchanged(b, lambda: c.leave(), ScopeOwnershipError)
    wrong = WorkScopeController(
        session_id="s2", append_entry=b.entries.append, get_entries=lambda: b.entries
    )
    b.user("mine")
    unchanged(b, lambda: wrong.open({"id": "a"}), ScopeOwnershipError)


def test_an_append_that_lands_elsewhere_is_reported() -> None:
    b = Branch()
    elsewhere: list[SessionEntry] = []
    c = WorkScopeController(
        session_id="s1", append_entry=elsewhere.append, get_entries=lambda: b.entries
    )
    with pytest.raises(AppendNotVisibleError):
        c.open({"id": "a"})
    assert b.entries == [] and len(elsewhere) == 1


def test_the_fold_skips_records_the_controller_would_refuse() -> None:
    b = Branch()
    recorded(b, 1)
    om1 = f"om:{mid(1)}"
    b.custom(ScopeOpened(id="a").to_json_dict())
    b.custom(ScopeOpened(id="a", label="dup").to_json_dict())
    b.custom(ScopeOpened(id=SESSION_SCOPE_ID).to_json_dict())
    b.custom(ScopeOpened(id="orphan", parent_id="missing").to_json_dict())
    b.custom(ScopeBound(scope_id="missing", refs=(om1,)).to_json_dict())
    b.custom(ScopeGranted(scope_id=SESSION_SCOPE_ID, principal_ids=("s2",)).to_json_dict())
    b.custom({"type": "om.scope.left"})
    b.custom({"type": "om.scope.opened", "id": "bad..id"})
    b.custom({"type": "om.scope.bound", "scopeId": "a", "refs": ["om:nothex"]})
    b.custom({"type": "om.scope.entered", "scopeId": "a", "extra": 1})
    scope_map = fold_work_scope_map(b.entries)
    assert [s.id for s in scope_map.scopes] == [SESSION_SCOPE_ID, "a"]
    a = scope_map.get("a")
    assert a is not None and a.label is None
    assert scope_map.binds == () and scope_map.grants == () and scope_map.stack == ()


# -- with_work_scope --------------------------------------------------------------------------


def test_with_work_scope_opens_enters_and_always_leaves_without_closing() -> None:
    b = Branch()
    c = controller(b)
    c.open({"id": "plan"})
    with with_work_scope(c, {"id": "task", "parentId": "plan", "kind": "task"}) as scope_id:
        assert scope_id == "task"
        assert c.leaf() == "task"
    assert c.leaf() == SESSION_SCOPE_ID
    scope = c.scope_map().get("task")
    assert scope is not None and scope.status == "open" and scope.parent_id == "plan"
    with pytest.raises(RuntimeError), with_work_scope(c, WorkScopeSpec(id="task")):
        assert c.leaf() == "task"
        raise RuntimeError("body failed")
    assert c.leaf() == SESSION_SCOPE_ID
    opened = [e for e in b.entries if e.record_type == "om.scope.opened"]
    assert len(opened) == 2  # "task" was opened once
    assert all(e.record_type != "om.scope.closed" for e in b.entries)


def test_nested_with_work_scope_restores_the_outer_leaf() -> None:
    b = Branch()
    c = controller(b)
    with with_work_scope(c, {"id": "outer"}):
        with with_work_scope(c, {"id": "unrelated"}):
            assert c.leaf() == "unrelated"
        assert c.leaf() == "outer"
    assert c.leaf() == SESSION_SCOPE_ID


def test_with_work_scope_that_cannot_enter_leaves_nothing() -> None:
    b = Branch()
    c = controller(b)
    c.open({"id": "done"})
    c.close("done")
    before = list(b.entries)
    with pytest.raises(ScopeStateError), with_work_scope(c, {"id": "done"}):
        pass  # pragma: no cover - never entered
    assert b.entries == before


def test_a_controller_on_a_hosts_view_applies_the_same_rules_without_reading_the_branch() -> None:
    """``get_view`` (a store's snapshot state): the same answers as folding the branch, and
    the branch is never read (``get_entries`` is not even given)."""
    b = Branch()
    u = b.user("hi")
    b.observe(obs(1, u.id))
    views = 0

    def view() -> ScopeView:
        nonlocal views
        views += 1
        return ScopeView(scope_map=fold_work_scope_map(b.entries), ledger=fold_ledger(b.entries))

    ids = count(1)
    c = WorkScopeController(
        session_id=b.session_id,
        append_entry=b.entries.append,
        get_view=view,
        new_entry_id=lambda: f"scope-{next(ids)}",
    )
    c.open({"id": "a"})
    assert c.enter("a") is not None and c.leaf() == "a"
    unchanged(b, lambda: c.bind("a", [f"om:{mid(2)}"]), UnknownMemoryRefError)
    assert c.bind("a", [f"om:{mid(1)}"]) is not None
    assert c.bind("a", [f"om:{mid(1)}"]) is None  # bound already: nothing appended
    assert c.leave() is not None and c.leave() is None
    assert views >= 6
    with pytest.raises(InvalidScopeInputError):
        c.entries()
    with pytest.raises(InvalidScopeInputError):
        WorkScopeController(session_id="s", append_entry=b.entries.append)
    with pytest.raises(InvalidScopeInputError):
        WorkScopeController(
            session_id="s", append_entry=b.entries.append, get_entries=list, get_view=view
        )
