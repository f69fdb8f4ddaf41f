"""The Stiefel manifold and its steepest direction under the spectral norm (the case m > n, the book's Part II).

On ``St(m, n) = {W ∈ R^{m×n} : WᵀW = I_n}`` the unit steepest-ascent direction solves
``max tr(GᵀΦ)`` s.t. ``‖Φ‖₂ <= 1``, ``WᵀΦ + ΦᵀW = 0`` (eq-stiefel-problem). One concept per module:

* :mod:`~svmuon.orthogonal.stiefel.reduction`: the reduced n × n problem every solver shares: the dual
  ``f(Y) = tr(M^{1/2})`` (thm-stiefel-reduction), the primal in the rotation ``Ω`` and its closed-form completion
  (prop-stiefel-primal), :class:`~svmuon.orthogonal.stiefel.reduction.StiefelSolution`;
* :mod:`~svmuon.orthogonal.stiefel.completion`: ``solver="completion"``, the default: two closed-form stages,
  feasible, within 0.64 % of the optimum at the benchmark's sampled steps of real training (up to 13 % on random
  rank-one gradients), two to three
  Muon steps on a CPU (``work_dtype=torch.float32``: cheaper, with a larger gap);
* :mod:`~svmuon.orthogonal.stiefel.newton`: ``solver="newton"``, the book's exact solver (Newton–CG on the
  smoothed dual), with its Hessian and preconditioned CG in :mod:`~svmuon.orthogonal.stiefel.hessian`;
* :mod:`~svmuon.orthogonal.stiefel.published`: the published solvers (su2025stiefel's fixed point, in both
  forms; bernstein2025stiefel's dual ascent);
* :mod:`~svmuon.orthogonal.stiefel.rank`: the rank reduction (prop-stiefel-rank), a wrapper around an exact
  solver;
* :mod:`~svmuon.orthogonal.stiefel.options`: :class:`~svmuon.orthogonal.stiefel.options.StiefelOptions`, every
  option and default, once;
* ``dispatch``: the one dispatcher both entry points share (square case, batch of one, solver, rank
  reduction, warm starts);
* :mod:`~svmuon.orthogonal.stiefel.api`: the checked functions :func:`~svmuon.orthogonal.stiefel.api.stiefel_direction`,
  :func:`~svmuon.orthogonal.stiefel.api.reduced_dual`, :func:`~svmuon.orthogonal.stiefel.api.tangent_residual`;
* :mod:`~svmuon.orthogonal.stiefel.retraction`: the polar retraction for any step length;
* :mod:`~svmuon.orthogonal.stiefel.manifold`: the manifold :class:`~svmuon.orthogonal.stiefel.manifold.Stiefel` (checked
  methods and the optimizer protocol of :mod:`svmuon.orthogonal.base`).

Imports point one way: manifold -> api/dispatch -> solvers -> reduction.
"""

from svmuon.orthogonal.stiefel.api import reduced_dual, stiefel_direction, tangent_residual
from svmuon.orthogonal.stiefel.manifold import Stiefel
from svmuon.orthogonal.stiefel.options import SOLVERS, StiefelOptions, default_tol
from svmuon.orthogonal.stiefel.reduction import StiefelSolution

__all__ = ["Stiefel", "StiefelOptions", "StiefelSolution", "SOLVERS", "default_tol", "reduced_dual",
           "stiefel_direction", "tangent_residual"]
