"""Context, recall, messages, status, view, compaction, revocations over real HTTP."""

from __future__ import annotations

import re

from om_workers.config import DEFAULT_CONTEXT_MAX_TOKENS
from tests.api.seed import OBS2_ID, OBS_ID, REF_ID, message, seeded_session
from tests.api.server import LiveApi


def test_context_blocks(api: LiveApi) -> None:
    tid, client = api.tenant()
    seeded_session(client, "s", tid, messages=30)
    answer = client.get("/v1/sessions/s/context")
    assert answer.status_code == 200, answer.text
    memory, recent = answer.json()["blocks"]
    assert memory["id"] == "observational-memory" and "blue-green" in memory["text"]
    assert "entry_ids" not in memory or memory["entry_ids"] is None
    assert recent["id"] == "recent-messages" and recent["entry_ids"][-1] == f"{tid}29"
    assert "turn 29" in recent["text"]
    scoped = client.get("/v1/sessions/s/context", params={"include": "lineage"})
    assert scoped.status_code == 200
    assert client.get("/v1/sessions/s/context", params={"include": "all"}).status_code == 422
    unknown = client.get("/v1/sessions/s/context", params={"scope": "task:none"})
    assert unknown.status_code == 422 and "task:none" in unknown.json()["detail"]
    empty = client.post("/v1/sessions", json={"id": "empty"})
    assert empty.status_code == 201
    blocks = client.get("/v1/sessions/empty/context").json()["blocks"]
    assert [b["text"] for b in blocks] == ["", ""]


def test_recall(api: LiveApi) -> None:
    tid, client = api.tenant()
    seeded_session(client, "s", tid)
    observation = client.get(f"/v1/sessions/s/memory/{OBS_ID}").json()
    assert observation["found"] and observation["kind"] == "observation"
    assert observation["source_entry_ids"] == [f"{tid}0"]
    assert [e["id"] for e in observation["sources"]] == [f"{tid}0"]
    reflection = client.get(f"/v1/sessions/s/memory/reflection:{REF_ID}").json()
    assert reflection["kind"] == "reflection"
    assert reflection["supporting_observation_ids"] == [OBS_ID, OBS2_ID]
    missing = client.get("/v1/sessions/s/memory/ffffffffffff").json()
    assert missing == {**missing, "found": False, "reason": "not_found"}
    for bad in ("xyz", "FFFFFFFFFFFF", "0000000000a", "om:zz"):
        answer = client.get(f"/v1/sessions/s/memory/{bad}")
        assert answer.status_code == 422, bad
    assert client.get(f"/v1/sessions/none/memory/{OBS_ID}").status_code == 404


def test_messages_paging(api: LiveApi) -> None:
    tid, client = api.tenant()
    seeded_session(client, "s", tid, messages=10)
    url = "/v1/sessions/s/messages"
    page = client.get(url, params={"cursor": f"{tid}0", "limit": 3}).json()
    assert [i["entry_id"] for i in page["items"]] == [f"{tid}{i}" for i in (1, 2, 3)]
    assert page["has_more"] and page["next_cursor"] == f"{tid}3"
    assert all(i["message"] is None for i in page["items"])
    back = client.get(
        url, params={"cursor": f"{tid}5", "direction": "backward", "detail": "full"}
    ).json()
    assert [i["entry_id"] for i in back["items"]][-1] == f"{tid}4"
    assert back["items"][0]["message"]["role"] == "user" and not back["has_more"]
    for params in (
        {"cursor": f"{tid}0", "limit": 101},
        {"cursor": f"{tid}0", "limit": 0},
        {"cursor": f"{tid}0", "direction": "sideways"},
        {"cursor": f"{tid}0", "detail": "everything"},
        {"cursor": "unknown"},
        {"cursor": f"{tid}-obs"},  # not a message
        {},
    ):
        answer = client.get(url, params=params)
        assert answer.status_code == 422, (params, answer.text)


def test_status_and_view(api: LiveApi) -> None:
    tid, client = api.tenant()
    seeded_session(client, "s", tid)
    status = client.get("/v1/sessions/s/status").json()
    assert status["recorded_observations"] == 2 and status["recorded_reflections"] == 1
    assert status["in_flight"] is False and status["text"]
    visible = client.get("/v1/sessions/s/view").json()
    full = client.get("/v1/sessions/s/view", params={"mode": "full"}).json()
    assert visible["mode"] == "visible" and full["mode"] == "full"
    assert "blue-green" in full["text"]
    assert client.get("/v1/sessions/s/view", params={"mode": "raw"}).status_code == 422
    assert client.get("/v1/sessions/none/status").status_code == 404


def test_compact_appends_the_compaction_entry(api: LiveApi) -> None:
    tid, client = api.tenant()
    seeded_session(client, "s", tid, messages=12)
    answer = client.post("/v1/sessions/s/compact", json={"keep_recent_entries": 4})
    assert answer.status_code == 201, answer.text
    entry = answer.json()
    assert entry["kind"] == "compaction" and "blue-green" in entry["summary"]
    assert entry["data"]["strategy"] == "observational-memory"
    assert len(entry["data"]["keepEntryIds"]) == 4
    assert client.get("/v1/sessions/s").json()["leaf_id"] == entry["id"]
    # Defaults without a body; the context still renders after compaction.
    assert client.post("/v1/sessions/s/compact").status_code == 201
    assert client.get("/v1/sessions/s/context").status_code == 200
    too_many = client.post("/v1/sessions/s/compact", json={"keep_recent_entries": -1})
    assert too_many.status_code == 422


