"""The proxy's pure parts: chain ids and the assembly of a streamed answer, fed the way bytes
arrive (lines cut anywhere, tool-call arguments in fragments)."""

from __future__ import annotations

import json

import pytest

from om_api.server.proxy.answer import AnswerBuilder, answer_message
from om_api.server.proxy.wire import ProxyInputError, next_id, read_messages

HISTORY = [
    {"role": "system", "content": "Be terse."},
    {"role": "user", "content": "hello"},
    {"role": "assistant", "content": "hi"},
    {"role": "user", "content": [{"type": "text", "text": "and now?"}]},
]


def test_chain_ids_name_the_whole_prefix() -> None:
    full = read_messages(HISTORY, "t1", "s1")
    assert full.recorded == (1, 2, 3)  # the system message is forwarded, never recorded
    assert read_messages(HISTORY[:3], "t1", "s1").ids == full.ids[:2]
    assert read_messages(HISTORY, "t1", "s2").ids[0] != full.ids[0]  # per session
    assert read_messages(HISTORY, "t2", "s1").ids[0] != full.ids[0]  # per tenant
    edited = [*HISTORY[:1], {"role": "user", "content": "HELLO"}, *HISTORY[2:]]
    assert not set(read_messages(edited, "t1", "s1").ids) & set(full.ids)
    answer = answer_message({"choices": [{"message": {"role": "assistant", "content": "ok"}}]})
    assert answer is not None
    resent = read_messages([*HISTORY, {"role": "assistant", "content": "ok"}], "t1", "s1")
    assert resent.ids[-1] == next_id(full.ids, "t1", "s1", answer)


@pytest.mark.parametrize(
    "bad",
    [
        [{"role": "robot", "content": "x"}],
        [{"content": "x"}],
        ["just text"],
        [{"role": "user", "content": 5}],
    ],
)
def test_unreadable_messages_are_named(bad: list[object]) -> None:
    with pytest.raises(ProxyInputError, match=r"messages\[0\]"):
        read_messages(bad, "t", "s")


def sse(*deltas: dict[str, object]) -> bytes:
    chunks = [{"choices": [{"index": 0, "delta": delta}]} for delta in deltas]
    return b"".join(f"data: {json.dumps(c)}\n\n".encode() for c in chunks) + b"data: [DONE]\n\n"


def test_stream_assembly_survives_any_cut() -> None:
    stream = sse(
        {"role": "assistant", "content": "Checking "},
        {"content": "the weather."},
        {
            "tool_calls": [
                {"index": 0, "id": "c1", "function": {"name": "get", "arguments": '{"ci'}}
            ]
        },
        {"tool_calls": [{"index": 0, "function": {"arguments": 'ty": "Paris"}'}}]},
    )
    for size in (1, 7, len(stream)):
        builder = AnswerBuilder()
        for start in range(0, len(stream), size):
            builder.feed(stream[start : start + size])
        message = builder.message()
        assert builder.done and message is not None
        assert message.text == "Checking the weather."
        assert [(c.id, c.name, c.arguments) for c in message.tool_calls] == [
            ("c1", "get", {"city": "Paris"})
        ]


def test_an_empty_answer_records_nothing() -> None:
    assert AnswerBuilder().message() is None
    assert answer_message({"choices": []}) is None
    assert answer_message("not an answer") is None
