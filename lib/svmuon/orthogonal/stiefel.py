"""The Stiefel manifold ``St(m, n) = {W ∈ R^{m×n} : WᵀW = I_n}`` (m >= n) as a ``svmuon.orthogonal.base.Manifold``.

The book writes ``St(m, n)`` with m >= n rows and columns; the source articles (su2025stiefel) write it
``St(n, m)``. A wide matrix (m < n) is a point when its *rows* are orthonormal (``WWᵀ = I_m``) and is handled
as its transpose everywhere (``transpose_wide=True``, the default), so one manifold object serves the tall
and the wide weights of a network; ``transpose_wide=False`` refuses wide input.

* tangent space at ``W``: ``{Δ : WᵀΔ + ΔᵀW = 0}``, projection ``P_W(Z) = Z - W[WᵀZ]_sym``;
* steepest direction under the spectral norm: ``Φ = argmax tr(GᵀΦ)`` over unit-spectral-norm tangent
  vectors, by a solver of :mod:`svmuon.orthogonal.stiefel_solvers` (default: the book's Newton method on
  the reduced dual); for m = n it is the orthogonal group's closed form ``W msign([WᵀG]_skew)``;
* retraction: the polar retraction ``R_W(Ξ) = (W + Ξ)((W + Ξ)ᵀ(W + Ξ))^{-1/2}``, the nearest point to
  ``W + Ξ``. For tangent ``Ξ = -ηΦ`` with ``ΦᵀΦ = V diag(μ) Vᵀ`` it is ``(W - ηΦ) V diag(1 + η²μ)^{-1/2} Vᵀ``;
  for a partial isometry (μ ∈ {0, 1}) that is the source's closed form ``(W - ηΦ)(I - P + P/√(1+η²))``
  (thm-stiefel-retraction). The Stiefel direction need not be a partial isometry (at a non-smooth optimum
  it has singular values strictly between 0 and 1), so the kernel uses the eigen-decomposition the solver
  returns and two Newton–Schulz refinements against the exact Gram matrix (they remove the error of a
  tangent residual or of a drifted ``W`` to fourth order); a public call with a ``Φ`` that is not tangent
  falls back to the polar retraction by SVD;
* nearest point: the polar factor (the orthonormal factor ``UVᵀ`` of a thin SVD).

References:
    edelman1998geometry, absil2008optimization, su2025stiefel, bernstein2025stiefel, higham2008functions.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from svmuon._validation import check_int
from svmuon.orthogonal.base import Direction, Manifold, as_matrix, check_pair, eye_like
from svmuon.orthogonal.msign import power_of_two_scale
from svmuon.orthogonal.stiefel_solvers import METHODS, StiefelSolution, solve

__all__ = ["Stiefel", "default_tol"]


def _sym(T: torch.Tensor) -> torch.Tensor:
    return (T + T.mT) / 2


def _skew(T: torch.Tensor) -> torch.Tensor:
    return (T - T.mT) / 2


def _wide(T: torch.Tensor) -> bool:
    return T.shape[-2] < T.shape[-1]


def _tall(T: torch.Tensor) -> torch.Tensor:
    """The tall orientation: ``T`` itself, or ``Tᵀ`` for a wide matrix (a view)."""
    return T.mT if _wide(T) else T


class Stiefel(Manifold):
    """The Stiefel manifold ``St(m, n) = {W ∈ R^{m×n} : WᵀW = I_n}``, m >= n, batched ``(..., m, n)``.

    Holds the solver options (no optimizer state); every method is a pure function of its arguments and
    keeps type (tensor/NumPy), dtype and device. Wide matrices are handled transposed (see the module).

    Args:
        method: steepest-direction solver, ``"newton"`` (default), ``"fixed_point"`` (su2025stiefel),
            ``"fixed_point_reduced"`` or ``"dual_ascent"`` (bernstein2025stiefel).
        tol: tangent-residual tolerance ``‖WᵀΦ + ΦᵀW‖_F`` of the solvers. ``None`` (default): 1e-6, or for
            float32 ``max(1e-6, 8 eps √n)`` (1.5e-5 at n = 256), just above the float32 floor: a ``Φ``
            assembled in float32 has a tangent residual of about ``3-4 eps √n`` however exactly the float64
            dual is solved (measured 2.7e-6 at 256×64, 7.4e-6 at 1024×256), so a finer dual buys nothing
            but the last Newton iteration (:func:`default_tol`).
        max_iter: the solver's iteration cap (``None``: its default, 50 for Newton); bounds the cost of a
            step, and a step that hits it is still taken (the retraction is exact for any ``Φ``), with the
            residual reached reported in the optimizer's ``state[p]["info"]["residual"]``.
        smoothing: ``ε/σ̄`` of the smoothed dual (Newton).
        max_cg: Hessian-vector products per Newton iteration at most.
        rank_rtol: singular values of the update below ``rank_rtol · σ_max`` count as zero (Newton solves a
            rank-deficient update on its row space); a coarser value trades optimality for speed.
        transpose_wide: accept wide matrices (rows orthonormal) as their transposes; ``False`` refuses them.
        msign_method, ns_steps, ns_coefficients, compute_dtype: the msign route of the public
            :meth:`steepest_direction` (the fixed-point and dual-ascent solvers, and m = n); an optimizer
            passes its own.

    Raises:
        ValueError: unknown ``method``, non-positive ``tol``/``smoothing``, bad msign options.
        TypeError: options of the wrong type.

    References:
        su2025stiefel, bernstein2025stiefel, su2025orthogonal, absil2008optimization, edelman1998geometry.
    """

    state_keys = ("Y", "warm")

    def __init__(self, *, method: str = "newton", tol: float | None = None, max_iter: int | None = None,
                 smoothing: float = 1e-6, max_cg: int = 100, rank_rtol: float = 1e-6, transpose_wide: bool = True,
                 msign_method: str = "svd", ns_steps: int | None = None, ns_coefficients: Any = None,
                 compute_dtype: torch.dtype | None = None) -> None:
        super().__init__(msign_method=msign_method, ns_steps=ns_steps, ns_coefficients=ns_coefficients,
                         compute_dtype=compute_dtype)
        self.method = _check_method(method)
        self.tol = None if tol is None else _check_positive(tol, "tol")
        self.max_iter = None if max_iter is None else check_int(max_iter, "max_iter", minimum=0)
        self.smoothing = _check_positive(smoothing, "smoothing")
        self.max_cg = check_int(max_cg, "max_cg", minimum=1)
        if isinstance(rank_rtol, bool) or not isinstance(rank_rtol, (int, float)):
            raise TypeError(f"rank_rtol must be a real number in [0, 1), got {type(rank_rtol).__name__}")
        if not 0 <= float(rank_rtol) < 1:
            raise ValueError(f"rank_rtol must be in [0, 1), got {rank_rtol!r}")
        self.rank_rtol = float(rank_rtol)
        if not isinstance(transpose_wide, bool):
            raise TypeError(f"transpose_wide must be a bool, got {type(transpose_wide).__name__}")
        self.transpose_wide = transpose_wide

    def __repr__(self) -> str:
        return (f"Stiefel(method={self.method!r}, tol={self.tol}, max_iter={self.max_iter}, "
                f"transpose_wide={self.transpose_wide}, {super().__repr__()[8:-1]})")

    def _tol(self, dtype: torch.dtype, shape: tuple[int, ...]) -> float:
        return default_tol(dtype, min(shape[-2:])) if self.tol is None else self.tol

    # -- points ---------------------------------------------------------------------------------------------
    def _shape_error(self, shape: tuple[int, ...]) -> str | None:
        m, n = shape[-2:]
        if m < n and not self.transpose_wide:
            return (f"a point of St(m, n) must be tall or square (..., m, n) with m >= n, got {m} x {n} "
                    "(a wide matrix with orthonormal rows is accepted with Stiefel(transpose_wide=True), "
                    "or pass its transpose)")
        return None

    def defect(self, W: Any) -> torch.Tensor:
        """``‖WᵀW - I‖_max`` per matrix (``‖WWᵀ - I‖_max`` for a wide one), shape ``(...)``, in float64.

        Raises:
            TypeError: non-float ``W``. ValueError: empty, non-finite ``W``, or wide with ``transpose_wide=False``.
        """
        Wt, _ = as_matrix(W, "W")
        self._require_shape(Wt, "W")
        W64 = _tall(Wt.double())
        return (W64.mT @ W64 - eye_like(W64)).abs().amax(dim=(-2, -1))

    def project(self, W: Any) -> Any:
        """Nearest point in Frobenius norm: the orthonormal polar factor ``UVᵀ`` of a thin SVD ``W = UΣVᵀ``
        (higham1986polar); for a rank-deficient ``W`` one of the nearest points. Wide ``W``: orthonormal rows.

        Raises:
            TypeError: non-float ``W``. ValueError: empty or non-finite ``W``, or wide with ``transpose_wide=False``.
        """
        Wt, was_numpy = as_matrix(W, "W")
        self._require_shape(Wt, "W")
        work = Wt if Wt.dtype in (torch.float32, torch.float64) else Wt.float()
        U, _, Vh = torch.linalg.svd(work, full_matrices=False)
        out = (U @ Vh).to(Wt.dtype)
        return out.numpy() if was_numpy else out

    def _stabilize(self, W: torch.Tensor, correct: bool) -> tuple[torch.Tensor, torch.Tensor]:
        if _wide(W):
            Wc, defect = super()._stabilize(W.mT, correct)
            return Wc.mT, defect
        return super()._stabilize(W, correct)

    # -- tangent vectors ------------------------------------------------------------------------------------
    def _project_tangent(self, W: torch.Tensor, Z: torch.Tensor) -> torch.Tensor:
        Wt, Zt = _tall(W), _tall(Z)
        out = Zt - Wt @ _sym(Wt.mT @ Zt)
        return out.mT if _wide(W) else out

    def steepest_direction(self, W: Any, G: Any, *, tol: float | None = None, max_iter: int | None = None,
                           method: str | None = None) -> Any:
        """Unit steepest-ascent direction ``Φ``: maximiser of ``tr(GᵀΦ)`` over tangent ``Φ`` with ``‖Φ‖₂ <= 1``
        (eq-stiefel-problem). Descend along ``-Φ``. For m = n: ``W msign([WᵀG]_skew)`` (eq-orth-direction).

        Args:
            W: point ``(..., m, n)`` (wide: handled transposed). G: gradient, same matrix shape, batch
                broadcastable; ``Φ`` has its type and dtype.
            tol, max_iter, method: override the manifold's solver options for this call.

        Returns:
            ``Φ`` in the broadcast shape (use :func:`svmuon.orthogonal.stiefel_solvers.stiefel_direction`
            for iterations and residuals).

        Raises:
            TypeError: non-float inputs. ValueError: shape mismatch, non-finite entries, ``W`` not a point
                (``‖WᵀW - I‖_max > √eps`` of its dtype), wide ``W`` with ``transpose_wide=False``, bad options.
        """
        Wt, _ = as_matrix(W, "W")
        Gt, was_numpy = as_matrix(G, "G")
        self._require_shape(Wt, "W")
        check_pair(Wt, "W", Gt, "G")
        self._require_point(Wt)
        if Gt.dtype not in (torch.float32, torch.float64):
            raise TypeError(f"G must be float32 or float64, got {Gt.dtype}")
        shape = torch.broadcast_shapes(Wt.shape, Gt.shape)
        Wb = Wt.to(Gt.dtype).expand(shape).reshape(-1, *shape[-2:])
        Gb = Gt.expand(shape).reshape(-1, *shape[-2:])
        Gb = Gb / power_of_two_scale(Gb)  # exact; Φ does not depend on the size of G, and no product overflows
        opts = dict(tol=self._tol(Gt.dtype, Wt.shape) if tol is None else _check_positive(tol, "tol"),
                    max_iter=self.max_iter if max_iter is None else check_int(max_iter, "max_iter", minimum=0),
                    method=self.method if method is None else _check_method(method))
        Phi = self._solve(_tall(Wb), _tall(Gb), self.orthogonalize, None, **opts)[0]
        Phi = (Phi.mT if _wide(Wb) else Phi).reshape(shape)
        return Phi.numpy() if was_numpy else Phi

    def _solve(self, W: torch.Tensor, G: torch.Tensor, orthogonalize: Any, state: dict | None, *, tol: float,
               max_iter: int | None, method: str) -> tuple[torch.Tensor, StiefelSolution | None, torch.Tensor,
                                                          torch.Tensor]:
        """``(Φ, solution, V, μ)`` for tall ``(k, m, n)`` batches, ``ΦᵀΦ = V diag(μ) Vᵀ``."""
        m, n = W.shape[-2:]
        if m == n:  # the orthogonal group: closed form, Φ = W O with O skew, ΦᵀΦ = OᵀO
            O = _skew(orthogonalize(_skew(W.mT @ G)).to(W.dtype))
            Phi = W @ O
            mu, V = torch.linalg.eigh((O.mT @ O).double())
            return Phi, None, V, mu
        Y0 = warm = None
        if state is not None and "Y" in state:
            Y0, warm = state["Y"], state["warm"] > 0
        one = W.shape[0] == 1  # a single matrix: 2-D products (mm) are much cheaper than bmm for small n
        squeeze = (lambda T: T[0]) if one else (lambda T: T)  # noqa: E731
        sol = solve(squeeze(W), squeeze(G), method=method, tol=tol, max_iter=max_iter,
                    Y0=None if Y0 is None else squeeze(Y0), warm=None if warm is None else squeeze(warm),
                    orthogonalize=orthogonalize, smoothing=self.smoothing, max_cg=self.max_cg, exact_residual=False,
                    rank_rtol=self.rank_rtol)
        if one:
            sol.Phi, sol.X, sol.residual = sol.Phi[None], sol.X[None], sol.residual.reshape(1)
            sol.Y = None if sol.Y is None else sol.Y[None]
            sol.tangent_norm = None if sol.tangent_norm is None else sol.tangent_norm.reshape(1)
            sol.eig = None if sol.eig is None else (sol.eig[0][None], sol.eig[1][None])
        if sol.Y is None:  # the msign-based solvers iterate on X
            sol.Y = _sym((W.mT @ G).to(sol.X.dtype)) + sol.X
        if sol.tangent_norm is None:  # the msign-based solvers do not form P_W(G) on the way
            sol.tangent_norm = torch.linalg.matrix_norm(self._project_tangent(W, G))
        if sol.eig is not None:
            V, mu = sol.eig
        else:  # fixed point / dual ascent: an (approximate) partial isometry; its Gram matrix tells
            mu, V = torch.linalg.eigh((sol.Phi.mT @ sol.Phi).to(torch.float64))
        return sol.Phi, sol, V, mu

    def retract_along(self, W: Any, Phi: Any, eta: float) -> Any:
        """Polar retraction ``R_W(-ηΦ)``: the nearest point of St(m, n) to ``W - ηΦ`` (thm-stiefel-retraction).

        For tangent ``Φ`` with ``ΦᵀΦ = V diag(μ) Vᵀ`` (any singular values in [0, 1], as the Stiefel direction
        has at a non-smooth optimum) this is ``(W - ηΦ) V diag(1 + η²μ)^{-1/2} Vᵀ``, computed with two
        Newton–Schulz refinements against the exact Gram matrix; for a partial isometry it is the source's
        closed form ``(W - ηΦ)(I - P + P/√(1+η²))``. A ``Φ`` that is not tangent (the result would be off the
        manifold by more than ``10√eps``) falls back to ``retract(W, -ηΦ)``, the same definition by SVD.

        Args:
            W: point ``(..., m, n)`` (wide: orthonormal rows). Phi: same matrix shape, batch broadcastable to
                ``W``'s. eta: step length >= 0.

        Returns:
            The new point: the type, shape and dtype of ``W``.

        Raises:
            TypeError: non-float matrices, ``eta`` not a real number.
            ValueError: bad shapes, non-finite entries, ``W`` not a point (``‖WᵀW - I‖_max > √eps`` of its
                dtype), a bad ``eta``, or a ``W - ηΦ`` without a unique nearest point.

        References:
            su2025stiefel, absil2008optimization, higham2008functions.
        """
        return super().retract_along(W, Phi, eta)

    # -- kernels (svmuon.orthogonal.base) ----------------------------------------------------------------------
    def _init_state(self, W: torch.Tensor) -> dict[str, torch.Tensor]:
        n = min(W.shape[-2:])
        return {"Y": torch.zeros(W.shape[0], n, n, dtype=W.dtype, device=W.device),
                "warm": torch.zeros(W.shape[0], dtype=W.dtype, device=W.device)}

    def _direction(self, W: torch.Tensor, U: torch.Tensor, orthogonalize: Any, state: dict) -> Direction:
        """The steepest direction for the batch ``(k, m, n)``, warm-started from ``state["Y"]`` (the reduced
        multiplier ``[WᵀU]_sym + X`` of the previous step's update scaled to unit Frobenius norm, where
        ``state["warm"]`` is 1: the optimum in ``Y`` depends on the tangent part of ``U`` only, while ``X`` also
        tracks ``-[WᵀU]_sym``, which moves with ``W`` and with the normal part of ``U``; measured in
        ``tests/test_stiefel.py::test_warm_start_in_y_beats_x``). ``step`` packs
        ``[Φ; V; μᵀ]`` (tall orientation, ``(k, m + n + 1, n)``) with ``ΦᵀΦ = V diag(μ) Vᵀ`` for the retraction."""
        Wt, Ut = _tall(W), _tall(U.to(W.dtype))
        # The direction is invariant to scaling U by c > 0 (X scales with it): solve for U / c with c the
        # power of two at or above max|U| (exact), so no product can overflow; a non-finite U is solved as 0
        # and gives a NaN direction, which the optimizer's finiteness check reports (nothing raises here).
        finite = torch.isfinite(Ut).flatten(1).all(dim=1)
        Ut = torch.where(finite[:, None, None], Ut, torch.zeros_like(Ut))
        c = power_of_two_scale(Ut)
        Ut = Ut / c
        # the state keeps Y / ‖U‖_F: the multiplier of the unit-norm update, so that a warm start survives
        # changes of scale (a momentum buffer growing from zero, a learning-rate-free gradient scale)
        norm = torch.linalg.matrix_norm(Ut)[:, None, None]
        norm = torch.where(norm > 0, norm, torch.ones_like(norm))
        scaled = None if not state else {"Y": state["Y"] * norm, "warm": state["warm"]}
        if scaled is not None:  # a warm start that is not finite (or absurdly large) is no warm start
            ok = torch.isfinite(scaled["Y"]).flatten(1).all(dim=1) & (scaled["Y"].abs().amax(dim=(-2, -1)) <= 1e100)
            scaled = {"Y": torch.where(ok[:, None, None], scaled["Y"], torch.zeros_like(scaled["Y"])),
                      "warm": torch.where(ok, scaled["warm"], torch.zeros_like(scaled["warm"]))}
        try:
            Phi, sol, V, mu = self._solve(Wt, Ut, orthogonalize, scaled, tol=self._tol(W.dtype, W.shape),
                                          max_iter=self.max_iter, method=self.method)
        except torch.linalg.LinAlgError:
            # a factorisation that did not converge (LAPACK): a NaN direction, which the optimizer reports as a
            # non-finite update (or skips, nan_policy="skip") with nothing changed
            finite = torch.zeros_like(finite)
            k, m, n = Wt.shape
            Phi, sol = torch.full_like(Wt, float("nan")), None
            V = torch.eye(n, dtype=torch.float64, device=W.device).expand(k, n, n)
            mu = torch.zeros(k, n, dtype=torch.float64, device=W.device)
        nan = torch.full_like(Phi, float("nan"))
        Phi = torch.where(finite[:, None, None], Phi.to(W.dtype), nan)
        k, n = Wt.shape[0], Wt.shape[-1]
        step = torch.cat([Phi, V.to(W.dtype), mu.to(W.dtype)[:, None, :]], dim=-2)
        if sol is None:  # m = n
            tangent_norm = torch.linalg.matrix_norm(_skew(Wt.mT @ Ut)) * c[:, 0, 0]
            new_state = {"Y": torch.zeros(k, n, n, dtype=W.dtype, device=W.device),
                         "warm": torch.zeros(k, dtype=W.dtype, device=W.device)}
            info = {}
        else:
            tangent_norm = sol.tangent_norm.to(W.dtype) * c[:, 0, 0]
            new_state = {"Y": (sol.Y / norm).to(W.dtype), "warm": torch.ones(k, dtype=W.dtype, device=W.device)}
            info = {"iterations": torch.full((k,), float(sol.iterations), dtype=W.dtype, device=W.device),
                    "residual": sol.residual.to(W.dtype)}
        tangent_norm = torch.where(finite, tangent_norm, torch.full_like(tangent_norm, float("nan")))
        return Direction(step, tangent_norm, new_state, info)

    def _tangent_from_step(self, W: torch.Tensor, step: torch.Tensor) -> torch.Tensor:
        m = max(W.shape[-2:])
        Phi = step[..., :m, :]
        return Phi.mT if _wide(W) else Phi

    def _step_from_tangent(self, W: torch.Tensor, Phi: torch.Tensor) -> torch.Tensor:
        P = _tall(Phi)
        mu, V = torch.linalg.eigh((P.mT @ P).double())
        return torch.cat([P, V.to(P.dtype), mu.to(P.dtype)[..., None, :]], dim=-2)

    def _retract_along(self, W: torch.Tensor, step: torch.Tensor, eta: torch.Tensor) -> torch.Tensor:
        """Polar retraction of ``-ηΦ``: ``Vs Z`` with ``Vs = W - ηΦ`` and ``Z ≈ (VsᵀVs)^{-1/2}``, from
        ``Z₀ = V diag(1 + η²μ)^{-1/2} Vᵀ`` (exact for tangent ``Φ``, thm-stiefel-retraction) and two
        Newton–Schulz steps ``Z <- Z(3I - HZ²)/2`` against the exact Gram ``H = VsᵀVs``, which remove the
        error of a tangent residual or of a drifted ``W`` to fourth order. Four m × n × n products in all."""
        wide = _wide(W)
        Wt = W.mT if wide else W
        m, n = Wt.shape[-2:]
        Phi, V, mu = step[..., :m, :], step[..., m:m + n, :], step[..., m + n, :]
        Vs = Wt - eta * Phi
        work = torch.float64 if Wt.dtype == torch.float64 or Wt.device.type == "cpu" else torch.float32
        H = (Vs.mT @ Vs).to(work)
        Vw, muw, e = V.to(work), mu.to(work), eta.to(work)
        Z = (Vw * torch.rsqrt(1 + (e * e)[..., 0] * muw.clamp_min(0))[..., None, :]) @ Vw.mT
        eye = eye_like(H)
        for _ in range(2):
            Z = 0.5 * Z @ (3 * eye - H @ Z @ Z)
        out = Vs @ _sym(Z).to(Wt.dtype)
        return out.mT if wide else out

    def _step_slack(self, eta: torch.Tensor, orthogonalize: Any) -> torch.Tensor | float:
        return 0.0


def default_tol(dtype: torch.dtype, n: int) -> float:
    """The solvers' default tangent tolerance ``‖WᵀΦ + ΦᵀW‖_F`` for a ``Φ`` of ``dtype`` with n columns.

    1e-6 in float64; in float32 ``max(1e-6, 8 eps √n)`` (eps = 2^-23; 1.5e-5 at n = 256), about twice the
    tangent residual that assembling ``Φ`` in float32 leaves by itself (measured ``3-4 eps √n``,
    ``tests/test_stiefel.py::test_float32_floor_of_the_assembled_direction``), so that the solver does not
    spend a Newton iteration on accuracy the output cannot carry.

    Args:
        dtype: ``torch.float32`` or ``torch.float64``, the dtype of ``Φ`` (the parameter's).
        n: number of columns of the tall orientation (``min(m, n)`` of the matrix), an int >= 1.

    Returns:
        The tolerance, a float.

    Raises:
        TypeError: another dtype, or a non-integer ``n``. ValueError: ``n < 1``.

    References:
        The chapter "The Stiefel case", section "The solvers side by side".
    """
    if dtype not in (torch.float32, torch.float64):
        raise TypeError(f"dtype must be torch.float32 or torch.float64, got {dtype!r}")
    n = check_int(n, "n", minimum=1)
    if dtype == torch.float64:
        return 1e-6
    return max(1e-6, 8 * torch.finfo(torch.float32).eps * math.sqrt(n))


def _check_method(method: Any) -> str:
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    return method


def _check_positive(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a positive real number, got {type(value).__name__}")
    v = float(value)
    if not (math.isfinite(v) and v > 0):
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    return v
