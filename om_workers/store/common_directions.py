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
directions worth trusting.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

COMPONENTS_PER_100_DIMENSIONS: Final = 1.5
"""Top principal components removed per 100 dimensions of the model (6 of e5-small's 384)."""
MIN_VECTORS: Final = 64
"""Below this many vectors in the sample the scope is scored by the plain cosine."""
SAMPLE: Final = 4096
"""At most this many vectors of a scope estimate its mean and components."""
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


def estimate(sample: Any) -> CommonDirections | None:
    """The common directions of ``sample`` (an ``n x d`` float32 matrix of one model's
    vectors), or ``None`` when it holds fewer than :data:`MIN_VECTORS` rows."""
    np = _np()
    rows = sample[:SAMPLE]
    if len(rows) < MIN_VECTORS:
        return None
    mean = rows.mean(axis=0)
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
    "COMPONENTS_PER_100_DIMENSIONS",
    "MIN_VECTORS",
    "SAMPLE",
    "CommonDirections",
    "components_for",
    "estimate",
]
