"""Part II: msign (the polar factor) by SVD and Newton–Schulz, and the manifolds ``WᵀW = I``."""

from svmuon._lazy import lazy_exports

_EXPORTS = {
    "msign": "svmuon.orthogonal.msign",
    "Orthogonalizer": "svmuon.orthogonal.msign",
    "Manifold": "svmuon.orthogonal.base",
    "Orthogonal": "svmuon.orthogonal.manifolds",
    "Stiefel": "svmuon.orthogonal.stiefel",
    "StiefelOptions": "svmuon.orthogonal.stiefel",
    "stiefel_direction": "svmuon.orthogonal.stiefel",
    "StiefelSolution": "svmuon.orthogonal.stiefel",
    "stiefel_direction_sdp": "svmuon.orthogonal.references",
    "sym": "svmuon.orthogonal.manifolds",
    "skew": "svmuon.orthogonal.manifolds",
}

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = sorted(_EXPORTS)

# The function shadows its same-named module, so `from svmuon.orthogonal import msign` gives the function.
from svmuon.orthogonal.msign import msign  # noqa: E402,F401
