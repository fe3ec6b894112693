"""LEN (Lazy Extra Newton), LEN-restart, EG-2 and EG as compiled ``lax.while_loop`` solvers.

LEN (Chen, Liu, Zhang, ICLR 2025, Algorithm 1) with snapshot pi(t) = t - (t mod m):

  1. z_{t+1/2} solves F(z_t) = (J(z_pi(t)) + M ||z_t - z_{t+1/2}|| I)(z_t - z_{t+1/2}),
  2. gamma_t = M ||z_t - z_{t+1/2}||,
  3. z_{t+1} = z_t - F(z_{t+1/2}) / gamma_t,

output sum_t z_{t+1/2}/gamma_t / sum_t 1/gamma_t. Step 1 is z_t - (J + lam I)^{-1} F(z_t)
with lam the root of phi(lam) = M ||(J + lam I)^{-1} F(z_t)|| - lam. The snapshot Jacobian
is factored once per m steps (complex Schur J = Q U Q^H as in the paper, real Hessenberg
J = Q H Q^T, or J = V diag(e) V^{-1}); each try of the root search is then O(d^2) (two
triangular back-substitutions; plus a bidiagonal-L LU for Hessenberg; matvecs for eig), the
search is a safeguarded Newton method warm-started at the previous step's lam, and the
accepted try's solve is the step.

LEN and EG are :class:`~jaxlib_papers.core.contract.Solver` objects over one typed
:class:`LoopState` (``len_solver``, ``eg_solver``), run by the shared ``contract.iterate``
driver; the factories ``make_*(problem, ...) -> solve(z0) -> SolveResult`` wrap them into
pure, jittable functions (no jit inside). Run them in float64
(``jaxlib_papers.core.precision.enable_x64``); ``train.solve`` does so and jits.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NamedTuple

import chex
import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
from jax import lax

from jaxlib_papers.core import contract
from jaxlib_papers.minimax.problems import MinimaxProblem

FACTORIZATIONS = ("schur", "hessenberg", "eig", "dense")  # and "auto", see below
METHODS = ("len", "eg2", "eg", "len_restart")


class SolveResult(NamedTuple):
  """What a solver returns; histories are [max_iters] arrays, NaN (or -1) past num_iters.

  Attributes:
    z_last: [d] last iterate z_T.
    z_half: [d] last extrapolated point z_{T-1/2} (the point whose ||F|| stopped the run).
    z_average: [d] LEN's weighted average sum z_{t+1/2}/gamma_t / sum 1/gamma_t (EG: the
      uniform average of the z_{t+1/2}).
    num_iters: int32 [], iterations done.
    num_field_calls: int32 [], #F.
    num_jacobian_calls: int32 [], #J.
    oracle_cost: [] #F + d #J.
    converged: bool [], ||F(z_half)|| <= tol reached.
    grad_norm: [] ||F(z_half)|| at the last iteration (||F(z0)|| if no iteration ran).
    grad_norm_history: [max_iters] ||F(z_{t+1/2})||.
    dist_history: [max_iters] ||z_{t+1/2} - z*|| (NaN when z* is unknown).
    gamma_history: [max_iters] gamma_t = M ||z_t - z_{t+1/2}|| (EG: 1/eta).
    root_iters_history: int32 [max_iters] tries of the lam search per step (EG: 0).
  """
  z_last: jax.Array
  z_half: jax.Array
  z_average: jax.Array
  num_iters: jax.Array
  num_field_calls: jax.Array
  num_jacobian_calls: jax.Array
  oracle_cost: jax.Array
  converged: jax.Array
  grad_norm: jax.Array
  grad_norm_history: jax.Array
  dist_history: jax.Array
  gamma_history: jax.Array
  root_iters_history: jax.Array


# --------------------------------------------------------------------------- factorizations


class _Ops(NamedTuple):
  """Operations on a factored snapshot Jacobian.

  factor(J) -> fac; rotate(fac, g) -> g_rot (once per step, O(d^2));
  norm_and_slope(fac, g_rot, lam) -> (||s||, d||s||/dlam, w, dw/dlam) for
  s = (J + lam I)^{-1} g, with w the solution in the factorization's coordinates;
  unrotate(fac, w) -> s (real [d]), so the accepted try's solve is reused for the step.
  """
  factor: Callable[[jax.Array], Any]
  rotate: Callable[[Any, jax.Array], jax.Array]
  norm_and_slope: Callable[[Any, jax.Array, jax.Array],
                           tuple[jax.Array, jax.Array, jax.Array, jax.Array]]
  unrotate: Callable[[Any, jax.Array], jax.Array]


def _slope(norm, inner):
  # d||s||/dlam = Re<s, ds/dlam> / ||s||; 0 when s = 0 (then F(z) = 0 and lam -> 0).
  positive = norm > 0
  return jnp.where(positive, inner / jnp.where(positive, norm, 1.0), 0.0)


def _back_substitute(upper: jax.Array, rhs: jax.Array, shift: jax.Array,
                     block: int = 4) -> jax.Array:
  """Solves (upper + shift I) x = rhs for upper-triangular ``upper`` in O(d^2).

  Blocked: a scan over blocks of ``block`` rows from the bottom, each one matrix-vector
  product with the rows' solved tail and an unrolled solve of the block's triangle. The
  loop is latency-bound (one step per block), so 4-row blocks halve a row-by-row scan's
  time at d = 200 (14 against 28 us, one core), and a LEN solve at n = 100 runs 1.4x
  faster than with XLA's triangular solve (2026-12-04, ``seeds/minimax.md``).
  """
  dim = upper.shape[0]
  num_blocks = -(-dim // block)
  pad = num_blocks * block - dim
  diagonal = jnp.pad(jnp.diagonal(upper) + shift, (0, pad), constant_values=1.0)
  upper = jnp.pad(upper, ((0, pad), (0, pad)))
  rhs_padded = jnp.pad(rhs, (0, pad))

  def solve_block(x, index):
    start = index * block
    rows = lax.dynamic_slice_in_dim(upper, start, block, 0)
    # Entries of x in and above the block are still 0, so the full-row product is the tail's.
    residual = lax.dynamic_slice_in_dim(rhs_padded, start, block) - rows @ x
    triangle = lax.dynamic_slice_in_dim(rows, start, block, 1)
    pivots = lax.dynamic_slice_in_dim(diagonal, start, block)
    solved = [None] * block
    for k in range(block - 1, -1, -1):
      value = residual[k]
      for j in range(k + 1, block):
        value = value - triangle[k, j] * solved[j]
      solved[k] = value / pivots[k]
    return lax.dynamic_update_slice_in_dim(x, jnp.stack(solved), start, 0), None

  x, _ = lax.scan(solve_block, jnp.zeros_like(rhs_padded), jnp.arange(num_blocks - 1, -1, -1))
  return x[:dim]


def _forward_bidiagonal(multipliers: jax.Array, rhs: jax.Array) -> jax.Array:
  """Solves L y = rhs for unit lower-bidiagonal L with subdiagonal ``multipliers``."""

  def solve_row(previous, inputs):
    multiplier, value = inputs
    current = value - multiplier * previous
    return current, current

  _, rest = lax.scan(solve_row, rhs[0], (multipliers, rhs[1:]))
  return jnp.concatenate([rhs[:1], rest])


def _schur_ops() -> _Ops:

  def factor(jac):
    upper, unitary = jsl.schur(jac.astype(jnp.result_type(jac.dtype, jnp.complex64)),
                               output="complex")
    return upper, unitary

  def rotate(fac, g):
    _, unitary = fac
    return unitary.conj().T @ g.astype(unitary.dtype)

  def norm_and_slope(fac, g_rot, lam):
    upper, _ = fac
    shift = lam.astype(upper.dtype)
    # Q is unitary, so ||s|| = ||w|| with w = (U + lam I)^{-1} Q^H g: O(d^2) per try.
    w = _back_substitute(upper, g_rot, shift)
    v = _back_substitute(upper, w, shift)
    norm = jnp.linalg.norm(w)
    return norm, _slope(norm, -jnp.real(jnp.vdot(w, v))), w, -v

  def unrotate(fac, w):
    _, unitary = fac
    return jnp.real(unitary @ w)

  return _Ops(factor, rotate, norm_and_slope, unrotate)


def _eig_ops() -> _Ops:

  def factor(jac):
    eigenvalues, vectors = jnp.linalg.eig(jac)
    return eigenvalues, vectors, jnp.linalg.inv(vectors)

  def rotate(fac, g):
    _, _, inverse = fac
    return inverse @ g.astype(inverse.dtype)

  def norm_and_slope(fac, g_rot, lam):
    eigenvalues, vectors, _ = fac
    w = g_rot / (eigenvalues + lam)
    s = vectors @ w
    ds = -(vectors @ (w / (eigenvalues + lam)))
    norm = jnp.linalg.norm(s)
    return norm, _slope(norm, jnp.real(jnp.vdot(s, ds))), s, ds

  def unrotate(fac, s):
    del fac
    return jnp.real(s)

  return _Ops(factor, rotate, norm_and_slope, unrotate)


def _hessenberg_lu(upper_hessenberg: jax.Array, lam: jax.Array
                   ) -> tuple[jax.Array, jax.Array]:
  """LU of H + lam I for upper-Hessenberg H, without pivoting, in O(d^2).

  L is unit lower bidiagonal, so each row of U is the row of H minus a multiple of the
  previous row of U: one pass of d vector updates. No pivoting is safe when H + lam I has a
  positive-definite symmetric part (a monotone J and lam > 0): every leading block is then
  nonsingular and the pivots stay >= lam.

  Returns:
    (multipliers [d - 1] (L's subdiagonal), U [d, d]).
  """
  dim = upper_hessenberg.shape[0]
  shifted = upper_hessenberg + lam * jnp.eye(dim, dtype=upper_hessenberg.dtype)

  def eliminate(previous_row, inputs):
    row, index = inputs
    multiplier = row[index - 1] / previous_row[index - 1]
    new_row = row - multiplier * previous_row
    return new_row, (multiplier, new_row)

  _, (multipliers, rows) = lax.scan(
      eliminate, shifted[0], (shifted[1:], jnp.arange(1, dim)))
  return multipliers, jnp.concatenate([shifted[:1], rows], axis=0)


def _hessenberg_ops() -> _Ops:
  """J = Q H Q^T (real, ~10x cheaper than a complex Schur); O(d^2) per try."""

  def factor(jac):
    upper_hessenberg, orthogonal = jsl.hessenberg(jac, calc_q=True)
    return upper_hessenberg, orthogonal

  def rotate(fac, g):
    _, orthogonal = fac
    return orthogonal.T @ g

  def solve(multipliers, upper, rhs):
    y = _forward_bidiagonal(multipliers, rhs)
    return _back_substitute(upper, y, jnp.zeros((), upper.dtype))

  def norm_and_slope(fac, g_rot, lam):
    upper_hessenberg, _ = fac
    multipliers, upper = _hessenberg_lu(upper_hessenberg, lam)
    w = solve(multipliers, upper, g_rot)
    v = solve(multipliers, upper, w)
    norm = jnp.linalg.norm(w)
    return norm, _slope(norm, -jnp.vdot(w, v)), w, -v

  def unrotate(fac, w):
    _, orthogonal = fac
    return orthogonal @ w

  return _Ops(factor, rotate, norm_and_slope, unrotate)


def _dense_ops() -> _Ops:
  """Reference path: one O(d^3) LU per try (runs on any backend; no Schur needed)."""

  def factor(jac):
    return jac

  def rotate(fac, g):
    del fac
    return g

  def norm_and_slope(jac, g, lam):
    lu = jsl.lu_factor(jac + lam * jnp.eye(jac.shape[0], dtype=jac.dtype))
    s = jsl.lu_solve(lu, g)
    ds = -jsl.lu_solve(lu, s)
    norm = jnp.linalg.norm(s)
    return norm, _slope(norm, jnp.vdot(s, ds)), s, ds

  def unrotate(fac, s):
    del fac
    return s

  return _Ops(factor, rotate, norm_and_slope, unrotate)


def resolve_factorization(factorization: str, m: int | None = None) -> str:
  """"auto" -> "hessenberg": a real Hessenberg form is ~10x cheaper than a complex Schur
  form, and with the scan-based O(d^2) solves its tries cost about the same. Its LU skips
  pivoting, which is safe for monotone problems (convex-concave f, lam > 0); pass "schur"
  for other problems. ``m`` is accepted for future rules and unused."""
  del m
  if factorization == "auto":
    return "hessenberg"
  return factorization


def _ops(factorization: str) -> _Ops:
  if factorization == "schur":
    return _schur_ops()
  if factorization == "hessenberg":
    return _hessenberg_ops()
  if factorization == "eig":
    return _eig_ops()
  if factorization == "dense":
    return _dense_ops()
  raise ValueError(
      f"factorization must be one of {FACTORIZATIONS}, got {factorization!r}")


# --------------------------------------------------------------------------- subproblem


def _evaluate_phi(ops: _Ops, fac: Any, g_rot: jax.Array, reg_weight: jax.Array,
                  lam: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
  """(phi(lam) [], phi'(lam) [], w, dw/dlam) with phi(lam) = M ||(J + lam I)^{-1} g|| - lam."""
  norm, slope, w, dw = ops.norm_and_slope(fac, g_rot, lam)
  return reg_weight * norm - lam, reg_weight * slope - 1.0, w, dw


def _next_try(lam: jax.Array, phi: jax.Array, dphi: jax.Array, lo: jax.Array,
              hi: jax.Array, rtol: float, tiny: Any
              ) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array, jax.Array]:
  """One safeguarded Newton decision from phi at ``lam``.

  Returns:
    (next lam, lo, hi, done, polished): ``polished`` means the search ends by taking the
    Newton step to first order (the caller moves lam and w by it, with no new solve).
  """
  at_root = jnp.abs(phi) <= rtol * lam
  above = phi > 0  # root lies right of lam (NaN counts as "left" and shrinks hi)
  lo = jnp.where(above, lam, lo)
  hi = jnp.where(above, hi, lam)
  newton = lam - phi / dphi
  inside = jnp.isfinite(newton) & (newton > lo) & (newton < hi)
  # A Newton step delta <= sqrt(rtol) lam leaves lam + delta within ~delta^2 / lam <= rtol lam
  # of the root (Newton's quadratic error on this convex, decreasing phi), and
  # w + delta dw/dlam within ~(delta / lam)^2 <= rtol of w(lam + delta) (relative;
  # ||(J + lam I)^{-1}|| <= 1 / lam for monotone J): one solve fewer than evaluating there.
  polished = ~at_root & inside & (jnp.abs(newton - lam) <= math.sqrt(rtol) * lam)
  fallback = jnp.where(jnp.isfinite(hi), 0.5 * (lo + hi), 2.0 * lam)
  next_lam = jnp.maximum(jnp.where(inside, newton, fallback), tiny)
  tight = jnp.isfinite(hi) & (hi - lo <= rtol * hi)
  return next_lam, lo, hi, at_root | polished | tight, polished


def find_regularization(ops: _Ops, fac: Any, g_rot: jax.Array, reg_weight: jax.Array,
                        lam_init: jax.Array, *, rtol: float = 1e-12,
                        max_tries: int = 100) -> tuple[jax.Array, jax.Array, jax.Array]:
  """Root lam > 0 of phi(lam) = M ||(J + lam I)^{-1} g|| - lam by safeguarded Newton.

  phi is decreasing for monotone J (phi(0+) >= 0, phi(lam) < 0 for lam^2 > M ||g||), so the
  search keeps a bracket [lo, hi] of the sign change, takes Newton steps that stay inside it
  and otherwise bisects (or doubles lam while no upper end is known).

  Args:
    ops: factorization operations.
    fac: factored snapshot Jacobian.
    g_rot: rotated field at z_t.
    reg_weight: M > 0.
    lam_init: warm start (> 0).
    rtol: stop when |phi| <= rtol lam, or the bracket is rtol-tight, or the Newton step
      delta is below sqrt(rtol) lam: then the step is taken to first order (lam + delta and
      w + delta dw/dlam, each within ~rtol), which saves the try that would confirm it.
    max_tries: cap on tries (each O(d^2) except for "dense").

  Returns:
    (lam [], tries int32 [], w): lam and its solve in the factorization's coordinates
    (``ops.unrotate(fac, w)`` is the step), so the step costs no extra solve.
  """
  dtype = jnp.real(g_rot).dtype
  tiny = jnp.finfo(dtype).tiny

  def cond(state):
    tries, *_, done = state
    return jnp.logical_and(~done, tries < max_tries)

  def decide(tries, lam, lo, hi):
    phi, dphi, w, dw = _evaluate_phi(ops, fac, g_rot, reg_weight, lam)
    following, lo, hi, done, polished = _next_try(lam, phi, dphi, lo, hi, rtol, tiny)
    w = jnp.where(polished, w + (following - lam).astype(w.dtype) * dw, w)
    lam = jnp.where(polished, following, lam)
    return tries + 1, lam, w, following, lo, hi, done

  def body(state):
    tries, _, _, next_lam, lo, hi, _ = state
    return decide(tries, next_lam, lo, hi)

  lam0 = jnp.maximum(jnp.asarray(lam_init, dtype), tiny)
  init = decide(jnp.zeros((), jnp.int32), lam0, jnp.zeros((), dtype),
                jnp.full((), jnp.inf, dtype))
  tries, lam, w, _, _, _, _ = lax.while_loop(cond, body, init)
  return lam, tries, w


def solve_subproblem(jacobian: jax.Array, field_value: jax.Array, reg_weight: float, *,
                     factorization: str = "schur", lam_init: float | None = None,
                     rtol: float = 1e-12, max_tries: int = 100
                     ) -> tuple[jax.Array, jax.Array]:
  """Solves F = (J + M ||s|| I) s for the LEN step s = z_t - z_{t+1/2}.

  Args:
    jacobian: [d, d] J (snapshot).
    field_value: [d] F(z_t).
    reg_weight: M > 0.
    factorization: "schur" | "hessenberg" | "eig" | "dense" | "auto".
    lam_init: warm start for lam = M ||s||; default sqrt(M ||F||).
    rtol, max_tries: root search controls.

  Returns:
    (s [d], lam []) with lam = M ||s|| to rtol.
  """
  ops = _ops(resolve_factorization(factorization))
  fac = ops.factor(jacobian)
  g_rot = ops.rotate(fac, field_value)
  if lam_init is None:
    lam_init = jnp.sqrt(reg_weight * jnp.linalg.norm(field_value))
  lam, _, w = find_regularization(ops, fac, g_rot, jnp.asarray(reg_weight), lam_init,
                                  rtol=rtol, max_tries=max_tries)
  return ops.unrotate(fac, w), lam


# --------------------------------------------------------------------------- LEN


def official_reg_weight(rho: float, m: int) -> float:
  """M = (16/3) rho m, what the official script effectively uses (theory needs >= 3 rho m)."""
  return 16.0 / 3.0 * rho * m


def _distance(problem: MinimaxProblem, z: jax.Array) -> jax.Array:
  if problem.z_star is None:
    return jnp.full((), jnp.nan, z.dtype)
  return jnp.linalg.norm(z - problem.z_star.astype(z.dtype))


def _check_float64(z0: jax.Array) -> None:
  # float32 cannot reach ||F|| <= 1e-8 on these problems: it would silently run to budget.
  if z0.dtype != jnp.float64:
    raise ValueError(
        f"z0 must be float64, got {z0.dtype}: run the solver inside "
        "jaxlib_papers.core.precision.enable_x64()")


def _check_common(tol: float, max_iters: int) -> None:
  if not tol >= 0:
    raise ValueError(f"tol must be >= 0, got {tol}")
  if int(max_iters) < 1:
    raise ValueError(f"max_iters must be >= 1, got {max_iters}")


def make_len(problem: MinimaxProblem, *, m: int, reg_weight: float, tol: float = 1e-8,
             max_iters: int = 1000, factorization: str = "schur", root_rtol: float = 1e-12,
             root_max_tries: int = 100
             ) -> Callable[[jax.Array], SolveResult]:
  """LEN (Algorithm 1) as a pure function ``solve(z0: [d]) -> SolveResult``.

  Args:
    problem: the oracles.
    m: Jacobian refresh period (m = 1 is EG-2), >= 1.
    reg_weight: M > 0 (theory: >= 3 rho m; official: (16/3) rho m).
    tol: stop once ||F(z_{t+1/2})|| <= tol.
    max_iters: iteration budget (also the history length).
    factorization: "schur" (default), "hessenberg" (monotone problems), "eig", "dense"
      (O(d^3) per try; the reference, and the path for backends without Schur), or
      "auto" (see :func:`resolve_factorization`).
    root_rtol, root_max_tries: controls of the lam search.

  Returns:
    solve(z0) -> SolveResult; #F = 2 per iteration, #J = ceil(iterations / m).
  """
  if int(m) < 1:
    raise ValueError(f"m must be an integer >= 1, got {m}")
  if not reg_weight > 0:
    raise ValueError(f"reg_weight (M) must be > 0, got {reg_weight}")
  program = make_len_sweep(problem, tol=tol, max_iters=max_iters,
                           factorization=resolve_factorization(factorization, int(m)),
                           root_rtol=root_rtol, root_max_tries=root_max_tries)

  def solve(z0: jax.Array) -> SolveResult:
    return program(z0, int(m), reg_weight)

  return solve


class LoopState(NamedTuple):
  """State of the LEN / EG loop (d = problem.dim, T = max_iters).

  Attributes:
    t: int32 [], iterations done.
    z: [d] z_t.
    z_half: [d] z_{t-1/2}, the last extrapolated point (z0 before the first step).
    fac: the factored snapshot Jacobian (LEN; an empty tuple for EG).
    lam: [] the last accepted regularisation lam (0 = no warm start yet; EG: 0).
    refresh_period: int32 [], m (EG: 0, never refreshed).
    step_scale: [] M (LEN) or eta (EG).
    weighted_sum: [d] sum_s z_{s+1/2} / gamma_s (EG: sum_s z_{s+1/2}).
    weight: [] sum_s 1 / gamma_s (EG: the count).
    num_jac: int32 [], #J.
    grad_norm: [] ||F(z_{t-1/2})|| (inf before the first step).
    grad_hist, dist_hist, gamma_hist: [T] per-iteration histories (NaN past t).
    root_hist: int32 [T] lam-search tries per iteration (-1 past t; EG: 0).
  """
  t: jax.Array
  z: jax.Array
  z_half: jax.Array
  fac: Any
  lam: jax.Array
  refresh_period: jax.Array
  step_scale: jax.Array
  weighted_sum: jax.Array
  weight: jax.Array
  num_jac: jax.Array
  grad_norm: jax.Array
  grad_hist: jax.Array
  dist_hist: jax.Array
  gamma_hist: jax.Array
  root_hist: jax.Array


def _initial_state(z0: jax.Array, fac: Any, refresh_period: Any, step_scale: Any,
                   max_iters: int) -> LoopState:
  z0 = jnp.asarray(z0)
  chex.assert_rank(z0, 1)
  _check_float64(z0)
  dtype = z0.dtype
  nan_hist = jnp.full((max_iters,), jnp.nan, dtype)
  return LoopState(
      t=jnp.zeros((), jnp.int32), z=z0, z_half=z0, fac=fac, lam=jnp.zeros((), dtype),
      refresh_period=jnp.asarray(refresh_period, jnp.int32),
      step_scale=jnp.asarray(step_scale, dtype), weighted_sum=jnp.zeros_like(z0),
      weight=jnp.zeros((), dtype), num_jac=jnp.zeros((), jnp.int32),
      grad_norm=jnp.full((), jnp.inf, dtype), grad_hist=nan_hist, dist_hist=nan_hist,
      gamma_hist=nan_hist, root_hist=jnp.full((max_iters,), -1, jnp.int32))


def _record(s: LoopState, problem: MinimaxProblem, z_half, grad_norm, gamma, tries
            ) -> dict[str, jax.Array]:
  """The history updates of iteration ``s.t`` (fields of the next LoopState)."""
  return dict(
      grad_norm=grad_norm, grad_hist=s.grad_hist.at[s.t].set(grad_norm),
      dist_hist=s.dist_hist.at[s.t].set(_distance(problem, z_half)),
      gamma_hist=s.gamma_hist.at[s.t].set(gamma), root_hist=s.root_hist.at[s.t].set(tries))


def _output(tol: float, dim: int):
  def output(s: LoopState) -> SolveResult:
    # No step taken (or gamma = 0 at every step, which leaves z at z0): the average is z.
    average = jnp.where(s.weight > 0, s.weighted_sum / jnp.where(s.weight > 0, s.weight, 1.0),
                        s.z)
    num_field = 2 * s.t
    return SolveResult(
        z_last=s.z, z_half=s.z_half, z_average=average, num_iters=s.t,
        num_field_calls=num_field.astype(jnp.int32), num_jacobian_calls=s.num_jac,
        oracle_cost=(num_field + dim * s.num_jac).astype(s.z.dtype),
        converged=s.grad_norm <= tol, grad_norm=s.grad_norm,
        grad_norm_history=s.grad_hist, dist_history=s.dist_hist,
        gamma_history=s.gamma_hist, root_iters_history=s.root_hist)
  return output


def _warm_ratio(s: LoopState) -> jax.Array:
  """lam_t / lam_{t-1} predicted from lam^2 / ||F(z_{t-1/2})|| ~ constant (1 when t < 2).

  Along LEN's iterates lam_t = M ||s_t|| tracks sqrt(||F(z_{t-1/2})||) to a few per cent
  while lam itself moves 2-90 % per step, so the warm start lands closer to the root.
  """
  last = s.grad_hist[jnp.maximum(s.t - 1, 0)]
  before = s.grad_hist[jnp.maximum(s.t - 2, 0)]
  usable = (s.t >= 2) & (last > 0) & (before > 0) & jnp.isfinite(last / before)
  return jnp.where(usable, jnp.sqrt(jnp.where(usable, last / before, 1.0)), 1.0)


def len_solver(problem: MinimaxProblem, *, tol: float = 1e-8, max_iters: int = 1000,
               factorization: str = "schur", root_rtol: float = 1e-12,
               root_max_tries: int = 100) -> contract.Solver:
  """LEN as a :class:`~jaxlib_papers.core.contract.Solver` over :class:`LoopState`.

  ``init_state(z0: [d], m, reg_weight)``; ``output`` is a :class:`SolveResult`. Run it with
  ``contract.iterate(solver, z0, m, reg_weight, max_iterations=max_iters)``. Arguments as
  in :func:`make_len`.
  """
  _check_common(tol, max_iters)
  max_iters = int(max_iters)
  ops = _ops(resolve_factorization(factorization))

  def init_state(z0: jax.Array, m: Any, reg_weight: Any) -> LoopState:
    fac_shape = jax.eval_shape(lambda z: ops.factor(problem.jacobian(z)), jnp.asarray(z0))
    fac0 = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), fac_shape)
    return _initial_state(z0, fac0, m, reg_weight, max_iters)

  def step(s: LoopState) -> LoopState:
    reg = s.step_scale
    refresh = s.t % s.refresh_period == 0
    fac = lax.cond(refresh, lambda: ops.factor(problem.jacobian(s.z)), lambda: s.fac)
    g = problem.field(s.z)
    g_rot = ops.rotate(fac, g)
    lam_warm = jnp.where(s.lam > 0, s.lam * _warm_ratio(s), jnp.sqrt(reg * jnp.linalg.norm(g)))
    lam, tries, solved = find_regularization(ops, fac, g_rot, reg, lam_warm,
                                             rtol=root_rtol, max_tries=root_max_tries)
    newton_step = ops.unrotate(fac, solved)
    z_half = s.z - newton_step
    gamma = reg * jnp.linalg.norm(newton_step)
    g_half = problem.field(z_half)
    # gamma = 0 only when F(z_t) = 0 exactly: z_t is then a saddle, so stay.
    positive = gamma > 0
    inv_gamma = jnp.where(positive, 1.0 / jnp.where(positive, gamma, 1.0), 0.0)
    return s._replace(
        t=s.t + 1, z=s.z - g_half * inv_gamma, z_half=z_half, fac=fac, lam=lam,
        weighted_sum=s.weighted_sum + z_half * inv_gamma, weight=s.weight + inv_gamma,
        num_jac=s.num_jac + refresh.astype(jnp.int32),
        **_record(s, problem, z_half, jnp.linalg.norm(g_half), gamma, tries))

  return contract.Solver(init_state, step, lambda s: s.grad_norm <= tol,
                         _output(tol, problem.dim))


