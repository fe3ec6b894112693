"""SAE's relaxed split optimisation as pure functions (no jit here: the caller jits).

Notation (``../shared/papers/sae_split.md``): N molecules, S_ij the Tanimoto similarity
(S_ii := 0), a the test fraction, target bins with centres c_k, widths s_k (0.1 x the bin
width) and expected test counts E_k a N. T [N] are the free variables, W = sigmoid(T) the
relaxed test membership. The soft readout is

  R_i = (1/s) log sum_j exp(s (1 - W_j) S_ij)      (s = 100; j over the table's columns)

the soft histogram O_k = sum_i W_i softmax_k(-(R_i - c_k)^2 / (2 s_k^2)), the loss
sum_k (O_k - E_k a N)^2 / (E_k a N) + lam sum_i H(W_i), and the constraint
h = sum_i W_i - a N = 0 under a Lagrange multiplier mu (primal descent, dual ascent).

The similarity enters through a neighbour table ``(values [N, k], index [N, k])``: with
k = N (every sample, the row itself with S_ii = 0 as the official code) the soft readout is
the official dense one; with k < N it keeps each row's k largest S_ij, exact for the
binarised readout whenever every test row has a training sample among its k neighbours
(``table_condition``). The table is built by row blocks, never as N x N.

The solver is simultaneous extragradient with ExtraAdam's shared moments (the official
``cooper.optim.ExtraAdam``): both the half step and the full step update one set of Adam
moments, and the full step starts from the iteration's original point.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax

from jaxlib_papers.core import prng

# ----------------------------------------------------------------------------- similarity


def tanimoto(x: jax.Array, y: jax.Array) -> jax.Array:
  """Tanimoto similarity of 0/1 fingerprints, exact in float32 (counts below 2^24).

  Args:
    x: [n, B] 0/1 bits (any float or int dtype).
    y: [m, B] 0/1 bits.

  Returns:
    [n, m] float32 |x & y| / |x | y| (0 where both are empty).
  """
  x, y = jnp.asarray(x, jnp.float32), jnp.asarray(y, jnp.float32)
  inter = jnp.matmul(x, y.T, precision=jax.lax.Precision.HIGHEST)
  union = x.sum(1)[:, None] + y.sum(1)[None, :] - inter
  return jnp.where(union > 0, inter / jnp.where(union > 0, union, 1.0), 0.0)


def _pad_rows(x: jax.Array, block: int) -> jax.Array:
  pad = (-x.shape[0]) % block
  return jnp.pad(x, ((0, pad), (0, 0)))


def neighbour_table(fps: jax.Array, k: int, block: int = 512) -> tuple[jax.Array, jax.Array]:
  """Each row's k most similar samples, by row blocks (memory block x N).

  The row itself ranks last, with S_ii := 0 (the official diagonal): with k = N the table
  holds every term of the dense readout, with k < N the k most similar other samples.

  Args:
    fps: [N, B] 0/1 fingerprints.
    k: neighbours per row (1 <= k <= N).
    block: rows per block.

  Returns:
    (values [N, k] float32 Tanimoto, descending; index [N, k] int32 columns).
  """
  fps = jnp.asarray(fps, jnp.float32)
  n = fps.shape[0]
  rows = _pad_rows(fps, block).reshape(-1, block, fps.shape[1])
  starts = jnp.arange(rows.shape[0]) * block

  def one(args):
    chunk, start = args
    sim = tanimoto(chunk, fps)                                       # [block, N]
    own = (start + jnp.arange(block))[:, None] == jnp.arange(n)[None, :]
    values, index = jax.lax.top_k(jnp.where(own, -1.0, sim), k)
    return jnp.maximum(values, 0.0), index

  values, index = jax.lax.map(one, (rows, starts))
  return (values.reshape(-1, k)[:n], index.reshape(-1, k)[:n].astype(jnp.int32))


def dense_table(similarity: jax.Array) -> tuple[jax.Array, jax.Array]:
  """The table of a precomputed [N, N] similarity: every column, the diagonal set to 0
  (the official S_ii := 0), so the readout is exactly the official dense one.

  Returns:
    (values [N, N], index [N, N]).
  """
  similarity = jnp.asarray(similarity, jnp.float32)
  n = similarity.shape[0]
  values = similarity * (1.0 - jnp.eye(n, dtype=similarity.dtype))
  return values, jnp.broadcast_to(jnp.arange(n, dtype=jnp.int32), (n, n))


# ------------------------------------------------------------------------------ the target


class Target(NamedTuple):
  """A target histogram of the test set's readout (K bins incl. zero-weight padding)."""
  edges: jax.Array      # [K + 1] bin edges, 0 ... 1
  weights: jax.Array    # [K] E_k, sum 1 (padding bins 0)
  centres: jax.Array    # [K] c_k (the top bin's centre + 1e-6, as the code)
  widths: jax.Array     # [K] s_k = sigma x bin width


