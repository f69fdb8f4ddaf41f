"""What every manifold of ``svmuon`` implements, and how an optimizer steps on one.

A manifold here is a set of matrices ``W ∈ R^{m×n}`` with ``WᵀW = I_n`` (the orthogonal group for m = n,
the Stiefel manifold for m > n), embedded in the space of all matrices with the Frobenius inner product.
A :class:`Manifold` object holds no optimizer state and no msign route (whoever calls passes its
``orthogonalize``: the optimizer its own, a user of the public methods an optional callable, exact SVD by
default). It offers two layers.

**Public, checked methods** (tensor or NumPy in, the same type out; shapes ``(..., m, n)``; they raise
``TypeError``/``ValueError`` naming the argument): :meth:`~Manifold.check_point`, :meth:`~Manifold.defect`,
:meth:`~Manifold.random`, :meth:`~Manifold.project` (nearest point), :meth:`~Manifold.project_tangent`,
:meth:`~Manifold.steepest_direction` (``Φ`` maximising ``tr(GᵀΦ)`` over unit-spectral-norm tangent
vectors), :meth:`~Manifold.retract` (the polar retraction of a tangent vector) and
:meth:`~Manifold.retract_along` (``retract(W, -ηΦ)`` for a unit steepest direction ``Φ``).

**The optimizer protocol**: public methods too, but unchecked and batched, on ``(k, m, n)`` tensors in the
manifold's canonical orientation, with no host synchronisation; :func:`svmuon.optim.functional.manifold_muon`
calls nothing else, so a new manifold needs no optimizer change. One step on a batch of same-shape parameters::

    flip = manifold.transposed(p.shape)              # the one orientation hook: True -> kernels see p.mT
    B = manifold.tangent(W, B.lerp(G, 1 - mu))       # momentum kept tangent: projection transport
    U = G.lerp(B, mu)                                # Nesterov (or U = B)
    d = manifold.direction(W, U, orthogonalize, state)       # Direction(step, tangent_norm, state, info)
    eta = lr * min(1, d.tangent_norm / (eps ‖U‖_F))  # tiny tangent parts are damped (the eps rule)
    W_new = manifold.retract_direction(W, d.step, eta, eta_max=lr)
    W_new, defect = manifold.stabilize(W_new, correct)       # forms W_newᵀW_new once: defect, Björck step
    ok = max(defect, manifold.start_defect(W) or 0) <= 2 (atol + drift) + manifold.step_slack(eta, orthogonalize)
    # committed only if every parameter is finite and ok; state <- d.state

(``drift`` is the defect the previous step left uncorrected, 0 after a corrected one.)

Developer note: adding a manifold
---------------------------------
Subclass :class:`Manifold` and implement

* ``_shape_error(shape) -> str | None``: why a parameter of this shape cannot live here (``None``: fine).
* ``transposed(shape) -> bool``: whether the kernels see a parameter of this shape transposed (default
  ``False``; the Stiefel manifold handles a wide matrix as its tall transpose). The optimizer applies it once
  per parameter, to the point, the gradient and the buffer, and transposes the results back.
* ``init_state(W) -> dict[str, Tensor]``: per-parameter solver state for a canonical batch ``W`` of shape
  ``(k, m, n)``, each value a tensor whose first dimension is ``k`` (list the names in the class attribute
  ``state_keys``). The optimizer keeps each parameter's slice in ``optimizer.state[p]["solver"][key]`` (saved
  by ``state_dict()``, cast to the parameter's dtype by ``load_state_dict()``), stacks it for the next step,
  and writes back the new values from :class:`Direction` ``.state`` when the step commits. Default: ``{}``.
* ``tangent(W, Z) -> P_W(Z)``: the orthogonal projection onto the tangent space (also the kernel of
  :meth:`Manifold.project_tangent`); the optimizer keeps its momentum buffer tangent with it.
* ``direction(W, U, orthogonalize, state) -> Direction``: the unit steepest direction for the update ``U``
  (``orthogonalize`` is ``X -> msign(X)``, an :class:`~svmuon.orthogonal.msign.Orthogonalizer`). ``step`` is
  whatever ``retract_direction`` needs; ``tangent_norm`` is ``‖P_W(U)‖_F`` per matrix (``(k,)``); ``info``
  maps names to ``(k,)`` diagnostics, which the optimizer stores in ``state[p]["info"]``. A non-finite ``U``
  may give any ``step`` (the optimizer's finiteness check reads ``U`` itself); nothing may raise. ``start_defect``
  (optional): ``max|WᵀW - I|`` per matrix where the direction formed ``WᵀW`` anyway (the float64 Stiefel
  completion), which the optimizer then reads instead of calling ``start_defect(W)``.
* ``retract_direction(W, step, eta, eta_max) -> W_new``: the retraction of ``-eta Φ``; ``eta`` is a tensor of
  shape ``(k, 1, 1)``, ``eta_max`` a host float bound on it (the learning rate), which may pick the method.
* ``stabilize(W, correct) -> (W, defect)``: ``defect = max|WᵀW - I|`` per matrix (``(k,)``, before
  correction) and the point after ``correct`` corrections (a count; ``True`` is one; default: Björck steps).
* ``step_slack(eta, orthogonalize) -> Tensor | float``: a bound on the defect one retraction may add by itself
  (e.g. because a Newton–Schulz ``Φ`` is not an exact partial isometry). Default: 0. ``step_slack_bound(eta,
  orthogonalize) -> float``: the same for a host float ``eta`` (it sets the number of corrections). Default: 0.
* ``dtype_error(dtype) -> str | None``: why a parameter of this dtype cannot be solved with the manifold's
  options (the optimizer refuses it at construction). Default: ``None``.
* ``start_defect(W) -> Tensor | None``: ``max|WᵀW - I|`` of the point *before* the step (``(k,)``), checked
  with the same tolerance, for a manifold whose retraction returns a point from any ``W`` (the Stiefel polar
  retraction from the Gram matrix of ``W - ηΦ``), where the retracted point's defect cannot show that ``W``
  was scaled or overwritten since the last step. Default: ``None`` (one product less).
* the public methods that have no generic form here: ``project``, and, if ``step`` is not ``Φ`` itself,
  ``_tangent_from_step(W, step)`` and ``_step_from_tangent(W, Phi)`` (used by :meth:`Manifold.steepest_direction`
  and :meth:`Manifold.retract_along`).

References:
    absil2008optimization (embedded submanifolds, retractions, projection transport), edelman1998geometry,
    su2025orthogonal (the steepest direction under the spectral norm on O(n)), higham2008functions (polar
    decomposition), bjorck1971iterative (the Björck correction).
"""