def make_len_sweep(problem: MinimaxProblem, *, tol: float = 1e-8, max_iters: int = 1000,
                   factorization: str = "schur", root_rtol: float = 1e-12,
                   root_max_tries: int = 100
                   ) -> Callable[[jax.Array, Any, Any], SolveResult]:
  """LEN with m and M as run-time arguments: ``solve(z0, m, reg_weight)``.

  One compiled program then serves every m (a sweep over m compiles once). Arguments as in
  :func:`make_len`. Under ``jax.vmap`` over m the Jacobian refresh becomes a select, i.e.
  a factorization every step; loop over m instead.
  """
  solver = len_solver(problem, tol=tol, max_iters=max_iters, factorization=factorization,
                      root_rtol=root_rtol, root_max_tries=root_max_tries)

  def solve(z0: jax.Array, m: Any, reg_weight: Any) -> SolveResult:
    return contract.iterate(solver, z0, m, reg_weight, max_iterations=int(max_iters)).output

  return solve


def make_eg2(problem: MinimaxProblem, *, reg_weight: float, **kwargs
             ) -> Callable[[jax.Array], SolveResult]:
  """EG-2: LEN with a fresh Jacobian every step (m = 1)."""
  return make_len(problem, m=1, reg_weight=reg_weight, **kwargs)


