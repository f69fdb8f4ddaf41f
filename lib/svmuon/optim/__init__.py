"""torch.optim optimizers: Muon and Muon on manifolds (thin shells over :mod:`svmuon.optim.functional`)."""

from svmuon._lazy import lazy_exports

_EXPORTS = {
    "Muon": "svmuon.optim.muon",
    "ManifoldMuon": "svmuon.optim.manifold_muon",
    "OrthogonalMuon": "svmuon.optim.manifold_muon",
    "NonFiniteUpdateError": "svmuon.optim.plan",
    "OffManifoldError": "svmuon.optim.plan",
}

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = sorted(_EXPORTS)
