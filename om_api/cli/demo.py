"""``om demo``: a scripted, tool-heavy agent session driven through the real stack.

It starts the embedded stack (Redis, SQLite in a temporary directory, one worker, the API),
then plays an agent that investigates and fixes a payments service: each run is a user request
followed by rounds of assistant tool calls and tool results, with facts planted in the tool
results (a retry limit, a cron time, a customer on a legacy plan ...). After each run it does
what an agent server does: append the job's messages, ``flush()``, and wait for the job. At the
end it prints the two context blocks with their token counts against the raw history's, and
recalls one memory id the memory block shows. No LLM key is used: the worker runs the offline
``extractive`` provider.

Raises :class:`~om_api.cli.stack.StackError` or an :class:`~om_api.client.OMClientError` when
the stack or a request fails (``om demo`` then exits non-zero); the stack is always stopped.
"""

from __future__ import annotations

import json
import re
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Final

from rich.console import Console
from rich.panel import Panel
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from om_api.cli.stack import Stack, StackConfig
from om_api.client import OMClient
from om_api.schemas import ContextOut, EntryIn, MessageWire, RecallOut
from om_core.ledger.models import Message, ToolCall
from om_core.ledger.tokens import estimate_message_tokens, estimate_text_tokens
from om_workers.config import get_settings

DEMO_MEMORY_SETTINGS: Final = {
    # Small thresholds so a short demo shows every stage: each run is observed, and runs
    # are folded into reflections once enough observations pile up.
    "observation": {"messageTokens": 200},
    "reflection": {"observationTokens": 600},
    "context": {"recentMessages": 8, "observationsPoolMaxTokens": 1500},
}
JOB_TIMEOUT_S: Final = 30.0
RECALL_HINT: Final = "ACME-4411"
"""A planted fact; the demo recalls the memory that shows it, to trace it back to its source."""
_MEMORY_REF = re.compile(r"\b(?:om|reflection):[a-f0-9]{12}\b")

TASKS: Final = (
    "Customers report double charges after card retries; find out why.",
    "Check how the nightly invoice export is scheduled and whether it overlaps the retries.",
    "Look at the refund path for the ACME account, support says its taxes are wrong.",
    "Run the payment test-suite and tell me which tests are flaky.",
    "Find every place the gateway timeout is configured.",
    "Prepare the fix for the double charges: idempotency keys on retries.",
    "Check the database migration for the idempotency key column before we ship.",
    "Review the alerting thresholds for failed charges.",
    "Draft the rollout plan for the fix, staging first.",
    "Verify staging after the deploy and compare charge counts.",
    "Write the incident summary for the team.",
    "Clean up: list follow-up tickets we decided to file.",
    "One more check: confirm nothing else calls the old retry helper.",
)

FACTS: Final = (
    (
        "read_file",
        {"path": "config/payments.yaml"},
        "The gateway retry limit is 7 attempts with a 90 second backoff cap. Source: "
        "config/payments.yaml lines 12-19.",
    ),
    (
        "grep",
        {"pattern": "retry_charge", "path": "src/"},
        "The retry helper retry_charge() is called from 3 places: checkout.py, subscriptions.py "
        "and jobs/dunning.py.",
    ),
    (
        "read_file",
        {"path": "src/payments/checkout.py"},
        "Important: checkout.py creates a new charge id on every retry, because the idempotency "
        "key is built from the attempt number.",
    ),
    (
        "query_db",
        {"sql": "select count(*) from charges where duplicated"},
        "There are 1,284 duplicated charges since 2024-03-02, all from card retries.",
    ),
    (
        "read_file",
        {"path": "deploy/cron.yaml"},
        "The invoice export cron runs daily at 02:15 UTC and takes about 40 minutes.",
    ),
    (
        "query_db",
        {"sql": "select plan from accounts where id = 'ACME-4411'"},
        "Customer ACME-4411 is on the legacy tax plan TX-2019, which rounds taxes per line.",
    ),
    (
        "run_tests",
        {"suite": "payments"},
        "Test run failed: test_refund_rounding fails on leap days, 212 passed, 1 failed.",
    ),
    (
        "grep",
        {"pattern": "GATEWAY_TIMEOUT", "path": "."},
        "GATEWAY_TIMEOUT is 25 seconds in config/payments.yaml and 30 seconds in the Helm chart.",
    ),
    (
        "read_file",
        {"path": "migrations/0042_idempotency.sql"},
        "Migration 0042 adds charges.idempotency_key with a unique index, built concurrently.",
    ),
    (
        "read_file",
        {"path": "ops/alerts.yaml"},
        "The failed-charge alert fires above 2 percent over 10 minutes and pages payments.",
    ),
    (
        "run_shell",
        {"cmd": "kubectl get deploy payments -n staging"},
        "Staging runs payments v3.18.2 with 4 replicas; the rollout decision was staging first.",
    ),
    (
        "query_db",
        {"sql": "select count(*) from charges where created_at > now() - '1 day'"},
        "Staging recorded 9,870 charges in the last day and 0 duplicates after the fix.",
    ),
    (
        "run_tests",
        {"suite": "payments", "filter": "idempotency"},
        "All 14 idempotency tests passed in 6.2 seconds.",
    ),
)
QUIET: Final = (
    ("grep", "no matches"),
    ("run_shell", "exit 0"),
    ("list_dir", "3 entries"),
)
ROUNDS_PER_RUN: Final = 5
CALLS_PER_ROUND: Final = 3
BODY_LINES: Final = 36


