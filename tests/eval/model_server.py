"""A local OpenAI-compatible chat-completions server that answers like a tiny, honest model.

Requests offering tools (the memory workers) get a turn without tool calls. An answer request
(system prompt with ``<context>``) gets the first ``answers`` value whose key appears in the
question, else "not mentioned". A judge request gets ``{"label": "CORRECT"}`` when the
generated answer equals the gold answer (case-insensitive), else WRONG.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.threads import serving as serving_thread

_JUDGE = re.compile(r"Question: (.*)\nGold answer: (.*)\nGenerated answer: (.*)\n")


def _reply(body: Mapping[str, Any], answers: Mapping[str, str]) -> str:
    messages = body.get("messages", [])
    if body.get("tools"):
        return ""
    last = str(messages[-1]["content"])
    judged = _JUDGE.search(last)
    if judged:
        gold, generated = judged.group(2).strip(), judged.group(3).strip()
        label = "CORRECT" if gold.lower() == generated.lower() else "WRONG"
        return f'Compared the two. {{"label": "{label}"}}'
    return next((a for key, a in answers.items() if key in last), "not mentioned")


@contextmanager
def serving(answers: Mapping[str, str]) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """Run the server on 127.0.0.1 (any port); yields its base URL and the request bodies."""
    seen: list[dict[str, Any]] = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            return

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("content-length", "0"))))
            seen.append(body)
            content = _reply(body, answers)
            payload = json.dumps(
                {"choices": [{"message": {"role": "assistant", "content": content}}]}
            ).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    with serving_thread(httpd):
        yield f"http://127.0.0.1:{httpd.server_address[1]}", seen