# --------------------------------------------------------------------------- EG


def eg_solver(problem: MinimaxProblem, *, tol: float = 1e-8, max_iters: int = 100_000
              ) -> contract.Solver:
  """Extragradient as a :class:`~jaxlib_papers.core.contract.Solver`: ``init_state(z0, eta)``."""
  _check_common(tol, max_iters)
  max_iters = int(max_iters)

  def init_state(z0: jax.Array, eta: Any) -> LoopState:
    return _initial_state(z0, (), 0, eta, max_iters)

  def step(s: LoopState) -> LoopState:
    z_half = s.z - s.step_scale * problem.field(s.z)
    g_half = problem.field(z_half)
    return s._replace(
        t=s.t + 1, z=s.z - s.step_scale * g_half, z_half=z_half,
        weighted_sum=s.weighted_sum + z_half, weight=s.weight + 1.0,
        **_record(s, problem, z_half, jnp.linalg.norm(g_half), 1.0 / s.step_scale, 0))

  return contract.Solver(init_state, step, lambda s: s.grad_norm <= tol,
                         _output(tol, problem.dim))


def make_eg(problem: MinimaxProblem, *, eta: float, tol: float = 1e-8,
            max_iters: int = 100_000) -> Callable[[jax.Array], SolveResult]:
  """Extragradient z_{t+1/2} = z_t - eta F(z_t), z_{t+1} = z_t - eta F(z_{t+1/2}).

  Args:
    problem: the oracles (only F is used).
    eta: step size > 0.
    tol: stop once ||F(z_{t+1/2})|| <= tol.
    max_iters: budget (and history length).

  Returns:
    solve(z0) -> SolveResult with #J = 0, #F = 2 per iteration, z_average the uniform
    average of the z_{t+1/2}.
  """
  if not eta > 0:
    raise ValueError(f"eta must be > 0, got {eta}")
  solver = eg_solver(problem, tol=tol, max_iters=max_iters)

  def solve(z0: jax.Array) -> SolveResult:
    return contract.iterate(solver, z0, eta, max_iterations=int(max_iters)).output

  return solve


