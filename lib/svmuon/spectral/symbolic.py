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
    "exp_log_moment",
    "smooth_function_cumulants",
    "renyi_large_n_constants",
    "shannon_large_n_constants",
    "renyi_mean_correction",
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


@lru_cache(maxsize=None)
def exp_log_moment(power: int, log_power: int) -> sp.Expr:
    """E[x^power (log x)^log_power] for x ~ Exp(1): the log_power-th derivative of Γ(s+1) at s = power."""
    return sp.expand_func(sp.diff(sp.gamma(s + 1), s, log_power).subs(s, power))


def smooth_function_cumulants(g: sp.Expr, variables: tuple, means: dict, central_moment) -> tuple[sp.Expr, sp.Expr, sp.Expr]:
    """(c, V, K) of g(X̄) for the mean X̄ of n i.i.d. copies of a random vector with given central moments.

    E[g(X̄)] = g(μ) + c/n + O(n^-2), Var = V/n + O(n^-2), κ_3 = K/n² + O(n^-3), with c = ½ Σ g_ij κ_ij,
    V = Σ g_i g_j κ_ij and K = Σ g_i g_j g_k κ_ijk + 3 Σ g_i g_j g_kl κ_ik κ_jl (hall1992bootstrap, §2.4),
    where κ_ij and κ_ijk are the second and third central moments of one copy. ``central_moment(i, j, k)``
    returns E[Π (X_a - μ_a)] for the tuple of variable indices given.
    """
    idx = range(len(variables))
    grad = [sp.diff(g, v).subs(means) for v in variables]
    hess = [[sp.diff(g, a, b).subs(means) for b in variables] for a in variables]
    k2 = [[central_moment(i, j) for j in idx] for i in idx]
    c = sum(hess[i][j] * k2[i][j] for i in idx for j in idx) / 2
    V = sum(grad[i] * grad[j] * k2[i][j] for i in idx for j in idx)
    K = sum(grad[i] * grad[j] * grad[k] * central_moment(i, j, k) for i in idx for j in idx for k in idx)
    K += 3 * sum(grad[i] * grad[j] * hess[k][l] * k2[i][k] * k2[j][l] for i in idx for j in idx for k in idx for l in idx)
    return c, V, K


def _exp_central_moment(functions: tuple, means: tuple):
    """central_moment(i, j, ...) for the vector (f_1(x), ...) of functions of one x ~ Exp(1), given as
    polynomials in the symbols x and L = log x (expanded and integrated term by term)."""
    X, L = sp.symbols("x L", positive=True)

    def moment(*indices):
        poly = sp.expand(sp.Mul(*[functions[i](X, L) - means[i] for i in indices]))
        total = sp.Integer(0)
        for term in sp.Add.make_args(poly):
            coeff, rest = term.as_independent(X, L)
            powers = sp.Poly(rest, X, L).monoms()[0] if rest.has(X) or rest.has(L) else (0, 0)
            total += coeff * exp_log_moment(*powers)
        return sp.simplify(total)

    return moment


@lru_cache(maxsize=None)
def shannon_large_n_constants() -> tuple[sp.Expr, sp.Expr, sp.Expr]:
    """(c, V, K) for the Shannon entropy: H - log n = log u - w/u, u = mean(x), w = mean(x log x).

    Returns 1/2, π²/3 - 3 and 12 ζ(3) - 10 - π²/2, so that the skewness tends to
    (12 ζ(3) - 10 - π²/2) / (π²/3 - 3)^{3/2} / sqrt(n) and the mode sits (10 + π²/2 - 12 ζ(3)) / (2 (π²/3 - 3)) / n
    above the mean (book eqs. ``eq-skewness-limit``, ``eq-mode-offset``).
    """
    uu, ww = sp.symbols("u w", positive=True)
    mean_w = exp_log_moment(1, 1)
    moment = _exp_central_moment((lambda X, L: X, lambda X, L: X * L), (sp.Integer(1), mean_w))
    c, V, K = smooth_function_cumulants(sp.log(uu) - ww / uu, (uu, ww), {uu: 1, ww: mean_w}, moment)
    return tuple(sp.nsimplify(sp.simplify(e), [sp.pi, sp.zeta(3)]) for e in (c, V, K))


@lru_cache(maxsize=None)
def renyi_large_n_constants(order: int) -> tuple[sp.Expr, sp.Expr, sp.Expr]:
    """(c, V, K) for H_q with an integer order q >= 2, from g = (q log u - log v)/(q - 1), v = mean(x^q).

    At q = 2: 3/2, 1 and -7 (skewness -7/sqrt(n), mode 3.5/n above the mean, mean field low by 3/(2n)).
    """
    order = int(order)
    uu, vv = sp.symbols("u v", positive=True)
    moment = _exp_central_moment((lambda X, L: X, lambda X, L: X**order), (sp.Integer(1), sp.factorial(order)))
    g = (order * sp.log(uu) - sp.log(vv)) / (order - 1)
    return tuple(sp.simplify(e) for e in smooth_function_cumulants(g, (uu, vv), {uu: 1, vv: sp.factorial(order)}, moment))


@lru_cache(maxsize=None)
def renyi_mean_correction() -> sp.Expr:
    """c(q) for a general order q: ½ Σ g_ij κ_ij with g = (q log u - log v)/(q-1) (book eq. ``eq-mean-correction``).

    Only second moments of (x, x^q) enter: Var x = 1, Var x^q = Γ(2q+1) - Γ(q+1)², and g_uv = 0, so
    c(q) = [Γ(2q+1)/Γ(q+1)² - 1 - q] / (2(q-1)).
    """
    G = exp_moment(q)
    H = sp.log(n) + (q * sp.log(u) - sp.log(v)) / (q - 1)
    point = {u: 1, v: G}
    c = (sp.diff(H, u, 2).subs(point) * 1 + sp.diff(H, v, 2).subs(point) * (exp_moment(2 * q) - G**2)) / 2
    return sp.simplify(sp.gammasimp(c))
