"""Couplings of a cost matrix as fixed-shape pairs and weights (no boolean indexing).

Every rule maps a cost ``[n, m]`` (x0 by x1; p0 and p1 the empirical measures, uniform) to
:class:`Pairs` (``rows [B]``, ``cols [B]``, ``weights [B]``) that ``jit`` can trace:

* :func:`cutoff` (the paper, Eq. 4): q ∝ p0 p1 1[c < delta]; B pairs drawn uniformly from
  the accepted ones (cumsum + searchsorted, not ``n m`` Gumbels), all weights 0 when none is
  accepted;
* :func:`paired_cutoff` (the official docking transform): the data's own pairs (i, i) kept
  with weight 1[c_ii < delta];
* :func:`candidate` (the official relaxation transform): per row one of its K candidates,
  drawn ∝ 1[c < delta] (with probability epsilon from the complement instead) or ∝
  exp(-c^2 / kappa); a row with nothing to draw gets weight 0;
* :func:`gibbs`: B pairs ∝ exp(-c^2 / kappa);
* :func:`uot_plan`: the KL-relaxed unbalanced entropic plan (``ott.solvers.linear.solve``
  with ``tau_a``, ``tau_b``); :func:`partial_plan`: entropic partial OT moving mass ``m``
  (Bregman projections); :func:`sample_pairs` draws B pairs from any plan.

Diagnostics: :func:`cutoff_stats` (acceptance Z, D2(q0 || p0) with an unbiased estimate of
E[pi0^2], marginal TVs, E_q[c^2]) and :func:`plan_stats` (the same of any plan).
ESS / n = exp(-D2).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from jaxlib_papers.core import prng


class Pairs(NamedTuple):
  """B pairs of a coupling."""
  rows: jax.Array      # [B] int32, indices into x0
  cols: jax.Array      # [B] int32, indices into x1
  weights: jax.Array   # [B] float32, 0 for a rejected or dropped pair


class CouplingStats(NamedTuple):
  """Diagnostics of a coupling q against p0 ⊗ p1 (all ``[]``)."""
  acceptance: jax.Array   # Z = P_{p0 ⊗ p1}(c < delta), or the plan's mass
  d2_0: jax.Array         # D2(q0 || p0) = log E_p0[(q0/p0)^2]
  d2_1: jax.Array         # D2(q1 || p1)
  tv_0: jax.Array         # TV(q0, p0) = .5 E_p0 |q0/p0 - 1|
  tv_1: jax.Array         # TV(q1, p1)
  cost2: jax.Array        # E_q[c^2]


def _concrete(value) -> float | None:
  if isinstance(value, jax.core.Tracer):
    return None
  return float(np.asarray(value))


def check_cutoff(delta, name: str = "delta") -> None:
  """Raises a ValueError for a concrete negative or NaN cutoff."""
  v = _concrete(delta)
  if v is not None and not v >= 0:
    raise ValueError(f"{name} must be a cutoff >= 0 (inf keeps every pair); got {v}")


def check_mass(mass) -> None:
  """Raises a ValueError for a concrete mass outside (0, 1]."""
  v = _concrete(mass)
  if v is not None and not 0 < v <= 1:
    raise ValueError(f"mass must be in (0, 1] (the fraction of p0's mass moved); got {v}")


def check_cost(cost, name: str = "cost", shape: tuple[int, ...] | None = None) -> None:
  """Raises a ValueError unless ``cost`` is a 2-D matrix (of ``shape`` when given)."""
  s = np.shape(cost)
  if len(s) != 2 or (shape is not None and s != tuple(shape)):
    want = f"a matrix of shape {tuple(shape)}" if shape is not None else "a 2-D matrix"
    raise ValueError(f"{name} must be {want} [n, m]; got shape {s}")


def sample_pairs(key: jax.Array, plan: ArrayLike, num_pairs: int) -> Pairs:
  """B pairs drawn ∝ ``plan [n, m]`` (>= 0) by inverse CDF; weights 0 if the plan is 0."""
  check_cost(plan, "plan")
  plan = jnp.asarray(plan, jnp.float32)
  n, m = plan.shape
  cdf = jnp.cumsum(plan.reshape(-1))
  total = cdf[-1]
  u = prng.uniform(key, (int(num_pairs),)) * total
  flat = jnp.clip(jnp.searchsorted(cdf, u, side="right"), 0, n * m - 1)
  weight = jnp.where(total > 0, 1.0, 0.0)
  return Pairs((flat // m).astype(jnp.int32), (flat % m).astype(jnp.int32),
               jnp.full((int(num_pairs),), weight, jnp.float32))


def accepted(cost: ArrayLike, delta) -> jax.Array:
  """``[n, m]`` float 1[c < delta]."""
  check_cost(cost)
  check_cutoff(delta)
  return (jnp.asarray(cost) < delta).astype(jnp.float32)


def cutoff(key: jax.Array, cost: ArrayLike, delta, num_pairs: int) -> Pairs:
  """The paper's rule: B pairs uniform over {(i, j): c_ij < delta}."""
  return sample_pairs(key, accepted(cost, delta), num_pairs)


