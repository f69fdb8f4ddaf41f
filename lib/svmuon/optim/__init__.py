"""torch.optim optimizers: Muon and Muon on the orthogonal group (thin shells over svmuon.orthogonal)."""

from svmuon._lazy import lazy_exports

_EXPORTS = {
    "Muon": "svmuon.optim.muon",
    "OrthogonalMuon": "svmuon.optim.manifold_muon",
}

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = sorted(_EXPORTS)
