"""Cosine after removing what a scope's vectors have in common ("all-but-the-top").

Sentence embeddings of one conversation share a few dominant directions: the mean vector and
the top principal components of the scope. A small encoder such as multilingual e5-small puts
much of a name into them (in a two-person chat most messages address the other person by
name), so a question naming a participant scores every message that says that name above the
message that answers it: the vector side cannot discount a word by how many messages contain
it the way BM25's IDF does. Subtracting the scope's mean and projecting out its top
components, from the messages and the query alike, before the cosine is the post-processing
of Mu and Viswanath ("All-but-the-Top", ICLR 2018); how many components go
(:data:`COMPONENTS_PER_100_DIMENSIONS`) is documented in docs/search.md with how it was chosen.

The statistics come from at most :data:`SAMPLE` vectors of the scope (the first the scan
yields), so their cost is bounded whatever the scope's size; a scope of fewer than
:data:`MIN_VECTORS` vectors is scored by the plain cosine, since a handful of vectors has no
directions worth trusting. They depend on the sample alone, so the process keeps the last
:data:`CACHED` of them by a digest of the sample: the eigen-decomposition (tens of
milliseconds on a busy core) is paid once per scope and version of its sample, not once per
query, and a sample that changed is simply another key.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Final

COMPONENTS_PER_100_DIMENSIONS: Final = 1.5
"""Top principal components removed per 100 dimensions of the model (6 of e5-small's 384)."""
MIN_VECTORS: Final = 64
"""Below this many vectors in the sample the scope is scored by the plain cosine."""
SAMPLE: Final = 4096
"""At most this many vectors of a scope estimate its mean and components."""
CACHED: Final = 256
"""Statistics kept per process (a few kilobytes each), least recently used first out."""
_TINY: Final = 1e-12


def components_for(dimension: int) -> int:
    """How many top principal components are removed for vectors of ``dimension`` floats."""
    return max(1, round(dimension * COMPONENTS_PER_100_DIMENSIONS / 100))


@dataclass(frozen=True)
class CommonDirections:
    """A scope's mean vector and its top principal components (rows, unit length)."""

    mean: Any
    components: Any

    def apply(self, matrix: Any) -> Any:
        """``matrix``'s rows (float32, one vector each) centred on the mean, without the
        components, at unit length again; a row left with no length stays zero."""
        np = _np()
        centred = matrix - self.mean
        kept = centred - (centred @ self.components.T) @ self.components
        norms = np.linalg.norm(kept, axis=1, keepdims=True)
        return kept / np.maximum(norms, _TINY)

    def scores(self, matrix: Any, query: Any) -> Any:
        """The cosine of each corrected row of ``matrix`` with ``query`` (already corrected by
        :meth:`apply`): what ``apply(matrix) @ query`` gives, without building the corrected
        matrix (one product with ``d x (components + 2)`` columns instead of three passes)."""
        np = _np()
        columns = np.column_stack([query, self.mean, self.components.T]).astype("float32")
        products = matrix @ columns
        # query is orthogonal to the components, so the projection leaves its dot alone.
        dots = products[:, 0] - float(self.mean @ query)
        lengths = np.einsum("ij,ij->i", matrix, matrix)
        centred = lengths - 2 * products[:, 1] + float(self.mean @ self.mean)
        along = products[:, 2:] - self.components @ self.mean
        kept = np.maximum(centred - np.einsum("ij,ij->i", along, along), 0.0)
        return dots / np.maximum(np.sqrt(kept), _TINY)


class _Cache:
    """The statistics of recent samples by digest, least recently used first out."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._lock = threading.Lock()
        self._found: OrderedDict[bytes, CommonDirections] = OrderedDict()

    def get(self, key: bytes) -> CommonDirections | None:
        with self._lock:
            found = self._found.get(key)
            if found is not None:
                self._found.move_to_end(key)
            return found

    def put(self, key: bytes, common: CommonDirections) -> None:
        with self._lock:
            self._found[key] = common
            while len(self._found) > self._size:
                self._found.popitem(last=False)


_CACHE = _Cache(CACHED)


def estimate(sample: Any) -> CommonDirections | None:
    """The common directions of ``sample`` (an ``n x d`` float32 matrix of one model's
    vectors), or ``None`` when it holds fewer than :data:`MIN_VECTORS` rows."""
    rows = sample[:SAMPLE]
    if len(rows) < MIN_VECTORS:
        return None
    mean = rows.mean(axis=0)
    # The mean, the size and the end rows name a sample: hashing all of it cost more than
    # the scoring it saves. A sample sharing all of them but ordered otherwise has the same
    # statistics, so the key can only miss, never mislead.
    digest = hashlib.blake2b(digest_size=16)
    for part in (str(rows.shape).encode(), mean.tobytes(), rows[0].tobytes(), rows[-1].tobytes()):
        digest.update(part)
    key = digest.digest()
    common = _CACHE.get(key)
    if common is None:
        common = _decompose(rows, mean)
        _CACHE.put(key, common)
    return common


def _decompose(rows: Any, mean: Any) -> CommonDirections:
    np = _np()
    centred = (rows - mean).astype("float64")
    # The eigenvectors of the d x d scatter matrix are the principal directions; eigh orders
    # them by ascending eigenvalue, so the top ones are the last columns.
    _, vectors = np.linalg.eigh(centred.T @ centred)
    count = components_for(rows.shape[1])
    top = vectors[:, ::-1][:, :count].T
    return CommonDirections(mean.astype("float32"), top.astype("float32"))


def _np() -> Any:
    import numpy

    return numpy


__all__ = [
    "CACHED",
    "COMPONENTS_PER_100_DIMENSIONS",
    "MIN_VECTORS",
    "SAMPLE",
    "CommonDirections",
    "components_for",
    "estimate",
]