def script(runs: int) -> Iterator[list[Message]]:
    """The scripted session, one list of messages per run (deterministic).

    Like a real coding agent: assistant turns are tool calls without prose, most tool results
    are terse, and the few that matter are bulky (a file, a query result, a test log) with the
    fact in their first sentence. The raw history is therefore large while what is worth
    remembering is small, which is the case observational memory is for.
    """
    for run in range(runs):
        messages = [Message(role="user", content=TASKS[run % len(TASKS)])]
        for step in range(ROUNDS_PER_RUN):
            calls, results = _round(run, step)
            messages.append(Message(role="assistant", content="", tool_calls=tuple(calls)))
            messages.extend(results)
        messages.append(
            Message(role="assistant", content=f"Done with run {run + 1}: {_conclusion(run)}")
        )
        yield messages


def _round(run: int, step: int) -> tuple[list[ToolCall], list[Message]]:
    calls: list[ToolCall] = []
    results: list[Message] = []
    for slot in range(CALLS_PER_ROUND):
        call_id = f"call-{run}-{step}-{slot}"
        if slot == 0 and step == 0:
            name, arguments, fact = FACTS[run % len(FACTS)]
            text = f"{fact}\n{_body(name, run)}"
        else:
            name, text = QUIET[(run + step + slot) % len(QUIET)]
            arguments = {"target": f"src/payments/part_{run}_{step}_{slot}.py"}
        calls.append(ToolCall(id=call_id, name=name, arguments=arguments))
        results.append(Message(role="tool", content=text, tool_call_id=call_id, tool_name=name))
    return calls, results


def _body(name: str, run: int) -> str:
    # The bulk a real tool returns around the one line that matters.
    return "\n".join(
        f"{name} | {run:02d}:{line:03d} | charge_id=ch_{run}{line:04d} status=ok amount={line * 7}"
        for line in range(BODY_LINES)
    )


def _conclusion(run: int) -> str:
    name, _, fact = FACTS[run % len(FACTS)]
    return f"the key finding came from {name}: {fact.split('. ')[0].rstrip('.')}."


def to_wire(message: Message) -> MessageWire:
    """The core message as the API's wire model (snake_case keys)."""
    return MessageWire.model_validate(message.model_dump(mode="json", exclude_none=True))


def run_demo(runs: int = 12, console: Console | None = None) -> None:
    """Run the whole demo (see the module docstring); returns when the stack has stopped."""
    out = console or Console()
    settings = get_settings()
    with tempfile.TemporaryDirectory(prefix="om-demo-") as tmp:
        config = StackConfig(
            database_url=f"sqlite:///{Path(tmp) / 'demo.db'}",
            redis_url=settings.redis.url,
            api_port=0,
            beat=False,
            flower=False,
            env={
                "OM_PROVIDER": "extractive",
                "OM_MODEL": "extractive",
                "OM_SETTINGS_JSON": json.dumps(DEMO_MEMORY_SETTINGS),
                "OM_WORKER_CONCURRENCY": "2",
            },
        )
        out.rule("om demo: embedded stack")
        with Stack(config, say=out.print) as stack:
            info = stack.info
            with OMClient(info.api_url, info.api_key) as client:
                _drive(client, runs, out)
        out.print("[green]stack stopped; demo finished[/green]")


