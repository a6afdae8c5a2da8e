"""Property tests of the fold, merge, render and recall invariants."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from om_core.flush.compaction import create_folded_memory_details, folded_payload_bytes
from om_core.ledger.fold import fold_ledger, merge_ledgers
from om_core.ledger.models import SessionEntry
from om_core.ledger.projection import build_projection, snapshot_of
from om_core.read.context import build_context_blocks
from om_core.read.recall import recall_memory
from om_core.read.render import render_observational_memory

from .builders import Branch, mid, obs, ref

OPS = st.lists(
    st.tuples(
        st.sampled_from(["user", "tool", "observe", "reflect", "drop", "snapshot"]),
        st.lists(st.integers(0, 10_000), min_size=1, max_size=4),
        st.text(min_size=1, max_size=30),
    ),
    max_size=40,
)


def build_branch(ops: list[tuple[str, list[int], str]], snapshots: bool = True) -> Branch:
    b = Branch()
    messages: list[str] = []
    observations: list[str] = []
    next_id = 1
    for op, picks, text in ops:
        if op == "user":
            messages.append(b.user(text).id)
        elif op == "tool":
            call = f"c{len(b.entries)}"
            messages.append(b.call(call, q=text).id)
            messages.append(b.result(call, text).id)
        elif op == "observe" and messages:
            made = []
            for pick in picks:
                made.append(
                    obs(
                        next_id,
                        messages[pick % len(messages)],
                        text=text,
                        relevance=(pick % 100) / 100,
                    )
                )
                observations.append(mid(next_id))
                next_id += 1
            b.observe(*made, covers=b.entries[-1].id)
        elif op == "reflect" and observations:
            cited = [observations[p % len(observations)] for p in picks]
            b.reflect(ref(next_id, *cited, text=text), covers=b.entries[-1].id)
            next_id += 1
        elif op == "drop" and observations:
            b.drop(*{observations[p % len(observations)] for p in picks})
        elif op == "snapshot" and snapshots:
            memory = snapshot_of(fold_ledger(b.entries))
            b.compaction("summary", {"memory": memory.to_json_dict()})
    return b


@given(OPS)
@settings(max_examples=150, deadline=None)
def test_folding_from_a_snapshot_equals_folding_everything(ops: list) -> None:  # type: ignore[type-arg]
    b = build_branch(ops)
    assert fold_ledger(b.entries) == fold_ledger(b.entries, from_snapshot=False)
    # And resuming from any prefix's ledger gives the same as one fold.
    cut = len(b.entries) // 2
    resumed = fold_ledger(
        b.entries[cut:], initial=fold_ledger(b.entries[:cut]), from_snapshot=False
    )
    assert resumed == fold_ledger(b.entries, from_snapshot=False)


@given(st.lists(OPS, min_size=1, max_size=4), st.randoms(use_true_random=False))
@settings(max_examples=60, deadline=None)
def test_merge_is_order_independent_and_idempotent(branches: list, rnd) -> None:  # type: ignore[no-untyped-def, type-arg]
    ledgers = [fold_ledger(build_branch(ops).entries) for ops in branches]
    merged = merge_ledgers(ledgers)
    shuffled = list(ledgers)
    rnd.shuffle(shuffled)
    assert merge_ledgers(shuffled) == merged
    assert merge_ledgers([merged, merged]) == merged
    assert merge_ledgers([*ledgers, *ledgers]) == merged


@given(OPS, st.lists(st.integers(0, 50), max_size=5))
@settings(max_examples=120, deadline=None)
def test_nothing_dropped_or_invalidated_is_rendered(ops: list, picks: list[int]) -> None:  # type: ignore[type-arg]
    b = build_branch(ops)
    ids = [e.id for e in b.entries]
    invalidated = [ids[p % len(ids)] for p in picks] if ids else []
    projection = build_projection(b.entries, invalidated)
    memory, _ = build_context_blocks(b.entries, invalidated_ids=invalidated)
    hidden = projection.full.dropped | projection.invalidated_observation_ids
    for oid in hidden:
        assert f"[om:{oid}]" not in memory.text
    for rid in projection.invalidated_reflection_ids:
        assert f"[reflection:{rid}]" not in memory.text


@given(OPS, st.integers(1, 4000))
@settings(max_examples=120, deadline=None)
def test_rendered_and_folded_output_never_exceed_their_caps(ops: list, cap: int) -> None:  # type: ignore[type-arg]
    b = build_branch(ops)
    projection = build_projection(b.entries)
    text = render_observational_memory(
        projection.reflections, projection.observations, outline=["- scope"], max_bytes=cap + 200
    )
    assert len(text.encode()) <= cap + 200
    try:
        memory = create_folded_memory_details(projection.full, max_bytes=cap + 400)
    except Exception as exc:  # only the typed cap error is allowed
        from om_core.errors import CapExceededError

        assert isinstance(exc, CapExceededError)
    else:
        assert folded_payload_bytes(memory) <= cap + 400


# Secrets drawn near the redaction marker, to catch a marker that re-forms a secret.
SECRET_TEXT = st.text(alphabet="ab[]REDACT-", min_size=6, max_size=30)


@given(OPS, st.lists(SECRET_TEXT, min_size=1, max_size=3))
@settings(max_examples=120, deadline=None)
def test_a_secret_never_survives_rendering_or_recall(ops: list, secrets: list[str]) -> None:  # type: ignore[type-arg]
    # Plant the secrets in every message and memory text.
    planted = [(op, picks, text + secrets[0] + text + secrets[-1]) for op, picks, text in ops]
    b = build_branch(planted)
    memory, window = build_context_blocks(b.entries, secrets=secrets)
    for secret in secrets:
        assert secret not in memory.text
        assert secret not in window.text
    ledger = fold_ledger(b.entries)
    for item in (*ledger.observations, *ledger.reflections):
        result = recall_memory(b.entries, item.id, secrets=secrets)
        for secret in secrets:
            assert secret not in _all_strings(result.to_json_dict())


def _all_strings(value: object) -> str:
    if isinstance(value, dict):
        # Field names are the schema's, not content: only values can carry a secret.
        return "\x00".join(_all_strings(v) for v in value.values())
    if isinstance(value, list):
        return "\x00".join(_all_strings(v) for v in value)
    return str(value) if isinstance(value, str) else ""


def test_builder_makes_valid_entries() -> None:
    b = build_branch([("user", [1], "x"), ("observe", [0], "y")])
    assert all(isinstance(e, SessionEntry) for e in b.entries)