def paired_cutoff(cost: ArrayLike, delta) -> Pairs:
  """The official docking rule: pairs (i, i) of a square ``cost [n, n]``, weight
  1[c_ii < delta] (the pair stays in the batch; its loss weight is 0)."""
  check_cost(cost)
  n = np.shape(cost)[0]
  check_cost(cost, shape=(n, n))
  index = jnp.arange(n, dtype=jnp.int32)
  return Pairs(index, index, jnp.diagonal(accepted(cost, delta)))


def gibbs_plan(cost: ArrayLike, kappa) -> jax.Array:
  """``[n, m]`` exp(-(c^2 - min c^2) / kappa) (unnormalised Gibbs weights)."""
  check_cost(cost)
  v = _concrete(kappa)
  if v is not None and not v > 0:
    raise ValueError(f"kappa must be > 0; got {v}")
  c2 = jnp.asarray(cost) ** 2
  return jnp.exp(-(c2 - c2.min()) / kappa)


def gibbs(key: jax.Array, cost: ArrayLike, kappa, num_pairs: int) -> Pairs:
  """B pairs ∝ exp(-c^2 / kappa)."""
  return sample_pairs(key, gibbs_plan(cost, kappa), num_pairs)


class CandidateRule(NamedTuple):
  """The official relaxation sampler's settings."""
  delta: float                 # cutoff on the candidate cost
  epsilon: float = 0.0         # probability of drawing from the complement instead
  kappa: float | None = None   # Gibbs temperature: exp(-c^2 / kappa) replaces the cutoff


def candidate(key: jax.Array, cost: ArrayLike, rule: CandidateRule) -> Pairs:
  """One candidate per row of ``cost [n, K]``: rows ``arange(n)``, the drawn candidate's
  column, weight 0 for a row whose drawn set is empty (the code drops that complex)."""
  check_cost(cost)
  check_cutoff(rule.delta, "rule.delta")
  cost = jnp.asarray(cost)
  n = cost.shape[0]
  k_flip, k_draw = jax.random.split(key)
  if rule.kappa is not None:
    logits = jnp.log(gibbs_plan(cost, rule.kappa) + 1e-30)
    ok = jnp.ones((n,), bool)
  else:
    inside = cost < rule.delta
    flip = prng.uniform(k_flip, (n, 1)) < rule.epsilon
    chosen = jnp.where(flip, ~inside, inside)
    logits = jnp.where(chosen, 0.0, -jnp.inf)
    ok = chosen.any(-1)
  safe = jnp.where(ok[:, None], logits, 0.0)
  cols = prng.categorical(k_draw, safe, axis=-1).astype(jnp.int32)
  return Pairs(jnp.arange(n, dtype=jnp.int32), cols, ok.astype(jnp.float32))


def uot_plan(cost: ArrayLike, epsilon: float, tau_a: float, tau_b: float) -> jax.Array:
  """The KL-relaxed unbalanced entropic plan ``[n, m]`` of ``ott.solvers.linear.solve``
  (uniform marginals; tau = 1 balanced, tau < 1 relaxes that side)."""
  from ott.geometry import geometry as ott_geometry  # pylint: disable=g-import-not-at-top
  from ott.solvers import linear  # pylint: disable=g-import-not-at-top
  check_cost(cost)
  for name, tau in (("tau_a", tau_a), ("tau_b", tau_b)):
    v = _concrete(tau)
    if v is not None and not 0 < v <= 1:
      raise ValueError(f"{name} must be in (0, 1]; got {v}")
  geom = ott_geometry.Geometry(cost_matrix=jnp.asarray(cost), epsilon=epsilon)
  return linear.solve(geom, tau_a=tau_a, tau_b=tau_b).matrix


