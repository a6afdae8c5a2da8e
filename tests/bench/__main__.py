"""``make bench``: run every benchmark, print the figures, write results.md and results.png.

``python -m tests.bench fidelity locomo`` (or the module names, ``bench_fidelity``) runs only
the named benchmarks and replaces only their sections of results.md, keeping the others.
"""

from __future__ import annotations

import sys
import time

from . import (
    bench_coalesce,
    bench_console,
    bench_context,
    bench_erase,
    bench_fairness,
    bench_fidelity,
    bench_fold,
    bench_history,
    bench_locomo,
    bench_mcp,
    bench_portability,
    bench_proxy,
    bench_scopes,
    bench_search,
    bench_semantic,
    bench_tracing,
    bench_turns,
    bench_usage,
    bench_webhooks,
    bench_workers,
)
from .common import Section, write_results

BENCHMARKS = [
    bench_workers,
    bench_fold,
    bench_context,
    bench_coalesce,
    bench_fidelity,
    bench_locomo,
    bench_history,
    bench_fairness,
    bench_erase,
    bench_portability,
    bench_turns,
    bench_scopes,
    bench_search,
    bench_semantic,
    bench_mcp,
    bench_usage,
    bench_webhooks,
    bench_tracing,
    bench_console,
    bench_proxy,
]


def main() -> int:
    only = {name.removeprefix("bench_") for name in sys.argv[1:]}
    known = {module.__name__.rsplit(".", 1)[-1].removeprefix("bench_") for module in BENCHMARKS}
    if only - known:
        print(
            f"unknown benchmark(s): {', '.join(sorted(only - known))}; known: "
            f"{', '.join(sorted(known))}",
            file=sys.stderr,
        )
        return 2
    sections: list[Section] = []
    for module in BENCHMARKS:
        name = module.__name__.rsplit(".", 1)[-1]
        if only and name.removeprefix("bench_") not in only:
            continue
        print(f"== {name}", flush=True)
        start = time.perf_counter()
        sections.append(module.run())
        print(f"   ({time.perf_counter() - start:.1f} s)", flush=True)
    write_results(sections, merge=bool(only))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
