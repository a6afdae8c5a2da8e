"""5. Fold and render: entries per second, against json.loads / orjson.loads of the same bytes."""

from __future__ import annotations

import json

import orjson

from om_core import SessionEntry, build_context_blocks, fold_ledger

from .common import Section, best_of
from .synthetic import branch

N = 100_000


def run() -> Section:
    section = Section("5. Fold and render (100,000-entry branch)")
    entries = branch(N)
    wire = [json.dumps(e.to_json_dict()).encode() for e in entries]

    json_s = best_of(lambda: [json.loads(b) for b in wire])
    orjson_s = best_of(lambda: [orjson.loads(b) for b in wire])
    parse_s = best_of(lambda: [SessionEntry.model_validate_json(b) for b in wire])
    fold_s = best_of(lambda: fold_ledger(entries))
    context_s = best_of(lambda: build_context_blocks(entries))

    section.add("parse to SessionEntry", N / parse_s, "entries/s", "json.loads", N / json_s)
    section.add("fold_ledger", N / fold_s, "entries/s", "json.loads", N / json_s)
    section.add("fold_ledger", N / fold_s, "entries/s", "orjson.loads", N / orjson_s)
    section.add("build_context_blocks", N / context_s, "entries/s", "orjson.loads", N / orjson_s)
    section.notes.append(
        f"fold {fold_s * 1000:.0f} ms and context {context_s * 1000:.0f} ms for {N:,} entries "
        f"({len(fold_ledger(entries).observations):,} observations); best of 3."
    )
    return section