def partial_plan(cost: ArrayLike, mass, epsilon: float, num_iters: int = 500) -> jax.Array:
  """Entropic partial OT ``[n, m]``: moves exactly ``mass`` of the uniform marginals.

  Iterated Bregman projections (Benamou et al. 2015) of the Gibbs kernel onto {P 1 <= a},
  {P^T 1 <= b} and {1^T P 1 = mass}; the last projection makes the mass exact.
  """
  check_cost(cost)
  check_mass(mass)
  cost = jnp.asarray(cost, jnp.float32)
  n, m = cost.shape
  a, b = jnp.full((n,), 1.0 / n), jnp.full((m,), 1.0 / m)
  kernel = jnp.exp(-(cost - cost.min()) / epsilon)

  def project(_, plan):
    plan = plan * jnp.minimum(a / jnp.maximum(plan.sum(1), 1e-30), 1.0)[:, None]
    plan = plan * jnp.minimum(b / jnp.maximum(plan.sum(0), 1e-30), 1.0)[None, :]
    return plan * (mass / plan.sum())

  return jax.lax.fori_loop(0, int(num_iters), project, kernel * (mass / kernel.sum()))


def _tv_d2(ratio: jax.Array, second_moment: jax.Array | None = None
           ) -> tuple[jax.Array, jax.Array]:
  second = jnp.mean(ratio ** 2) if second_moment is None else second_moment
  return jnp.log(second), 0.5 * jnp.mean(jnp.abs(ratio - 1.0))


def plan_stats(plan: ArrayLike, cost: ArrayLike, acceptance=None) -> CouplingStats:
  """Diagnostics of a plan ``[n, m]`` (>= 0) against the uniform p0 ⊗ p1 (plug-in
  estimates); ``acceptance`` defaults to the plan's mass."""
  check_cost(plan, "plan")
  check_cost(cost, shape=np.shape(plan))
  plan, cost = jnp.asarray(plan), jnp.asarray(cost)
  n, m = plan.shape
  total = plan.sum()
  d2_0, tv_0 = _tv_d2(n * plan.sum(1) / total)
  d2_1, tv_1 = _tv_d2(m * plan.sum(0) / total)
  z = total if acceptance is None else jnp.asarray(acceptance)
  return CouplingStats(z, d2_0, d2_1, tv_0, tv_1, (plan * cost ** 2).sum() / total)


def cutoff_stats(cost: ArrayLike, delta) -> CouplingStats:
  """Diagnostics of the cutoff coupling: Z = mean 1[c < delta]; pi0(x0_i) the row's
  acceptance; E[pi0^2] by the unbiased k (k - 1) / (m (m - 1)) of a row's k accepted pairs
  (the plug-in pi0^2 inflates D2 at small Z); TVs and E_q[c^2] by plug-in."""
  mask = accepted(cost, delta)
  n, m = mask.shape
  z = mask.mean()
  rows, cols = mask.sum(1), mask.sum(0)
  second_0 = jnp.mean(rows * (rows - 1) / (m * (m - 1))) / z ** 2
  second_1 = jnp.mean(cols * (cols - 1) / (n * (n - 1))) / z ** 2
  d2_0, tv_0 = _tv_d2(rows / m / z, second_0)
  d2_1, tv_1 = _tv_d2(cols / n / z, second_1)
  cost2 = (mask * jnp.asarray(cost) ** 2).sum() / jnp.maximum(mask.sum(), 1.0)
  return CouplingStats(z, d2_0, d2_1, tv_0, tv_1, cost2)


def class_tv(plan: ArrayLike, labels: ArrayLike, reference: ArrayLike, axis: int = 1
             ) -> jax.Array:
  """TV between the class histogram of a plan's marginal and ``reference [C]``.

  Args:
    plan: ``[n, m]`` (>= 0).
    labels: ``[n]`` ints in [0, C) of the rows (``axis=1``: the x0 marginal) or ``[m]`` of
      the columns (``axis=0``).
    reference: ``[C]`` the class probabilities compared against.
  """
  marginal = jnp.asarray(plan).sum(axis)
  reference = jnp.asarray(reference)
  hist = jax.ops.segment_sum(marginal, jnp.asarray(labels), reference.shape[0])
  return 0.5 * jnp.abs(hist / marginal.sum() - reference).sum()
