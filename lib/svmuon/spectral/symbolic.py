"""SymPy derivations behind the typical entropy of a uniformly random distribution.

Every function here *computes* its result with SymPy (integrates, differentiates, takes a limit or a
series) and returns the expression the chapters display; :mod:`svmuon.spectral.theory` holds the
numeric versions. The symbols are the module attributes ``n`` (dimension, a positive integer), ``q``
(Rényi order, positive), ``x`` (an Exp(1) draw) and ``s``, ``a``, ``b`` (moment exponents).

Routes, chosen so that each call takes well under a few seconds:

* Exp(1) moments E[x^s] = Γ(s+1) by direct integration; E[x log x] as d/ds E[x^s] at s = 1 (SymPy's
  direct ``integrate(x log x e^{-x})`` also gives 1 - γ but takes about a minute).
* Finite-n Shannon moments as derivatives of Beta/Dirichlet normalising constants with respect to an
  exponent: E[p^s] = Γ(s+1)Γ(n)/Γ(n+s) for the Beta(1, n-1) marginal, so E[p log p] = ∂_s at s = 1 and
  E[p² log² p] = ∂²_s at s = 2; E[p_1^{a-1} p_2^{b-1}] = Γ(n)Γ(a)Γ(b)/Γ(a+b+n-2) for the Dirichlet(1, 1,
  n-2) pair marginal, so E[p_1 log p_1 · p_2 log p_2] = ∂_a ∂_b at a = b = 2.
* The delta-method variance from the gradient of H_q(u, v) (``sympy.diff``) and the covariance matrix of
  (u, v) built from the Exp(1) moments above.

References: su2025entropy, meurer2017sympy, kotz2000continuous.
"""

from __future__ import annotations

from functools import lru_cache

import sympy as sp

__all__ = [
    "n",
    "q",
    "x",
    "exp_moment",
    "exp_mean_x_log_x",
    "exp_cov_x_xq",
    "mean_field_renyi",
    "mean_field_shannon",
    "delta_method_variance",
    "delta_method_variance_at",
    "exact_expected_entropy",
    "exact_entropy_variance",
    "exact_expected_power_sum",
    "large_n_series",
]

n = sp.Symbol("n", integer=True, positive=True)
q = sp.Symbol("q", positive=True)
x = sp.Symbol("x", positive=True)
s, a, b = sp.symbols("s a b", positive=True)
u, v = sp.symbols("u v", positive=True)


@lru_cache(maxsize=None)
def exp_moment(order: sp.Expr = q) -> sp.Expr:
    """E[x^order] for x ~ Exp(1), by integrating x^order e^{-x} over (0, ∞): Γ(order + 1)."""
    return sp.simplify(sp.integrate(x**s * sp.exp(-x), (x, 0, sp.oo), conds="none").subs(s, order))


@lru_cache(maxsize=None)
def exp_mean_x_log_x() -> sp.Expr:
    """E[x log x] for x ~ Exp(1), as d/ds E[x^s] at s = 1 (x^s log x = ∂_s x^s): 1 - γ."""
    return sp.simplify(sp.expand_func(sp.diff(exp_moment(s), s).subs(s, 1)))


@lru_cache(maxsize=None)
def exp_cov_x_xq() -> sp.Expr:
    """Cov[x, x^q] = E[x^{q+1}] - E[x] E[x^q] for x ~ Exp(1): q Γ(q+1)."""
    return sp.gammasimp(exp_moment(q + 1) - exp_moment(sp.Integer(1)) * exp_moment(q))


@lru_cache(maxsize=None)
def mean_field_renyi() -> sp.Expr:
    """Mean-field E[H_q] ≈ [q log Σ E[x_i] - log Σ E[x_i^q]] / (q-1) = log n - log Γ(q+1)/(q-1).

    Book equation ``eq-renyi-mean-field``: each sum of Exp(1) draws is replaced by n times its mean.
    """
    expr = (q * sp.log(n * exp_moment(sp.Integer(1))) - sp.log(n * exp_moment(q))) / (q - 1)
    expr = sp.expand(sp.expand_log(expr, force=True))
    return sp.collect(expr, sp.log(n), sp.factor)


@lru_cache(maxsize=None)
def mean_field_shannon() -> sp.Expr:
    """The q -> 1 limit of :func:`mean_field_renyi`: log n - (1 - γ) (book equation ``eq-mean-field``)."""
    gap = sp.limit(sp.log(n) - mean_field_renyi(), q, 1)
    return sp.log(n) - gap