class Problem(NamedTuple):
  """What the relaxation optimises over (arrays; a pytree)."""
  values: jax.Array     # [N, k] S_ij of each row's table
  index: jax.Array      # [N, k] int32 columns j
  target: Target
  test_mass: jax.Array  # [] a N (float, 872.2 for EGFR)
  num_train: jax.Array  # [] int32 int((1 - a) N): the binarised train size


class Settings(NamedTuple):
  """Scalars of the relaxation and its solver (static: hashable)."""
  scale: float = 100.0       # s, the soft max's sharpness
  lam: float = 2.03e-3       # entropy weight
  lr: float = 1e-2           # primal learning rate (ExtraAdam)
  dual_lr: float = 1e-2      # dual learning rate at iteration 0 (cosine to 0)
  iterations: int = 20_000   # cosine period T_max
  weight_decay: float = 1e-5  # L2 added to the primal gradient
  log_every: int = 500       # binarise and score every this many iterations
  init: str = "custom"       # "custom" | "normal" | "uniform"
  init_scale: float = 5.0
  feasibility: float = -1.0  # keep-best prefers iterates with |sum W - aN| / aN <= this
  #                            (< 0: off, the official rule: the best score, whatever h)


def make_target(edges, weights, sigma: float = 0.1) -> Target:
  """The :class:`Target` of user ``edges`` [K0 + 1] in [0, 1] and ``weights`` [K0]
  (normalised), padded with zero-weight bins [0, b_0] and [b_K, 1] when needed."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  edges, weights = np.asarray(edges, np.float64), np.asarray(weights, np.float64)
  weights = weights / weights.sum()
  if edges[0] > 0:
    edges, weights = np.r_[0.0, edges], np.r_[0.0, weights]
  if edges[-1] < 1:
    edges, weights = np.r_[edges, 1.0], np.r_[weights, 0.0]
  centres = 0.5 * (edges[1:] + edges[:-1])
  centres[-1] += 1e-6
  widths = sigma * np.diff(edges)
  return Target(*(jnp.asarray(v, jnp.float32) for v in (edges, weights, centres, widths)))


# ------------------------------------------------------------------------------ relaxation


def soft_readout(membership: jax.Array, values: jax.Array, index: jax.Array,
                 scale: float) -> jax.Array:
  """R [N] = (1/s) logsumexp_j (s (1 - W_j) S_ij) over each row's table.

  Args:
    membership: W [N] in [0, 1] (1: test).
    values: [N, k] S_ij; index: [N, k] columns j.
    scale: s.
  """
  train_weight = 1.0 - membership[index]                              # [N, k]
  return jax.nn.logsumexp(scale * train_weight * values, axis=1) / scale


def soft_histogram(membership: jax.Array, readout: jax.Array, target: Target) -> jax.Array:
  """O [K] = sum_i W_i softmax_k(-(R_i - c_k)^2 / (2 s_k^2))."""
  logits = -((readout[:, None] - target.centres[None, :]) ** 2) / (2 * target.widths ** 2)
  return membership @ jax.nn.softmax(logits, axis=1)


def binary_entropy(membership: jax.Array) -> jax.Array:
  """sum_i H(W_i) in nats, logs clamped at -100 (as torch's BCE)."""
  log_w = jnp.maximum(jnp.log(membership), -100.0)
  log_1mw = jnp.maximum(jnp.log1p(-membership), -100.0)
  return -jnp.sum(membership * log_w + (1 - membership) * log_1mw)


def relaxed_loss(logits: jax.Array, problem: Problem, settings: Settings
                 ) -> tuple[jax.Array, jax.Array]:
  """(loss, h) at T [N]: loss = main + lam reg, h = sum W - a N."""
  membership = jax.nn.sigmoid(logits)
  readout = soft_readout(membership, problem.values, problem.index, settings.scale)
  observed = soft_histogram(membership, readout, problem.target)
  expected = problem.target.weights * problem.test_mass
  used = expected > 1e-6
  main = jnp.sum(jnp.where(used, (observed - expected) ** 2
                           / jnp.where(used, expected, 1.0), 0.0))
  loss = main + settings.lam * binary_entropy(membership)
  return loss, jnp.sum(membership) - problem.test_mass


def lagrangian(logits: jax.Array, multiplier: jax.Array, problem: Problem,
               settings: Settings) -> tuple[jax.Array, jax.Array]:
  """(loss + mu h, h)."""
  loss, h = relaxed_loss(logits, problem, settings)
  return loss + multiplier * h, h


# ------------------------------------------------------------------------------ binarising


def binarise(membership: jax.Array, num_train: jax.Array) -> jax.Array:
  """[N] bool test mask: the num_train smallest W go to train, the rest to test."""
  rank = jnp.argsort(jnp.argsort(membership, stable=True), stable=True)
  return rank >= num_train


def hard_readout(test: jax.Array, values: jax.Array, index: jax.Array) -> jax.Array:
  """r [N] = max over training j in each row's table of S_ij (0 where the table holds no
  training sample: then only the dense readout is exact, see ``table_condition``)."""
  in_train = ~test[index]
  return jnp.max(jnp.where(in_train, values, 0.0), axis=1)


def table_failures(test: jax.Array, index: jax.Array) -> jax.Array:
  """[] int32: test rows whose table holds no training sample (there the table's readout
  is 0, the exact one is at most the row's k-th similarity)."""
  return jnp.sum(test & ~jnp.any(~test[index], axis=1))


def table_condition(test: jax.Array, index: jax.Array) -> jax.Array:
  """[] bool: every test row's table holds a training sample (the readout is exact)."""
  return table_failures(test, index) == 0


def histogram(readout: jax.Array, test: jax.Array, edges: jax.Array) -> jax.Array:
  """[K] int32 test counts per bin of ``edges`` [K + 1] (half-open, the top bin closed)."""
  bins = jnp.clip(jnp.searchsorted(edges, readout, side="right") - 1, 0, edges.shape[0] - 2)
  return jnp.zeros(edges.shape[0] - 1, jnp.int32).at[bins].add(test.astype(jnp.int32))


def score(counts: jax.Array, weights: jax.Array) -> jax.Array:
  """-mean_k |n_k / n_test - E_k| (padding bins included; higher is better)."""
  fractions = counts / jnp.maximum(counts.sum(), 1)
  return -jnp.mean(jnp.abs(fractions - weights))


# ------------------------------------------------------------------------------ the solver


class SolverState(NamedTuple):
  """One seed's extragradient state."""
  logits: jax.Array       # [N] T
  multiplier: jax.Array   # [] mu
  primal_opt: optax.OptState   # Adam moments of T (updated twice per iteration)
  dual_opt: optax.OptState     # Adam moments of mu
  iteration: jax.Array    # [] int32
  best_logits: jax.Array  # [N] T at the best-scoring binarisation so far
  best_score: jax.Array   # [] its score (-inf before the first; -1 below the score when
  #                         infeasible, see ``keep_best``)
  best_iteration: jax.Array  # [] int32


def _primal_tx(settings: Settings) -> optax.GradientTransformation:
  return optax.chain(optax.add_decayed_weights(settings.weight_decay),
                     optax.scale_by_adam(b1=0.9, b2=0.999, eps=1e-8))


def _dual_tx() -> optax.GradientTransformation:
  return optax.scale_by_adam(b1=0.9, b2=0.999, eps=1e-8)


def init_logits(key: jax.Array, num: int, num_train: jax.Array, settings: Settings) -> jax.Array:
  """T [N] at iteration 0: ``custom`` (a permutation: num_train at -scale, the rest at
  +scale), ``normal`` (clip(scale N(0, 1), +-scale)) or ``uniform`` (U(-scale, scale))."""
  scale = settings.init_scale
  if settings.init == "custom":
    order = jax.random.permutation(key, num)
    return jnp.where(jnp.argsort(order) < num_train, -scale, scale).astype(jnp.float32)
  if settings.init == "normal":
    return jnp.clip(scale * prng.normal(key, (num,)), -scale, scale)
  if settings.init == "uniform":
    return scale * prng.uniform(key, (num,), minval=-1.0, maxval=1.0)
  raise ValueError(f"settings.init must be custom | normal | uniform, got {settings.init!r}")


def init_state(key: jax.Array, problem: Problem, settings: Settings) -> SolverState:
  """The state of one seed (typed key)."""
  num = problem.values.shape[0]
  logits = init_logits(key, num, problem.num_train, settings)
  multiplier = jnp.zeros((), jnp.float32)
  return SolverState(logits, multiplier, _primal_tx(settings).init(logits),
                     _dual_tx().init(multiplier), jnp.zeros((), jnp.int32), logits,
                     jnp.full((), -jnp.inf, jnp.float32), jnp.zeros((), jnp.int32))


def _grads(logits, multiplier, problem, settings):
  grad_fn = jax.grad(lambda t, m: lagrangian(t, m, problem, settings)[0], argnums=(0, 1))
  g_logits, g_multiplier = grad_fn(logits, multiplier)
  return g_logits, -g_multiplier   # dual ascent: Adam descends on -L


def _adam_steps(state: SolverState, grads, primal_opt, dual_opt, settings: Settings):
  """One Adam update of both players from the iteration's starting point."""
  dual_lr = settings.dual_lr * 0.5 * (1 + jnp.cos(jnp.pi * jnp.minimum(
      state.iteration, settings.iterations) / settings.iterations))
  u_logits, primal_opt = _primal_tx(settings).update(grads[0], primal_opt, state.logits)
  u_mult, dual_opt = _dual_tx().update(grads[1], dual_opt)
  return (state.logits - settings.lr * u_logits, state.multiplier - dual_lr * u_mult,
          primal_opt, dual_opt)


def extragradient_step(state: SolverState, problem: Problem, settings: Settings
                       ) -> SolverState:
  """One iteration of simultaneous extragradient with ExtraAdam's shared moments.

  Half step from (T, mu) with the gradients there, the gradients at the half point, then
  the step from the original (T, mu) with those. Both Adam updates advance the same
  moments (twice per iteration, as the official ``ExtraAdam``); the dual lr follows a
  cosine over ``settings.iterations``, the primal lr is constant.
  """
  grads = _grads(state.logits, state.multiplier, problem, settings)
  half_t, half_mu, primal_opt, dual_opt = _adam_steps(state, grads, state.primal_opt,
                                                      state.dual_opt, settings)
  grads = _grads(half_t, half_mu, problem, settings)
  logits, multiplier, primal_opt, dual_opt = _adam_steps(state, grads, primal_opt,
                                                         dual_opt, settings)
  return state._replace(logits=logits, multiplier=multiplier, primal_opt=primal_opt,
                        dual_opt=dual_opt, iteration=state.iteration + 1)


def evaluate(logits: jax.Array, problem: Problem) -> tuple[jax.Array, jax.Array, jax.Array]:
  """(score [], counts [K], test mask [N]) of the binarisation of T (table readout)."""
  test = binarise(jax.nn.sigmoid(logits), problem.num_train)
  counts = histogram(hard_readout(test, problem.values, problem.index), test,
                     problem.target.edges)
  return score(counts, problem.target.weights), counts, test


def keep_best(state: SolverState, problem: Problem, feasibility: float = -1.0
              ) -> SolverState:
  """Binarises the current T and keeps it if it scores strictly better. With
  ``feasibility`` >= 0 an iterate whose relaxed test mass is off by more than that
  fraction of a N ranks below every one within it (its score lowered by 1, the score's
  whole range), so the kept iterate satisfies the constraint whenever one did."""
  value = evaluate(state.logits, problem)[0]
  if feasibility >= 0:
    off = jnp.abs(jnp.sum(jax.nn.sigmoid(state.logits)) - problem.test_mass)
    value = value - jnp.where(off <= feasibility * problem.test_mass, 0.0, 1.0)
  better = value > state.best_score
  return state._replace(best_logits=jnp.where(better, state.logits, state.best_logits),
                        best_score=jnp.where(better, value, state.best_score),
                        best_iteration=jnp.where(better, state.iteration,
                                                 state.best_iteration))


def solve(state: SolverState, problem: Problem, settings: Settings, rounds: int
          ) -> SolverState:
  """``rounds`` x ``log_every`` iterations as one scan, binarising after each round (and
  the best-scoring iterate kept). vmap it over seeds (``state`` with a leading axis)."""
  def round_(carry, _):
    carry = jax.lax.fori_loop(0, settings.log_every,
                              lambda _, s: extragradient_step(s, problem, settings), carry)
    return keep_best(carry, problem, settings.feasibility), (carry.best_score, jnp.sum(
        jax.nn.sigmoid(carry.logits)))
  state, _ = jax.lax.scan(round_, state, None, length=rounds)
  return state