# --------------------------------------------------------------------------- LEN-restart


class RestartResult(NamedTuple):
  """LEN-restart output.

  Attributes:
    z: [d] output of the last epoch (its weighted average).
    epoch_dist: [S] ||z^(s) - z*|| after each epoch (NaN when z* unknown).
    epoch_grad_norm: [S] ||F(z^(s))|| after each epoch.
    epoch_iters: int32 [S] LEN iterations in each epoch (0 once converged).
    num_field_calls, num_jacobian_calls: int32 [] totals (one extra F per epoch).
    oracle_cost: [] #F + d #J.
  """
  z: jax.Array
  epoch_dist: jax.Array
  epoch_grad_norm: jax.Array
  epoch_iters: jax.Array
  num_field_calls: jax.Array
  num_jacobian_calls: jax.Array
  oracle_cost: jax.Array


def restart_iterations(reg_weight: float, radius: float, mu: float) -> int:
  """T = ceil((2 M ||z0 - z*|| / mu)^{2/3}), LEN's epoch length in LEN-restart."""
  if not (reg_weight > 0 and radius > 0 and mu > 0):
    raise ValueError(
        f"need reg_weight, radius, mu > 0; got {reg_weight}, {radius}, {mu}")
  return max(1, math.ceil((2.0 * reg_weight * radius / mu) ** (2.0 / 3.0)))