from __future__ import annotations

import math
import numbers
from typing import Any, Callable, NamedTuple

import torch

from svmuon._validation import as_tensor, check_finite, check_float, check_matrix

__all__ = ["Manifold", "Direction"]

#: ``retract_along`` keeps its closed form only where the result is a point to this fraction of ``√eps`` (what every
#: method requires of a point), so that what it returns is accepted by every later call, with room for rounding
POINT_MARGIN = 0.25


class Direction(NamedTuple):
    """What a manifold's direction kernel returns for a batch of ``k`` parameters (see the module doc).

    Its fields: ``step``, the manifold's representation of the unit steepest direction, read by its
    ``retract_direction`` (the orthogonal group: ``O = msign([WᵀU]_skew)``, with ``Φ = W O``);
    ``tangent_norm``, ``‖P_W(U)‖_F`` per matrix, shape ``(k,)``, for the ``eps`` damping; ``state``, the new
    per-parameter solver state, name -> tensor with first dimension ``k`` (may be empty); ``info``,
    diagnostics, name -> tensor of shape ``(k,)`` (may be empty); ``start_defect``, ``max|WᵀW - I|`` of the point
    per matrix (``(k,)``) where the kernel formed ``WᵀW`` on the way, else ``None``.
    """

    step: torch.Tensor
    tangent_norm: torch.Tensor
    state: dict[str, torch.Tensor]
    info: dict[str, torch.Tensor]
    start_defect: torch.Tensor | None = None


def as_matrix(x: Any, name: str, *, square: bool = False) -> tuple[torch.Tensor, bool]:
    """``(tensor, was_numpy)`` for a real floating, non-empty, finite ``(..., m, n)`` tensor/array ``x``."""
    T, was_numpy = as_tensor(x, name)
    check_float(T, name)
    check_matrix(T, name, square=square)
    check_finite(T, name)
    return T, was_numpy


