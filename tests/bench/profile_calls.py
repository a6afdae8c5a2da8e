"""The CPU of one context read and one append, in process, on the agent-turns shape: a session
grows by the turns of :mod:`tests.bench.bench_turns` (4 messages, one a 1 KB tool output),
and each turn reads the context (after the previous turn's append, as an agent does) and
appends. No HTTP, no other process: the figures are the store's and the core's own.

Prints the median CPU of each call over turns 20 to 60 of 20 sessions (the unobserved tail
an agent sees before the observer's 10,000 tokens), then a cProfile summary of where those
calls spent it: a share of the call's time in each part (parts overlap: a read's SQL is
inside the read).

``python -m tests.bench.profile_calls [--backend sqlite|postgresql]``
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import pstats
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from om_api.schemas import AppendEntriesRequest
from om_api.server.convert import to_entry
from om_core.settings import resolve_settings
from om_workers.reads import session_context
from om_workers.store import AccountStore, SqlStore, upgrade

from .bench_history import postgres_url
from .bench_turns import turn_body

SESSIONS = 20
WARM_TURNS = 20
MEASURED_TURNS = 40
PARTS: dict[str, tuple[tuple[str, str], ...]] = {
    # (the file's ending, the function): each part counted once, at its outermost frame.
    "SQL (SQLAlchemy and the driver)": (("sqlalchemy/engine/base.py", "_execute_context"),),
    "store reads (one read transaction)": (("store/session_reads.py", "read_context_parts"),),
    "rendering messages": (("read/window.py", "render_message"),),
    "fitting memory": (("read/context_memory.py", "render_reachable"),),
    "the recent block and its budget": (("read/context.py", "_fitted_recent"),),
    "token estimates": (("ledger/tokens.py", "estimate_entry_tokens"),),
    "append plan (ids, parents, rows)": (("ledger/append_plan.py", "plan_append"),),
    "wire to entries (validation)": (("server/convert.py", "to_entry"),),
}


@contextlib.contextmanager
def _database(backend: str) -> Iterator[str]:
    if backend == "postgresql":
        with postgres_url() as url:
            if url is None:
                raise SystemExit("postgresql not reachable")
            yield url
        return
    with tempfile.TemporaryDirectory() as folder:
        yield f"sqlite:///{Path(folder) / 'calls.db'}"


def _cpu_ms(call: Callable[[], object]) -> float:
    started = time.thread_time()
    call()
    return (time.thread_time() - started) * 1000


def measure(backend: str) -> tuple[list[float], list[float], cProfile.Profile, cProfile.Profile]:
    """CPU ms of each measured context read and append, and a profile of each kind."""
    with _database(backend) as url:
        upgrade(url)
        store = SqlStore.from_url(url)
        tenant = AccountStore(store.engine).create_tenant("calls").id
        settings = resolve_settings()
        sessions = [f"calls-{n}" for n in range(SESSIONS)]
        for session in sessions:
            store.create_session(tenant, session)
        reads: list[float] = []
        appends: list[float] = []
        read_profile, append_profile = cProfile.Profile(), cProfile.Profile()
        for turn in range(WARM_TURNS + MEASURED_TURNS):
            for n, session in enumerate(sessions):
                body = AppendEntriesRequest.model_validate(turn_body(n, turn))

                def read(session: str = session) -> object:
                    return session_context(store, tenant, session, settings=settings)

                def append(session: str = session, body: AppendEntriesRequest = body) -> object:
                    entries = [to_entry(entry, session) for entry in body.entries]
                    return store.append_entries(tenant, session, entries)

                if turn < WARM_TURNS:
                    read()
                    append()
                    continue
                reads.append(_cpu_ms(read))
                appends.append(_cpu_ms(append))
                read_profile.runcall(read)
                append_profile.runcall(append)
        store.close()
    return reads, appends, read_profile, append_profile


def _shares(profile: cProfile.Profile, top: tuple[str, str]) -> dict[str, float]:
    """Each part's cumulative time as a share of ``top`` (a file's ending and a function)."""
    stats = pstats.Stats(profile).stats  # type: ignore[attr-defined]
    cumulative: dict[str, float] = {}
    total = 0.0
    for (filename, _, name), (_, _, _, cum, _) in stats.items():
        if filename.endswith(top[0]) and name == top[1]:
            total += cum
        for part, places in PARTS.items():
            if any(filename.endswith(end) and name == function for end, function in places):
                cumulative[part] = cumulative.get(part, 0.0) + cum
    return {part: 100 * seconds / total for part, seconds in cumulative.items() if total}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="sqlite", choices=("sqlite", "postgresql"))
    args = parser.parse_args()
    reads, appends, read_profile, append_profile = measure(args.backend)
    print(f"{args.backend}: {len(reads)} context reads and appends (turns {WARM_TURNS}-"
          f"{WARM_TURNS + MEASURED_TURNS} of {SESSIONS} sessions)")  # fmt: skip
    print(f"context read: median {statistics.median(reads):.2f} ms CPU, "
          f"p90 {statistics.quantiles(reads, n=10)[-1]:.2f} ms")  # fmt: skip
    print(f"append: median {statistics.median(appends):.2f} ms CPU, "
          f"p90 {statistics.quantiles(appends, n=10)[-1]:.2f} ms")  # fmt: skip
    for title, profile, top in (
        ("context read", read_profile, ("om_workers/reads.py", "session_context")),
        ("append", append_profile, ("om_workers/store/store.py", "append_entries")),
    ):
        print(f"| part of a {title} (cProfile) | share |")
        print("| --- | ---: |")
        for part, share in sorted(_shares(profile, top).items(), key=lambda kv: -kv[1]):
            print(f"| {part} | {share:.0f}% |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