def num_restarts(eps: float) -> int:
  """S = ceil(log_{3/2} log_2 (1/eps)) epochs for accuracy eps in (0, 1/2)."""
  if not 0 < eps < 0.5:
    raise ValueError(f"eps must be in (0, 1/2), got {eps}")
  return max(1, math.ceil(math.log(math.log2(1.0 / eps)) / math.log(1.5)))


def make_len_restart(problem: MinimaxProblem, *, m: int, reg_weight: float,
                     iters_per_epoch: int, epochs: int, tol: float = 0.0,
                     **len_options: Any) -> Callable[[jax.Array], RestartResult]:
  """LEN-restart (Algorithm 2): ``epochs`` runs of LEN, each from the last one's output.

  Args:
    problem: strongly-convex-strongly-concave problem.
    m, reg_weight: LEN's m and M (theory: M = 3 rho m).
    iters_per_epoch: T (see :func:`restart_iterations`).
    epochs: S (see :func:`num_restarts`).
    tol: an epoch also stops at ||F(z_{t+1/2})|| <= tol; later epochs are skipped once the
      output satisfies ||F|| <= tol.
    **len_options: ``factorization``, ``root_rtol``, ``root_max_tries`` of
      :func:`make_len` (its defaults otherwise).

  Returns:
    solve(z0) -> RestartResult, one lax.scan over epochs.
  """
  if int(epochs) < 1:
    raise ValueError(f"epochs must be >= 1, got {epochs}")
  unknown = sorted(set(len_options) - {"factorization", "root_rtol", "root_max_tries"})
  if unknown:
    raise TypeError(f"make_len_restart got unexpected options {unknown}")
  len_solve = make_len(problem, m=m, reg_weight=reg_weight, tol=tol,
                       max_iters=iters_per_epoch, **len_options)

  def solve(z0: jax.Array) -> RestartResult:
    z0 = jnp.asarray(z0)

    def epoch(carry, _):
      z, done, num_f, num_j = carry

      def run_epoch(z):
        out = len_solve(z)
        return out.z_average, out.num_iters, out.num_field_calls, out.num_jacobian_calls

      def skip(z):
        zero = jnp.zeros((), jnp.int32)
        return z, zero, zero, zero

      z_new, iters, f_calls, j_calls = lax.cond(done, skip, run_epoch, z)
      grad_norm = jnp.linalg.norm(problem.field(z_new))
      num_f = num_f + f_calls + (~done).astype(jnp.int32)
      done = done | (grad_norm <= tol)
      return (z_new, done, num_f, num_j + j_calls), (
          _distance(problem, z_new), grad_norm, iters)

    zero = jnp.zeros((), jnp.int32)
    (z, _, num_f, num_j), (dist, grad_norm, iters) = lax.scan(
        epoch, (z0, jnp.zeros((), bool), zero, zero), None, length=int(epochs))
    return RestartResult(z, dist, grad_norm, iters, num_f, num_j,
                         (num_f + problem.dim * num_j).astype(z0.dtype))

  return solve


# --------------------------------------------------------------------------- entry point


def make_solver(problem: MinimaxProblem, method: str, **kwargs
                ) -> Callable[[jax.Array], SolveResult | RestartResult]:
  """``make_len`` / ``make_eg2`` / ``make_eg`` / ``make_len_restart`` by name."""
  if method == "len":
    return make_len(problem, **kwargs)
  if method == "eg2":
    return make_eg2(problem, **kwargs)
  if method == "eg":
    return make_eg(problem, **kwargs)
  if method == "len_restart":
    return make_len_restart(problem, **kwargs)
  raise ValueError(f"method must be one of {METHODS}, got {method!r}")