def check_pair(A: torch.Tensor, a: str, B: torch.Tensor, b: str, *, into: bool = False) -> None:
    """Raise ``ValueError`` unless ``A`` and ``B`` have the same matrix shape and broadcastable batches
    (with ``into``: ``B``'s batch must broadcast to ``A``'s, since the result has ``A``'s shape)."""
    if A.shape[-2:] != B.shape[-2:]:
        raise ValueError(f"{a} and {b} must have the same matrix shape, got {a} of shape {tuple(A.shape)} and "
                         f"{b} of shape {tuple(B.shape)}")
    try:
        batch = torch.broadcast_shapes(A.shape[:-2], B.shape[:-2])
    except RuntimeError:
        raise ValueError(f"the batch dimensions of {a} {tuple(A.shape)} and {b} {tuple(B.shape)} are not "
                         f"broadcastable") from None
    if into and tuple(batch) != tuple(A.shape[:-2]):
        raise ValueError(f"the batch dimensions of {b} {tuple(B.shape)} must broadcast to those of {a} "
                         f"{tuple(A.shape)} (the result has the shape of {a})")


def check_eta(eta: Any) -> float:
    """``eta`` as a finite float >= 0; ``TypeError``/``ValueError`` naming ``eta`` otherwise."""
    if isinstance(eta, bool) or not isinstance(eta, numbers.Real):
        raise TypeError(f"eta must be a real number >= 0, got {type(eta).__name__}")
    try:
        value = float(eta)
    except OverflowError:
        raise ValueError("eta must be a finite real number >= 0, got an integer beyond the float64 range") from None
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"eta must be a finite real number >= 0, got {eta!r}")
    return value


def check_eps(eps: Any, dtype: torch.dtype) -> float:
    """The eps rule's threshold of the public ``steepest_direction``: ``eps`` as a finite float >= 0, or ``√eps`` of
    ``dtype`` for ``None``; ``TypeError``/``ValueError`` naming ``eps`` otherwise."""
    if eps is None:
        return math.sqrt(torch.finfo(dtype).eps)
    if isinstance(eps, bool) or not isinstance(eps, numbers.Real):
        raise TypeError(f"eps must be a real number >= 0 or None, got {type(eps).__name__}")
    value = float(eps)
    if not (math.isfinite(value) and value >= 0):
        raise ValueError(f"eps must be a finite number >= 0, got {eps!r}")
    return value


def eps_damping(tangent_norm: torch.Tensor, norm: torch.Tensor | float, eps: float) -> torch.Tensor:
    """``min(1, ‖P_W(G)‖_F / (eps ‖G‖_F))`` per matrix: the eps rule of the optimizers
    (:mod:`svmuon.optim.functional`) and of the public ``steepest_direction``; 1 where
    ``tangent_norm >= eps · norm``, which includes ``eps = 0`` and ``tangent_norm = 0 = norm`` (then the step is 0
    anyway)."""
    floor = norm * eps
    return torch.where(tangent_norm >= floor, 1.0, tangent_norm / floor)


def check_atol(atol: Any, dtype: torch.dtype) -> float:
    """The tolerance of a point check: ``atol`` as a float >= 0, or ``√eps`` of ``dtype`` for ``None``."""
    if atol is None:
        return math.sqrt(torch.finfo(dtype).eps)
    if isinstance(atol, bool) or not isinstance(atol, numbers.Real):
        raise TypeError(f"atol must be None or a real number >= 0, got {type(atol).__name__}")
    value = float(atol)
    if math.isnan(value) or value < 0:
        raise ValueError(f"atol must be None or a real number >= 0, got {atol!r}")
    return value


def _max_abs(R: torch.Tensor) -> torch.Tensor:
    """``max|R|`` per matrix of a ``(k, n, n)`` batch, in one pass (no ``|R|`` temporary); NaN where ``R`` has one."""
    return torch.linalg.vector_norm(R, float("inf"), dim=(-2, -1))


def eye_like(T: torch.Tensor) -> torch.Tensor:
    """The ``n × n`` identity in ``T``'s dtype and device (``n = T.shape[-1]``)."""
    return torch.eye(T.shape[-1], dtype=T.dtype, device=T.device)


def _flat(fn: Callable[..., torch.Tensor], *tensors: torch.Tensor) -> torch.Tensor:
    """Apply a 3-D batched kernel to ``(..., m, n)`` tensors of one batch shape, reshaping around it."""
    batch = tensors[0].shape[:-2]
    out = fn(*(t.reshape(-1, *t.shape[-2:]) for t in tensors))
    return out.reshape(*batch, *out.shape[-2:])


