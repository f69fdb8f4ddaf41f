"""Part I: singular values, their entropy, the uniform simplex and the theory of a typical entropy."""

from svmuon._lazy import lazy_exports

_EXPORTS = {
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
    "entropy_asymptotics": "svmuon.spectral.theory",
    "EntropyAsymptotics": "svmuon.spectral.theory",
    "entropy_density": "svmuon.spectral.small_n",
    "tempered_softmax": "svmuon.spectral.level_set",
    "spectrum_with_entropy": "svmuon.spectral.level_set",
    "entropy_statistics": "svmuon.spectral.monte_carlo",
    "EntropyStatistics": "svmuon.spectral.monte_carlo",
    "spectral_report": "svmuon.spectral.report",
    "plot_spectral_report": "svmuon.spectral.report",
    "gaussian_entropy_limit": "svmuon.spectral.random_matrix",
    "gaussian_entropy_samples": "svmuon.spectral.random_matrix",
    "marchenko_pastur_pdf": "svmuon.spectral.random_matrix",
    "marchenko_pastur_moment": "svmuon.spectral.random_matrix",
    "load_weights": "svmuon.spectral.report",
    "EntropyMonitor": "svmuon.spectral.monitor",
    "plot_entropy_frame": "svmuon.spectral.monitor",
    "gaussian_baseline": "svmuon.spectral.monitor",
}

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = sorted(_EXPORTS)
