"""svmuon: singular-value entropy and Muon on manifolds.

The library of the executable textbook in this repository. Part I (:mod:`svmuon.spectral`) measures the
entropy of normalised singular values; Part II (:mod:`svmuon.orthogonal`, :mod:`svmuon.optim`) builds
msign, Muon and Muon on the orthogonal group. Public names are loaded lazily on first use.
"""

from svmuon._lazy import lazy_exports

__version__ = "0.1.0"

_EXPORTS = {
    # Part I: spectral
    "singular_values": "svmuon.spectral.spectrum",
    "spectral_distribution": "svmuon.spectral.spectrum",
    "shannon_entropy": "svmuon.spectral.entropy",
    "renyi_entropy": "svmuon.spectral.entropy",
    "singular_value_entropy": "svmuon.spectral.entropy",
    "effective_rank": "svmuon.spectral.entropy",
    "stable_rank": "svmuon.spectral.entropy",
    "sample_simplex": "svmuon.spectral.simplex",
    "mean_field_entropy": "svmuon.spectral.theory",
    "expected_entropy": "svmuon.spectral.theory",
    "entropy_variance": "svmuon.spectral.theory",
    "delta_method_variance": "svmuon.spectral.theory",
    "expected_power_sum": "svmuon.spectral.theory",
    "entropy_statistics": "svmuon.spectral.monte_carlo",
    "EntropyStatistics": "svmuon.spectral.monte_carlo",
    "spectral_report": "svmuon.spectral.report",
    # Part II: orthogonal
    "msign": "svmuon.orthogonal.msign",
    "Orthogonal": "svmuon.orthogonal.manifolds",
    "Muon": "svmuon.optim.muon",
    "OrthogonalMuon": "svmuon.optim.manifold_muon",
}

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = sorted(_EXPORTS) + ["__version__"]