class Manifold:
    """Base class of the manifolds ``{W ∈ R^{m×n} : WᵀW = I_n}`` (see the module docstring).

    Subclasses implement the kernels listed in the module's developer note; this class provides the
    checked public methods that have one form for every such manifold (the point check, the defect, the
    polar retraction, the closed-form step along a partial isometry, the steepest direction through
    the direction kernel) and the default kernels (no solver state, the Björck stabilisation, zero slack).
    """

    #: extra per-parameter state a direction solver carries between steps (names of ``init_state``)
    state_keys: tuple[str, ...] = ()

    def __init__(self, **options: Any) -> None:
        if options:
            msign = {"msign_method", "ns_steps", "ns_coefficients", "compute_dtype"} & set(options)
            hint = (" A manifold has no msign route: pass msign_method/ns_steps/ns_coefficients/compute_dtype to the "
                    "optimizer (ManifoldMuon), or orthogonalize= to steepest_direction.") if msign else ""
            raise TypeError(f"{type(self).__name__}() got unexpected options {sorted(options)}.{hint}")

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"

    # -- points ---------------------------------------------------------------------------------------------
    def shape_error(self, shape: tuple[int, ...]) -> str | None:
        """Why a matrix of this shape cannot be a point here (a sentence), or ``None`` if it can."""
        if len(shape) < 2 or 0 in shape:
            return f"a point must be a non-empty matrix (..., m, n), got shape {tuple(shape)}"
        return self._shape_error(tuple(shape))

    def dtype_error(self, dtype: torch.dtype) -> str | None:
        """Why a point of this dtype cannot be solved here with this manifold's options (a sentence), or ``None``
        (protocol: the optimizer refuses such a parameter at construction; default ``None``)."""
        return None

    def defect(self, W: Any) -> torch.Tensor:
        """``‖WᵀW - I‖_max`` per matrix (of the canonical form), shape ``(...)``, accumulated in float64.

        Raises:
            TypeError: non-float ``W``. ValueError: empty, non-finite ``W``, or a shape that is not a point.
        """
        Wt, _ = as_matrix(W, "W")
        self._require_shape(Wt, "W")
        W64 = self._canonical(Wt.double())
        return (W64.mT @ W64 - eye_like(W64)).abs().amax(dim=(-2, -1))

    def check_point(self, W: Any, atol: float | None = 1e-5) -> bool:
        """True iff every matrix of ``W`` is finite, of a valid shape, with ``‖WᵀW - I‖_max <= atol``.

        Args:
            W: tensor or array ``(..., m, n)``. atol: tolerance >= 0 (``None``: ``√eps`` of W's dtype).

        Raises:
            TypeError: ``atol`` is not a real number, or ``W`` is not a tensor/array.
            ValueError: ``atol`` is negative or NaN.
        """
        Wt, _ = as_tensor(W, "W")
        if not Wt.is_floating_point():
            return False
        tol = check_atol(atol, Wt.dtype)
        if Wt.ndim < 2 or self.shape_error(tuple(Wt.shape)) is not None or not bool(torch.isfinite(Wt).all()):
            return False
        return bool((self.defect(Wt) <= tol).all())

    def _require_shape(self, T: torch.Tensor, name: str) -> None:
        err = self.shape_error(tuple(T.shape))
        if err is not None:
            raise ValueError(f"{name}: {err}")

    def _require_point(self, W: torch.Tensor, name: str = "W") -> None:
        """Raise ``ValueError`` unless every matrix of ``W`` (shape already checked) is a point to ``√eps`` of its
        dtype: the tangent projection, the directions and the retractions are formulas valid at points only."""
        atol = math.sqrt(torch.finfo(W.dtype).eps)
        defect = float(self.defect(W).max())
        if not defect <= atol:
            raise ValueError(f"{name} is not a point of {type(self).__name__}: max|WᵀW - I| = {defect:.3g} > {atol:.3g} "
                             f"(√eps of {W.dtype}); project it first with {type(self).__name__}().project({name})")

    def project(self, W: Any) -> Any:
        """Nearest point in Frobenius norm (each manifold implements it; for ``WᵀW = I`` it is the polar
        factor of ``W``)."""
        raise NotImplementedError(f"{type(self).__name__}.project")

    def random(self, *shape: int, dtype: torch.dtype = torch.float32, device: Any = None,
               generator: torch.Generator | None = None) -> torch.Tensor:
        """A random point of shape ``(..., m, n)``, uniformly (Haar) distributed on the manifold.

        The orthonormal factor ``Q`` of a QR decomposition of a Gaussian matrix, with the signs of ``R``'s
        diagonal moved into ``Q`` (so that the distribution is exactly uniform, mezzadri2007generate), computed
        in float64 and rounded once to ``dtype``. A wide shape (m < n) of a manifold that accepts it (the
        Stiefel manifold's ``transpose_wide=True``) gets orthonormal rows.

        Args:
            shape: the point's shape, at least two positive integers ``(..., m, n)`` (or one tuple of them).
            dtype: ``torch.float32`` (default) or ``torch.float64``. device: where the result lives (default
                the CPU; the draw is made on the CPU, so a seeded ``generator`` gives the same point on any
                device). generator: a CPU ``torch.Generator`` for reproducible draws.

        Returns:
            A tensor of ``shape``, ``dtype`` and ``device`` with ``defect(W) <= √eps`` of ``dtype``.

        Raises:
            TypeError: non-integer sizes, a non-float ``dtype``, a ``generator`` that is not a torch.Generator.
            ValueError: fewer than two sizes, a size < 1, or a shape that is not a point of this manifold.

        References:
            mezzadri2007generate (Haar measure by QR with the sign correction), edelman1998geometry.
        """
        if len(shape) == 1 and isinstance(shape[0], (tuple, list, torch.Size)):
            shape = tuple(shape[0])
        for size in shape:
            if isinstance(size, bool) or not isinstance(size, numbers.Integral):
                raise TypeError(f"shape must be integers, got {shape!r}")
        if len(shape) < 2 or min(shape) < 1:
            raise ValueError(f"shape must be at least two sizes >= 1 (..., m, n), got {tuple(shape)}")
        if dtype not in (torch.float32, torch.float64):
            raise TypeError(f"dtype must be torch.float32 or torch.float64, got {dtype!r}")
        if generator is not None and not isinstance(generator, torch.Generator):
            raise TypeError(f"generator must be a torch.Generator or None, got {type(generator).__name__}")
        err = self.shape_error(tuple(shape))
        if err is not None:
            raise ValueError(f"shape: {err}")
        m, n = shape[-2:]
        tall = (max(m, n), min(m, n))
        Z = torch.randn(*shape[:-2], *tall, dtype=torch.float64, generator=generator)
        Q, R = torch.linalg.qr(Z)
        Q = Q * torch.sgn(torch.diagonal(R, dim1=-2, dim2=-1)).unsqueeze(-2)  # exact Haar (mezzadri2007generate)
        Q = Q if m >= n else Q.mT
        return Q.to(dtype=dtype, device=device).contiguous()

    # -- tangent vectors and directions ---------------------------------------------------------------------
    def project_tangent(self, W: Any, Z: Any) -> Any:
        """Orthogonal (Frobenius) projection of an ambient matrix ``Z`` onto the tangent space at ``W``.

        Args:
            W: point ``(..., m, n)``. Z: ambient matrix of the same matrix shape, batch broadcastable.

        Returns:
            ``P_W(Z)``, the type of ``Z``, in the broadcast shape, dtype of ``Z``.

        Raises:
            TypeError: non-float inputs.
            ValueError: bad shapes, non-finite entries, ``W`` not a point (``‖WᵀW - I‖_max > √eps`` of its
                dtype), a result beyond the dtype's range (``Z`` near its largest value).
        """
        from svmuon.orthogonal.msign import power_of_two_scale

        Wt, _ = as_matrix(W, "W")
        Zt, was_numpy = as_matrix(Z, "Z")
        self._require_shape(Wt, "W")
        check_pair(Wt, "W", Zt, "Z")
        self._require_point(Wt)
        scale = power_of_two_scale(Zt)  # exact, and P_W is linear: WᵀZ cannot overflow for a finite Z
        shape = tuple(Wt.shape)
        out = self._canonical(self.tangent(self._canonical(Wt.to(Zt.dtype)), self._canonical(Zt / scale, shape)),
                              shape) * scale
        if not bool(torch.isfinite(out).all()):
            raise ValueError(f"project_tangent: the tangent part of Z is beyond the range of {Zt.dtype} "
                             f"(max|Z| = {float(Zt.abs().max()):.3g}); pass a smaller Z or a wider dtype")
        return out.numpy() if was_numpy else out

    def steepest_direction(self, W: Any, G: Any, *, orthogonalize: Callable[[torch.Tensor], torch.Tensor] | None = None,
                           eps: float | None = None) -> Any:
        """Unit steepest-ascent direction ``Φ``: maximiser of ``tr(GᵀΦ)`` over tangent ``Φ`` with ``‖Φ‖₂ <= 1``.

        Descent moves along ``-Φ`` (:meth:`retract_along`).

        Args:
            W: point ``(..., m, n)``. G: Euclidean gradient, same matrix shape, batch broadcastable.
            orthogonalize: ``X -> msign(X)`` where the manifold's direction needs one (default: exact, by SVD),
                e.g. an :class:`~svmuon.orthogonal.msign.Orthogonalizer` with a Newton–Schulz schedule.
            eps: a tangent part ``‖P_W(G)‖_F`` below ``eps ‖G‖_F`` is rounding noise of the projection, not a
                direction: ``Φ`` is multiplied by ``‖P_W(G)‖_F / (eps ‖G‖_F)`` there (the optimizer's eps rule), so a
                normal ``G = WS`` (``S`` symmetric) gives ``Φ ≈ 0`` as ``G = 0`` does. Default ``√eps`` of the
                dtype; 0 disables.

        Returns:
            ``Φ``, the type of ``G``, the broadcast shape, dtype of ``G``.

        Raises:
            TypeError: non-float inputs, ``eps`` not a real number. ValueError: bad shapes, non-finite entries,
                ``W`` not a point (``‖WᵀW - I‖_max > √eps`` of its dtype), ``eps`` negative or not finite.
        """
        from svmuon.orthogonal.msign import power_of_two_scale

        Wt, _ = as_matrix(W, "W")
        Gt, was_numpy = as_matrix(G, "G")
        self._require_shape(Wt, "W")
        check_pair(Wt, "W", Gt, "G")
        self._require_point(Wt)
        eps_f = check_eps(eps, Gt.dtype)
        shape = torch.broadcast_shapes(Wt.shape, Gt.shape)
        Wc = self._canonical(Wt.to(Gt.dtype).expand(shape).reshape(-1, *shape[-2:]))
        Gc = self._canonical(Gt.expand(shape).reshape(-1, *shape[-2:]))
        Gc = Gc / power_of_two_scale(Gc)  # exact; Φ does not depend on the size of G, and WᵀG cannot overflow
        d = self.direction(Wc, Gc, _orthogonalizer(orthogonalize), self.init_state(Wc))
        damping = eps_damping(d.tangent_norm.to(Gc.dtype), torch.linalg.matrix_norm(Gc), eps_f)
        Phi = self._tangent_from_step(Wc, d.step) * damping[:, None, None]
        Phi = self._canonical(Phi, tuple(shape)).reshape(shape)
        return Phi.numpy() if was_numpy else Phi

    # -- retractions ---------------------------------------------------------------------------------------
    def retract(self, W: Any, Xi: Any) -> Any:
        """Polar retraction ``R_W(Ξ) = msign(W + Ξ) = (W + Ξ)(I + ΞᵀΞ)^{-1/2}`` of a tangent vector ``Ξ``.

        The nearest point to ``W + Ξ`` (for tangent ``Ξ``, ``(W+Ξ)ᵀ(W+Ξ) = I + ΞᵀΞ`` is invertible, so the
        polar factor is unique), computed by SVD. Exact for any tangent ``Ξ``; for a non-tangent ``Ξ`` it
        is still the nearest point to ``W + Ξ``.

        Args:
            W: point ``(..., m, n)``. Xi: tangent vector, same matrix shape, batch broadcastable to ``W``'s.

        Returns:
            The new point, the type, shape and dtype of ``W``.

        Raises:
            TypeError: non-float inputs.
            ValueError: bad shapes, non-finite entries, ``W`` not a point (``‖WᵀW - I‖_max > √eps`` of its
                dtype), a singular ``W + Ξ`` (only possible for a non-tangent or enormous ``Ξ``).

        References:
            absil2008optimization (polar retraction), higham2008functions.
        """
        from svmuon.orthogonal.msign import msign

        Wt, was_numpy = as_matrix(W, "W")
        Xt, _ = as_matrix(Xi, "Xi")
        self._require_shape(Wt, "W")
        check_pair(Wt, "W", Xt, "Xi", into=True)
        self._require_point(Wt)
        S = Wt + Xt.to(Wt.dtype)
        if S.dtype not in (torch.float32, torch.float64):  # float16/bfloat16: LAPACK has no SVD; in float32, as project
            S = S.float()
        out = msign(S, method="svd", rcond=0.0)
        sv = torch.linalg.svdvals(S)  # singular in W's dtype: LAPACK may return rounding noise, not 0, for the
        numerically_singular = (sv[..., -1] <= sv[..., 0] * max(S.shape[-2:]) * torch.finfo(S.dtype).eps)  # lost σ
        if bool((self.defect(out) > 0.5).any() or numerically_singular.any()):  # a dropped direction: |WᵀW - I| = 1
            raise ValueError("retract: W + Xi is singular (in W's dtype), so it has no unique nearest point; Xi must "
                             "be a tangent vector of modest size (for tangent Xi, W + Xi is always invertible)")
        out = out.to(Wt.dtype)
        return out.numpy() if was_numpy else out

    def retract_along(self, W: Any, Phi: Any, eta: float) -> Any:
        """Polar retraction along a partial isometry: ``R_W(-ηΦ) = (W - ηΦ)(I - P + P/√(1+η²))``, ``P = ΦᵀΦ``.

        For a tangent ``Φ`` whose ``ΦᵀΦ = P`` is an orthogonal projector (a partial isometry, as the output
        of an exact msign; rank-deficient allowed), ``(W-ηΦ)ᵀ(W-ηΦ) = I + η²P`` and
        ``(I + η²P)^{-1/2} = I - P + P/√(1+η²)``, so this closed form equals :meth:`retract` of ``-ηΦ``
        (eq-orth-retraction). It is the step an optimizer takes, ``eta`` its spectral length. Where the
        result of the closed form is off the manifold by more than ``√eps/4`` (``Φ`` not tangent, or not of
        the kind the manifold's closed form assumes), it is replaced by :meth:`retract` of ``-ηΦ``, the
        nearest point to ``W - ηΦ`` by definition.

        Args:
            W: point ``(..., m, n)``. Phi: tangent partial isometry, same matrix shape, batch broadcastable
                to ``W``'s. eta: step length >= 0.

        Returns:
            The new point, the type, shape and dtype of ``W``.

        Raises:
            TypeError: non-float matrices, ``eta`` not a real number.
            ValueError: bad shapes, non-finite entries, ``W`` not a point (``‖WᵀW - I‖_max > √eps`` of its
                dtype), ``eta`` negative, NaN, infinite or beyond the range of ``W``'s dtype, or a non-finite
                result (a ``Φ`` so large that ``ΦᵀΦ`` overflows).

        References:
            su2025orthogonal (the closed form), absil2008optimization.
        """
        Wt, was_numpy = as_matrix(W, "W")
        Pt, _ = as_matrix(Phi, "Phi")
        eta_f = check_eta(eta)
        self._require_shape(Wt, "W")
        check_pair(Wt, "W", Pt, "Phi", into=True)
        self._require_point(Wt)
        Pt = Pt.to(Wt.dtype).expand_as(Wt).reshape(-1, *Wt.shape[-2:])
        Wc = self._canonical(Wt.reshape(-1, *Wt.shape[-2:]))
        step = self._step_from_tangent(Wc, self._canonical(Pt))
        if eta_f > torch.finfo(Wt.dtype).max:
            raise ValueError(f"eta must be a finite real number >= 0 representable in {Wt.dtype} (at most "
                             f"{torch.finfo(Wt.dtype).max:.3g}), got {eta!r}")
        out = self._canonical(self.retract_direction(Wc, step, _eta_tensor(eta_f, Wc), eta_f),
                              tuple(Wt.shape)).reshape(Wt.shape)
        # a quarter of the √eps that every method requires of a point: the result is one, with room to spare
        margin = POINT_MARGIN * math.sqrt(torch.finfo(Wt.dtype).eps)
        if bool(torch.isfinite(out).all()) and not bool((self.defect(out) <= margin).all()):
            # Φ was not a tangent vector (or not of the kind the closed form assumes): the formula does not
            # apply, so take the definition, the nearest point to W - ηΦ (raises if that is not unique)
            return self.retract(W, -eta_f * Pt.reshape(Wt.shape))
        if not bool(torch.isfinite(out).all()):
            raise ValueError(f"retract_along produced a non-finite result for eta={eta!r} in {Wt.dtype}; "
                             "W must be a point and Phi a tangent partial isometry of modest size")
        return out.numpy() if was_numpy else out

    # -- default kernels -------------------------------------------------------------------------------------
    def _shape_error(self, shape: tuple[int, ...]) -> str | None:
        m, n = shape[-2:]
        return None if m >= n else f"a point must be tall or square (..., m, n) with m >= n, got {m} x {n}"

    def transposed(self, shape: tuple[int, ...]) -> bool:
        """Whether the kernels see a parameter of this shape transposed (the one orientation hook; default False)."""
        return False

    def _canonical(self, X: torch.Tensor, shape: tuple[int, ...] | None = None) -> torch.Tensor:
        """``X`` as the kernels see a parameter of ``shape`` (default ``X``'s own); an involution, so it also
        turns a kernel's result back when given the parameter's shape."""
        return X.mT if self.transposed(tuple(X.shape if shape is None else shape)) else X

    def init_state(self, W: torch.Tensor) -> dict[str, torch.Tensor]:
        """Fresh solver state for a canonical batch ``W`` ``(k, m, n)`` (protocol; default: none)."""
        return {}

    def stabilize(self, W: torch.Tensor, correct: bool | int) -> tuple[torch.Tensor, torch.Tensor]:
        """``(W after `correct` Björck steps W + W(I - WᵀW)/2, max|WᵀW - I| before them)`` for canonical
        ``(k, m, n)`` (protocol; ``True`` is one step): one Gram matrix, one more product for the first step, two for
        each further one (bjorck1971iterative; an error ε becomes ≈ 3ε²/4)."""
        eye = eye_like(W).expand(W.shape[0], -1, -1)
        R = torch.baddbmm(eye, W.mT, W, alpha=-1.0)  # I - WᵀW
        defect = _max_abs(R)
        for k in range(int(correct)):
            if k:
                R = torch.baddbmm(eye, W.mT, W, alpha=-1.0)
            W = torch.baddbmm(W, W, R, alpha=0.5)
        return W, defect

    def step_slack(self, eta: torch.Tensor, orthogonalize: Any) -> torch.Tensor | float:
        """A bound on the defect one retraction adds by itself (protocol; default 0)."""
        return 0.0

    def step_slack_bound(self, eta: float, orthogonalize: Any) -> float:
        """:meth:`step_slack` for a host step length ``eta`` (a float, no tensor: no host synchronisation), which
        decides how many Björck steps a corrected retraction takes (protocol; default 0)."""
        return 0.0

    def start_defect(self, W: torch.Tensor) -> torch.Tensor | None:
        """``max|WᵀW - I|`` of the point before the step, ``(k,)``, for a manifold whose retraction returns a point
        whatever ``W`` was (protocol; default ``None``: the retracted point's defect shows an outside change)."""
        return None

    def tangent(self, W: torch.Tensor, Z: torch.Tensor) -> torch.Tensor:
        """``P_W(Z)`` for canonical batches (protocol)."""
        raise NotImplementedError(f"{type(self).__name__}.tangent")

    def direction(self, W: torch.Tensor, U: torch.Tensor, orthogonalize: Any, state: dict) -> Direction:
        """The unit steepest direction for canonical batches (protocol)."""
        raise NotImplementedError(f"{type(self).__name__}.direction")

    def _tangent_from_step(self, W: torch.Tensor, step: torch.Tensor) -> torch.Tensor:
        return step

    def _step_from_tangent(self, W: torch.Tensor, Phi: torch.Tensor) -> torch.Tensor:
        return Phi

    def retract_direction(self, W: torch.Tensor, step: torch.Tensor, eta: torch.Tensor,
                          eta_max: float | None = None) -> torch.Tensor:
        """Generic closed form ``(W - ηΦ)(I - P + P/√(1+η²))`` with ``step = Φ`` a partial isometry (protocol;
        two products)."""
        _, c = _retraction_scalars(eta)
        V = W - eta * step
        return torch.baddbmm(V, V, (step.mT @ step) * c)  # (W - ηΦ)(I + (s-1)P)