def _drive(client: OMClient, runs: int, out: Console) -> None:
    session_id = f"demo-{uuid.uuid4().hex[:12]}"
    client.create_session(session_id, {"source": "om demo"})
    all_runs = list(script(runs))
    total = sum(len(r) for r in all_runs)
    raw_tokens = sum(estimate_message_tokens(m) for r in all_runs for m in r)
    out.rule(f"agent session {session_id}: {runs} runs, {total} messages")
    progress = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=out,
    )
    with progress:
        bar = progress.add_task("appending", total=total)
        for number, messages in enumerate(all_runs, start=1):
            # Stable ids: re-sending a run after an error appends nothing twice.
            entries = [
                EntryIn(id=f"r{number:02d}-m{i:03d}", kind="message", message=to_wire(m))
                for i, m in enumerate(messages)
            ]
            client.append(session_id, entries)
            accepted = client.flush(session_id)
            progress.update(bar, description=f"run {number}/{runs}: flush {accepted.job_id[:8]}")
            job = client.wait_for_job(accepted.job_id, JOB_TIMEOUT_S)
            progress.update(bar, advance=len(messages), description=f"run {number}: {job.state}")
    context = client.context(session_id)
    _print_context(out, context, raw_tokens, total)
    _print_recall(out, client, session_id, context)


def _print_context(out: Console, context: ContextOut, raw_tokens: int, messages: int) -> None:
    table = Table(title="context for the next turn vs the raw history")
    table.add_column("block")
    table.add_column("tokens", justify="right")
    shown = 0
    for block in context.blocks:
        tokens = estimate_text_tokens(block.text)
        shown += tokens
        # Text, not markup: rendered memory holds "[om:<id>]" which rich would eat as a tag.
        out.print(Panel(Text(block.text or "(empty)"), title=f"{block.id}: {tokens} tokens"))
        table.add_row(block.id, str(tokens))
    table.add_row("context total", str(shown))
    table.add_row(f"raw history ({messages} messages)", str(raw_tokens))
    out.print(table)
    ratio = shown / raw_tokens if raw_tokens else 0.0
    out.print(f"context is {ratio:.1%} of the raw history's tokens")


def _print_recall(out: Console, client: OMClient, session_id: str, context: ContextOut) -> None:
    memory = next(b for b in context.blocks if b.id == "observational-memory")
    ref = pick_recall_ref(memory.text)
    result = client.recall(session_id, ref)
    out.print(Panel(Text(_render_recall(ref, result)), title=f"recall {ref}"))


def pick_recall_ref(memory_text: str) -> str:
    """The memory id to recall: the one shown next to a planted fact (:data:`RECALL_HINT`),
    else the last id shown. Raises ``RuntimeError`` when the text shows no id at all."""
    refs = _MEMORY_REF.findall(memory_text)
    if not refs:
        raise RuntimeError("the observational-memory block shows no memory id to recall")
    for line in memory_text.splitlines():
        found = _MEMORY_REF.findall(line)
        if found and RECALL_HINT in line:
            return str(found[0])
    return str(refs[-1])


def _render_recall(ref: str, result: RecallOut) -> str:
    lines = [f"{result.kind or 'memory'} {ref}: found={result.found}", f"text: {result.text}"]
    if result.supporting_observation_ids:
        lines.append(f"supporting observations: {', '.join(result.supporting_observation_ids)}")
    lines.append(f"source entries: {', '.join(result.source_entry_ids)}")
    for source in result.sources[:6]:
        if source.message is not None:
            content = source.message.content
            text = content if isinstance(content, str) else " ".join(p.text or "" for p in content)
            lines.append(f"  {source.id} [{source.message.role}] {' '.join(text.split())[:120]}")
    return "\n".join(lines)
