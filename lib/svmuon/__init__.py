"""svmuon: singular-value entropy and Muon on manifolds.

The library of the executable textbook in this repository. Part I (:mod:`svmuon.spectral`) measures the
entropy of normalised singular values; Part II (:mod:`svmuon.orthogonal`, :mod:`svmuon.optim`) builds
msign, Muon and Muon on the orthogonal group. Every public name of those three packages is importable from
here too, e.g. ``from svmuon import singular_value_entropy, msign, Muon``; names load lazily on first use,
so ``import svmuon`` does not pull in pandas, SymPy or cvxpy.
"""

from svmuon._lazy import lazy_exports
from svmuon.optim import _EXPORTS as _OPTIM
from svmuon.orthogonal import _EXPORTS as _ORTHOGONAL
from svmuon.spectral import _EXPORTS as _SPECTRAL

__version__ = "0.1.0"

_EXPORTS = {**_SPECTRAL, **_ORTHOGONAL, **_OPTIM,
            "results": "svmuon.results"}  # the module itself: svmuon.results.read(kind, name)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = sorted(_EXPORTS) + ["__version__"]