def test_revocations_drop_and_withhold(api: LiveApi) -> None:
    tid, client = api.tenant()
    seeded_session(client, "s", tid)
    answer = client.post("/v1/sessions/s/revocations", json={"entry_ids": [f"{tid}0"]})
    assert answer.status_code == 200, answer.text
    assert answer.json() == {"dropped_observation_ids": [OBS_ID], "tombstoned_ids": [f"{tid}0"]}
    recalled = client.get(f"/v1/sessions/s/memory/{OBS_ID}").json()
    assert recalled["found"] is False and recalled["reason"] == "revoked"
    again = client.post("/v1/sessions/s/revocations", json={"entry_ids": [f"{tid}0"]}).json()
    assert again == {"dropped_observation_ids": [], "tombstoned_ids": []}
    for body in ({"entry_ids": []}, {"entry_ids": ["bad id"]}, {"ids": ["x"]}):
        assert client.post("/v1/sessions/s/revocations", json=body).status_code == 422


def test_secrets_are_redacted_from_answers(api: LiveApi) -> None:
    tid, client = api.tenant()
    key = str(client.headers["authorization"]).removeprefix("Bearer ")
    client.post("/v1/sessions", json={"id": "s"})
    entries = [message(f"{tid}-leak", "user", f"my key is {key}")]
    client.post("/v1/sessions/s/entries", json={"entries": entries})
    recent = client.get("/v1/sessions/s/context").json()["blocks"][1]["text"]
    assert key not in recent and "[REDACTED]" in recent


def test_context_shows_every_unobserved_message_and_names_what_a_budget_leaves_out(
    api: LiveApi,
) -> None:
    tid, client = api.tenant()
    seeded_session(client, "s", tid, messages=30)
    late = [
        message(f"{tid}late{i}", "user", f"late message {i} " + "word " * 40) for i in range(40)
    ]
    assert client.post("/v1/sessions/s/entries", json={"entries": late}).status_code == 201
    whole = client.get("/v1/sessions/s/context").json()
    unobserved = whole["unobserved"]
    assert unobserved["messages"] >= 40 and unobserved["tokens"] > 0
    shown = whole["blocks"][1]["entry_ids"]
    assert {f"{tid}late{i}" for i in range(40)} <= set(shown) and whole["gap"] is None
    assert whole["max_tokens"] == DEFAULT_CONTEXT_MAX_TOKENS
    requested = len(api.published.calls)
    tight = client.get("/v1/sessions/s/context", params={"max_tokens": 600}).json()
    gap, tight_ids = tight["gap"], tight["blocks"][1]["entry_ids"]
    assert gap is not None and gap["cursor"] == tight_ids[0]
    assert gap["messages"] + len(tight_ids) >= unobserved["messages"]
    assert f"page them backward from entry {gap['cursor']}" in tight["blocks"][0]["text"]
    assert len(api.published.calls) == requested + 1  # an observation was requested
    for bad in (0, 255, 1_000_001, "many"):
        answer = client.get("/v1/sessions/s/context", params={"max_tokens": bad})
        assert answer.status_code == 422, bad


def test_memory_a_budget_leaves_out_is_listed_and_a_reflection_is_requested(
    api: LiveApi,
) -> None:
    tid, client = api.tenant()
    client.post("/v1/sessions", json={"id": "s"})
    turns = [message(f"{tid}m{i}", "user", f"fact {i}: " + "detail " * 20) for i in range(60)]
    # What an observer would record: one observation per message, no reflection yet.
    observed = {
        "type": "om.observations.recorded",
        "observations": [
            {"id": f"{i:012x}", "text": f"User said fact {i}: " + "detail " * 20,
             "sourceEntryIds": [f"{tid}m{i}"]}
            for i in range(60)
        ],
        "coversUpToId": f"{tid}m59",
    }  # fmt: skip
    entries = [*turns, {"id": f"{tid}-obs", "kind": "custom", "data": observed}]
    assert client.post("/v1/sessions/s/entries", json={"entries": entries}).status_code == 201
    whole = client.get("/v1/sessions/s/context").json()
    assert whole["blocks"][0]["text"].count("\n- [om:") == 60 - len(whole["blocks"][1]["entry_ids"])
    requested = len(api.published.calls)
    tight = client.get("/v1/sessions/s/context", params={"max_tokens": 1_200}).json()
    memory, recent = tight["blocks"]
    shown_or_listed = set(re.findall(r"\[om:([0-9a-f]{12})\]", memory["text"]))
    recent_ids = set(recent["entry_ids"])
    for i in range(60):  # every message shown, or one recall of an id in the block away
        assert f"{i:012x}" in shown_or_listed or f"{tid}m{i}" in recent_ids, i
    assert "memories left out" in memory["text"] and "recall these by id" in memory["text"]
    assert len(api.published.calls) == requested + 1
    job = client.get(f"/v1/jobs/{api.published.calls[-1][2]}").json()
    assert job["force"] is True and job["full_reflection_rebuild"] is True