@lru_cache(maxsize=None)
def delta_method_variance() -> sp.Expr:
    """First-order (delta-method) Var[H_q] from the linearisation in u = mean(x), v = mean(x^q).

    H_q = log n + [q log u - log v]/(q-1); its gradient at (E u, E v) = (1, Γ(q+1)) is taken with
    ``sympy.diff`` and contracted with Cov[(u, v)] = [[1, qΓ(q+1)], [qΓ(q+1), Γ(2q+1) - Γ(q+1)²]] / n,
    whose entries come from :func:`exp_moment` and :func:`exp_cov_x_xq` (book equation ``eq-delta-variance``).
    """
    H = sp.log(n) + (q * sp.log(u) - sp.log(v)) / (q - 1)
    point = {u: exp_moment(sp.Integer(1)), v: exp_moment(q)}
    grad = sp.Matrix([sp.diff(H, u), sp.diff(H, v)]).subs(point)
    var_u = exp_moment(sp.Integer(2)) - exp_moment(sp.Integer(1)) ** 2
    var_v = exp_moment(2 * q) - exp_moment(q) ** 2
    cov = sp.Matrix([[var_u, exp_cov_x_xq()], [exp_cov_x_xq(), var_v]]) / n
    quadratic_form = sp.factor_terms(sp.expand((grad.T * cov * grad)[0, 0]))
    numer, denom = sp.fraction(quadratic_form)
    return numer / sp.factor(denom)  # (Γ(2q+1)/Γ(q+1)² - q² - 1) / (n (q-1)²)


@lru_cache(maxsize=None)
def delta_method_variance_at(order: sp.Expr) -> sp.Expr:
    """:func:`delta_method_variance` at q = ``order``; at q = 1 the limit q -> 1, i.e. (π²/3 - 3)/n."""
    order = sp.sympify(order)
    expr = delta_method_variance()
    value = sp.limit(expr * n, q, order) / n if order == 1 else expr.subs(q, order)
    return sp.simplify(value)


def _beta_power_moment(order: sp.Expr) -> sp.Expr:
    """E[p^order] for p ~ Beta(1, n-1): (n-1) B(order+1, n-1)."""
    return (n - 1) * sp.gamma(order + 1) * sp.gamma(n - 1) / sp.gamma(order + n)


@lru_cache(maxsize=None)
def exact_expected_entropy() -> sp.Expr:
    """Exact E[H] = -n E[p log p] with p ~ Beta(1, n-1): ψ(n+1) - ψ(2) = ψ(n+1) - 1 + γ (= H_n - 1)."""
    e_plogp = sp.diff(_beta_power_moment(s), s).subs(s, 1)
    return sp.simplify(sp.gammasimp(-n * e_plogp))


@lru_cache(maxsize=None)
def exact_entropy_variance() -> sp.Expr:
    """Exact Var[H] = (π²/3 - 2)/(n+1) - 1/(n+1)² - ψ'(n+2), derived and certified.

    E[H²] = n E[p_1² log² p_1] + n(n-1) E[p_1 log p_1 p_2 log p_2] with both expectations taken as
    derivatives of Beta/Dirichlet normalising constants; subtracting E[H]² and expanding the polygammas
    with ``expand_func`` SymPy proves the difference to the compact form is 0 (else RuntimeError).
    """
    e2 = sp.gammasimp(sp.diff(_beta_power_moment(s), s, 2).subs(s, 2))
    pair = sp.gamma(n) * sp.gamma(a) * sp.gamma(b) / sp.gamma(a + b + n - 2)
    e12 = sp.gammasimp(sp.diff(pair, a, b).subs({a: 2, b: 2}))
    derived = n * e2 + n * (n - 1) * e12 - exact_expected_entropy() ** 2
    compact = (sp.pi**2 / 3 - 2) / (n + 1) - 1 / (n + 1) ** 2 - sp.polygamma(1, n + 2)
    if sp.simplify(sp.expand_func(derived - compact)) != 0:  # pragma: no cover - a SymPy regression
        raise RuntimeError("SymPy could not certify the compact form of Var[H]")
    return compact


@lru_cache(maxsize=None)
def exact_expected_power_sum() -> sp.Expr:
    """Exact E[Σ p_i^q] = n E[p^q] with p ~ Beta(1, n-1): n Γ(q+1) Γ(n) / Γ(n+q)."""
    return sp.gammasimp(n * _beta_power_moment(q))


def large_n_series(expr: sp.Expr, order: int = 3) -> sp.Expr:
    """Expansion of ``expr`` (in ``n``) for n -> ∞ up to O(n^-order), computed via m = 1/n -> 0."""
    m = sp.Symbol("m", positive=True)
    series = sp.series(expr.subs(n, 1 / m), m, 0, order).removeO()
    return sp.expand(series.subs(m, 1 / n)) + sp.O(n ** (-order), (n, sp.oo))