def _orthogonalizer(orthogonalize: Any) -> Callable[[torch.Tensor], torch.Tensor]:
    """The caller's ``orthogonalize`` (checked to be callable), or the exact msign by SVD."""
    if orthogonalize is None:
        from svmuon.orthogonal.msign import Orthogonalizer

        return Orthogonalizer("svd")
    if not callable(orthogonalize):
        raise TypeError(f"orthogonalize must be None or a callable X -> msign(X), got {type(orthogonalize).__name__}")
    return orthogonalize


def _eta_tensor(eta: float, W: torch.Tensor) -> torch.Tensor:
    return torch.full((W.shape[0], 1, 1), eta, dtype=W.dtype, device=W.device)


def _retraction_scalars(eta: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(s, s - 1)`` with ``s = 1/√(1+η²)``, without overflow for huge η or cancellation for small η.

    Computed in float64 and rounded once to ``eta``'s dtype, so that ``s² (1 + η²) = 1`` holds to one
    rounding and the retraction adds no drift of its own in float32 (``eta`` holds only ``k`` numbers).
    """
    e = eta.double()
    r = torch.hypot(torch.ones_like(e), e)
    return (1.0 / r).to(eta.dtype), (-_one_minus_s(e, r)).to(eta.dtype)


def _one_minus_s(eta: Any, r: Any) -> Any:
    """``1 - s = η²/(r(1 + r))`` for ``r = √(1 + η²)``, without cancellation for small η: the one formula of the
    retraction's scalar, for tensors (:func:`_retraction_scalars`) and host floats (the step's slack bound)."""
    return (eta / r) * (eta / (1.0 + r))
