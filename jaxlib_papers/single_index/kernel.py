"""Online spherical SGD on fresh samples, its exact alignment chain, support selection and
the second-layer fit, as pure functions (no jit here: the caller jits).

One parameterisation covers every dense variant (``losses``): a label transform T, a
Hermite degree p and a smoothing radius lam. Per fresh sample, with a = <w, x>:

  w <- normalise(w + eta T(y) dS/da (x - a w)),

the Riemannian gradient step on l = -T S, tangent-projected and renormalised every step.

Two engines run it on ``R`` seeds (the leading axis of every state field), as a
:class:`~jaxlib_papers.core.contract.Solver` whose ``step`` consumes one chunk of fresh
samples per seed (a ``lax.scan``):

* ``full``: w in R^d, x ~ N(0, I_d) drawn in the scan (O(d) per sample);
* ``chain``: the signed alignment m = <w, theta*> alone. The update is rotation-invariant
  and x is isotropic, so m_t is a Markov chain: with (z, v) the coordinates of x along
  theta* and along w's unit part orthogonal to theta*, and rho^2 = |x_rest|^2 ~
  chi^2_{d-2} for the remaining d - 2 coordinates,

    a = m z + sqrt(1 - m^2) v,   G = eta T dS/da,   |x|^2 = z^2 + v^2 + rho^2,
    m' = (m + G (z - a m)) / sqrt(1 + G^2 (|x|^2 - a^2)),

  exactly the law of <w_t, theta*> under ``full`` (``tests/single_index`` couples the two
  steps on the same x), at O(1) per sample; the sample-complexity grid uses it.

``support_solver`` is the sparse variant's first step (top-k of the degree-s* oracle at the
coordinate vectors); ``second_layer_fit`` is stage 2 (ridge on random ReLU features of <w, x>).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from jaxlib_papers.core import contract, prng
from jaxlib_papers.single_index import links as links_lib
from jaxlib_papers.single_index import losses

ENGINES = ("full", "chain")


# ------------------------------------------------------------------------------ sampling


def chi_square(key: jax.Array, dof: jax.Array | float, size: int) -> jax.Array:
  """[size] chi^2_dof draws (dof >= 2, may be traced) by Marsaglia-Tsang rejection.

  A pool of ceil(1.3 size) + 32 proposals is drawn at once and the first ``size`` accepted
  ones are kept, in order: iid draws of the exact law (the acceptance rate is >= 0.95 for
  dof >= 2, so the pool falls short with probability below 1e-14 even for size 1, and
  below 1e-100 for a chunk of 1000). No ``while_loop``: one draw site, cheap to compile,
  and ~2.6 normals per draw (``jax.random.gamma`` is several times slower under vmap on
  XLA:CPU).
  """
  pool = int(math.ceil(1.3 * size)) + 32
  shift = 0.5 * jnp.asarray(dof, jnp.float32) - 1.0 / 3.0
  scale = 1.0 / jnp.sqrt(9.0 * shift)
  g = prng.normal(key, (2 * pool,))
  proposal, u = g[:pool], jax.scipy.special.ndtr(g[pool:])   # u ~ U(0, 1)
  v = (1.0 + scale * proposal) ** 3
  safe_v = jnp.where(v > 0, v, 1.0)
  accept = (v > 0) & (jnp.log(u) < 0.5 * proposal ** 2 + shift - shift * safe_v
                      + shift * jnp.log(safe_v))
  slot = jnp.where(accept, jnp.cumsum(accept) - 1, size)   # k-th accepted -> slot k
  kept = jnp.zeros(size, jnp.float32).at[slot].set(2.0 * shift * safe_v, mode="drop")
  return kept


def initial_alignment(key: jax.Array, dim: jax.Array | int) -> jax.Array:
  """<w0, theta*> for w0 uniform on S^{d-1}: g / sqrt(g^2 + chi^2_{d-1}) (d may be traced)."""
  k_g, k_c = jax.random.split(key)
  g = prng.normal(k_g, ())
  return g / jnp.sqrt(g * g + chi_square(k_c, dim - 1.0, 1)[0])


def uniform_sphere(key: jax.Array, dim: int) -> jax.Array:
  """w0 uniform on S^{d-1} (its first coordinate is the chain's m0 for theta* = e_1)."""
  w = prng.normal(key, (dim,))
  return w / jnp.linalg.norm(w)


# ------------------------------------------------------------------------------ one step


class StepSettings(NamedTuple):
  """One run's oracle, labels and step size (static).

  Attributes:
    link: the single-index link.
    transform: y -> T(y), the label the oracle multiplies (vanilla: y / sd(y)).
    oracle: degree p, radius lam, dimension d (``losses.Oracle``).
    eta: step size eta > 0 (the first one when eta_decay is finite).
    eta_decay: tau > 0: eta_t = eta / (1 + t / tau) (~ 1/t late); inf: a constant step.
    noise_std: sd of the additive label noise.
  """
  link: links_lib.Link
  transform: Callable[[jax.Array], jax.Array]
  oracle: losses.Oracle
  eta: float
  eta_decay: float = math.inf
  noise_std: float = 0.0


def step_size(settings: StepSettings, t: jax.Array) -> jax.Array:
  """eta_t = eta / (1 + t / tau) (eta itself for tau = inf); eta and tau may be traced."""
  return jnp.asarray(settings.eta, jnp.float32) / (1.0 + t / settings.eta_decay)


def spherical_step(w: jax.Array, x: jax.Array, label: jax.Array, eta: jax.Array,
                   oracle: losses.Oracle) -> jax.Array:
  """w <- normalise(w - eta grad_S l), l = -T S(<w, x>, ||x||^2 - <w, x>^2).

  Args:
    w: [d] unit vector.
    x: [d] a fresh sample.
    label: [] the transformed label T(y).
    eta: [] step size.
    oracle: the oracle settings.

  Returns:
    [d] the next unit vector.
  """
  a = w @ x
  coefficient = eta * label * losses.oracle_slope(a, jnp.sum(x * x - 1.0), oracle)
  moved = w + coefficient * (x - a * w)
  return moved / jnp.linalg.norm(moved)


class ChainSample(NamedTuple):
  """A fresh sample in the chain's coordinates (each [] or [n])."""
  z: jax.Array         # <theta*, x>
  v: jax.Array         # x along w's unit part orthogonal to theta*
  rest_sq: jax.Array   # |x_rest|^2 ~ chi^2_{d-2}
  label: jax.Array     # T(y)


def alignment_step(m: jax.Array, sample: ChainSample, eta: jax.Array,
                   oracle: losses.Oracle) -> jax.Array:
  """The law of <w', theta*> after :func:`spherical_step` from <w, theta*> = m."""
  ortho = jnp.sqrt(jnp.maximum(1.0 - m * m, 0.0))
  a = m * sample.z + ortho * sample.v
  norm_sq = sample.z ** 2 + sample.v ** 2 + sample.rest_sq
  coefficient = eta * sample.label * losses.oracle_slope(a, norm_sq - oracle.dim, oracle)
  numerator = m + coefficient * (sample.z - a * m)
  m_next = numerator / jnp.sqrt(1.0 + coefficient ** 2 * jnp.maximum(norm_sq - a * a, 0.0))
  return jnp.clip(m_next, -1.0, 1.0)


# ------------------------------------------------------------------------- online solver


class OnlineState(NamedTuple):
  """State of R seeds of online SGD (R leading everywhere but ``samples``).

  Attributes:
    samples: int32 [], fresh samples consumed by each seed so far.
    params: float32 [R, d] (full: w) or [R] (chain: m = <w, theta*>).
    hits: int32 [R, L] first sample count with |<w, theta*>| >= thresholds[l], -1 before.
    keys: [R] typed PRNG keys (chunk c draws from fold_in(key, c)).
    theta: float32 [R, d] theta* (full), or [R] zeros (chain).
  """
  samples: jax.Array
  params: jax.Array
  hits: jax.Array
  keys: jax.Array
  theta: jax.Array


class OnlineResult(NamedTuple):
  hits: jax.Array        # int32 [R, L] samples to |m| >= thresholds[l], -1: not by the cap
  alignment: jax.Array   # [R] final |<w, theta*>|
  params: jax.Array      # final w [R, d] (full) or m [R] (chain)
  samples: jax.Array     # int32 [] samples per seed consumed


class RunSpec(NamedTuple):
  """How long and how finely a run goes (static).

  Attributes:
    engine: "full" or "chain".
    chunk: fresh samples per seed per solver step (one ``lax.scan``).
    cap: sample budget per seed (runs not at thresholds[0] by then are failures).
    thresholds: alignments recorded (a tuple, or a traced [L] array); the run stops once
      every seed reached thresholds[0].
  """
  engine: str
  chunk: int
  cap: int
  thresholds: tuple[float, ...] = (0.5, 0.9)


def _labels(settings: StepSettings, z: jax.Array, noise: jax.Array) -> jax.Array:
  y = links_lib.labels(settings.link, z, noise, settings.noise_std)
  return settings.transform(y).astype(jnp.float32)


def _record(hits, alignment, t, thresholds):
  reached = alignment >= jnp.asarray(thresholds, jnp.float32)
  return jnp.where((hits < 0) & reached, t, hits)


def _full_chunk(settings: StepSettings, spec: RunSpec):
  d = settings.oracle.dim

  def chunk(w, hits, key, theta, start):
    draws = prng.normal(key, (spec.chunk * (d + 1),))
    x = draws[:spec.chunk * d].reshape(spec.chunk, d)
    labels = _labels(settings, x @ theta, draws[spec.chunk * d:])

    def one(carry, inputs):
      w, hits, t = carry
      x_t, label = inputs
      w = spherical_step(w, x_t, label, step_size(settings, t), settings.oracle)
      t = t + 1
      return (w, _record(hits, jnp.abs(w @ theta), t, spec.thresholds), t), None

    (w, hits, _), _ = lax.scan(one, (w, hits, start), (x, labels))
    return w, hits

  return chunk


def _chain_chunk(settings: StepSettings, spec: RunSpec):
  d = settings.oracle.dim

  def chunk(m, hits, key, theta, start):
    del theta
    k_draw, k_rest = jax.random.split(key)
    z, v, noise = prng.normal(k_draw, (3, spec.chunk))
    samples = ChainSample(z, v, chi_square(k_rest, d - 2.0, spec.chunk),
                          _labels(settings, z, noise))

    def one(carry, sample):
      m, hits, t = carry
      m = alignment_step(m, sample, step_size(settings, t), settings.oracle)
      t = t + 1
      return (m, _record(hits, jnp.abs(m), t, spec.thresholds), t), None

    (m, hits, _), _ = lax.scan(one, (m, hits, start), samples)
    return m, hits

  return chunk


def online_solver(settings: StepSettings, spec: RunSpec) -> contract.Solver:
  """Online SGD of R seeds as a ``Solver``: ``init_state(keys [R], theta, initial)``.

  The full engine starts from w0 uniform on the sphere (theta [d]: the unit direction,
  default e_1); the chain from the exact law of <w0, theta*>; ``initial`` ([R, d] or [R])
  replaces the random start. Run with
  ``contract.iterate(solver, keys, theta, max_iterations=...)`` (:func:`run_online`).
  """
  if spec.engine not in ENGINES:
    raise ValueError(f"engine must be one of {ENGINES}, got {spec.engine!r}")
  validate_step(settings)
  d, num_thresholds = settings.oracle.dim, len(spec.thresholds)
  chunk = (_full_chunk if spec.engine == "full" else _chain_chunk)(settings, spec)

  def init_state(keys, theta=None, initial=None):
    k_init = jax.vmap(lambda k: jax.random.fold_in(k, 0x7FFFFFFF))(keys)
    if spec.engine == "full":
      theta = jnp.zeros(d).at[0].set(1.0) if theta is None else jnp.asarray(theta)
      thetas = jnp.broadcast_to(theta.astype(jnp.float32), (keys.shape[0], d))
      params = jax.vmap(lambda k: uniform_sphere(k, d))(k_init)
    else:
      thetas = jnp.zeros(keys.shape[0], jnp.float32)
      params = jax.vmap(lambda k: initial_alignment(k, d))(k_init)
    if initial is not None:   # a warm start (stage 2's second phase), [R, d] or [R]
      params = jnp.asarray(initial, jnp.float32)
    hits = jnp.full((keys.shape[0], num_thresholds), -1, jnp.int32)
    return OnlineState(jnp.zeros((), jnp.int32), params, hits, keys, thetas)

  def step(state):
    index = state.samples // spec.chunk
    keys = jax.vmap(lambda k: jax.random.fold_in(k, index))(state.keys)
    params, hits = jax.vmap(chunk, in_axes=(0, 0, 0, 0, None))(
        state.params, state.hits, keys, state.theta, state.samples)
    return state._replace(samples=state.samples + spec.chunk, params=params, hits=hits)

  def done(state):
    return jnp.all(state.hits[:, 0] >= 0) | (state.samples >= spec.cap)

  def output(state):
    hits = jnp.where(state.hits > spec.cap, -1, state.hits)
    if spec.engine == "full":
      alignment = jnp.abs(jnp.sum(state.params * state.theta, axis=-1))
    else:
      alignment = jnp.abs(state.params)
    return OnlineResult(hits, alignment, state.params, state.samples)

  return contract.Solver(init_state, step, done, output)


def run_online(settings: StepSettings, spec: RunSpec, keys: jax.Array,
               theta: jax.Array | None = None, max_chunks: int | None = None,
               initial: jax.Array | None = None) -> OnlineResult:
  """R seeds of online SGD to thresholds[0] or the cap (pure; jit it).

  ``max_chunks``: the static bound of the loop (default: cap / chunk; give it when the
  cap is traced, e.g. one chain program for every d).
  """
  solver = online_solver(settings, spec)
  if max_chunks is None:
    max_chunks = -(-int(spec.cap) // int(spec.chunk))
  return contract.iterate(solver, keys, theta, initial,
                          max_iterations=int(max_chunks)).output


def _concrete(value) -> bool:
  return isinstance(value, (int, float))


def validate_step(settings: StepSettings) -> None:
  """Raises ValueError for a step size, radius or dimension that is not allowed (values
  given as Python numbers; traced ones are the caller's to check)."""
  if _concrete(settings.eta) and not settings.eta > 0:
    raise ValueError(f"eta (the step size) must be > 0, got {settings.eta}")
  if _concrete(settings.eta_decay) and not settings.eta_decay > 0:
    raise ValueError(f"eta_decay must be > 0 (inf: constant), got {settings.eta_decay}")
  if _concrete(settings.oracle.radius) and not settings.oracle.radius >= 0:
    raise ValueError(f"the smoothing radius must be >= 0, got {settings.oracle.radius}")
  if _concrete(settings.oracle.dim) and settings.oracle.dim < 4:
    raise ValueError(f"dim (d) must be >= 4, got {settings.oracle.dim}")
  if int(settings.oracle.degree) < 1:
    raise ValueError(f"degree p must be >= 1, got {settings.oracle.degree}")


# ------------------------------------------------------------------------ sparse support


class SparseSettings(NamedTuple):
  """Support selection for a k-sparse theta* (static).

  Attributes:
    link: the link; transform: y -> T(y) (the link's LT); degree: s*.
    sparsity: k (a Python int, or traced: one program for every k); dim: d > k.
    noise_std: label noise.
    chunk: samples per seed per solver step.
    checkpoints: sample counts (multiples of ``chunk``, increasing) at which top-k is
      compared with the support; the last one is the cap.
  """
  link: links_lib.Link
  transform: Callable[[jax.Array], jax.Array]
  degree: int
  sparsity: int
  dim: int
  noise_std: float
  chunk: int
  checkpoints: tuple[int, ...]


class SparseState(NamedTuple):
  samples: jax.Array   # int32 [], samples per seed so far
  sums: jax.Array      # [R, d] sum_t T(y_t) h_{s*}(x_{t, i}): the oracle at w = e_i
  theta: jax.Array     # [R, d] the k-sparse theta* (random support, random signs)
  hits: jax.Array      # int32 [R] first checkpoint with top-k |sums| = support, -1 before
  keys: jax.Array      # [R] typed keys


class SparseResult(NamedTuple):
  hits: jax.Array      # int32 [R], -1: not by the last checkpoint
  selected: jax.Array  # bool [R, d] the top-k coordinates of |sums| at the end
  theta: jax.Array     # [R, d]


def top_mask(score: jax.Array, count: jax.Array | int) -> jax.Array:
  """bool [d]: the ``count`` largest entries of ``score`` [d] (count may be traced)."""
  rank = jnp.argsort(jnp.argsort(-score))
  return rank < count


def sparse_direction(key: jax.Array, dim: int, sparsity: jax.Array | int) -> jax.Array:
  """A k-sparse unit theta*: k coordinates uniformly at random, signs +-1, entries 1/sqrt(k)."""
  k_support, k_sign = jax.random.split(key)
  support = top_mask(prng.uniform(k_support, (dim,)), sparsity)
  signs = prng.rademacher(k_sign, (dim,), jnp.float32)
  return jnp.where(support, signs, 0.0) / jnp.sqrt(jnp.asarray(sparsity, jnp.float32))


def support_found(sums: jax.Array, theta: jax.Array) -> jax.Array:
  """Whether the top-k |sums| are exactly the support of theta ([d] each)."""
  on = theta != 0
  score = jnp.abs(sums)
  return jnp.min(jnp.where(on, score, jnp.inf)) > jnp.max(jnp.where(on, -jnp.inf, score))


def support_solver(settings: SparseSettings) -> contract.Solver:
  """The sparse variant's selection as a ``Solver``: ``init_state(keys [R])``.

  Per fresh sample, sums_i += T(y) h_{s*}(x_i), whose mean is E[T h_{s*}] theta*_i^{s*}:
  signal k^{-s*/2} against noise n^{-1/2}, so n ~ k^{s*} log d samples find the support.
  The dense algorithm then runs on x restricted to ``SparseResult.selected``. Run with
  :func:`run_support`.
  """
  validate_sparse(settings)
  d, k, chunk = settings.dim, settings.sparsity, settings.chunk
  counts = [c // chunk for c in settings.checkpoints]
  is_checkpoint = jnp.zeros(counts[-1] + 1, bool).at[jnp.asarray(counts)].set(True)

  def init_state(keys):
    thetas = jax.vmap(lambda key: sparse_direction(jax.random.fold_in(key, 0x7FFFFFFF), d,
                                                   k))(keys)
    zeros = jnp.zeros((keys.shape[0], d), jnp.float32)
    return SparseState(jnp.zeros((), jnp.int32), zeros, thetas,
                       jnp.full(keys.shape[0], -1, jnp.int32), keys)

  def accumulate(sums, theta, key):
    draws = prng.normal(key, (chunk * (d + 1),))
    x = draws[:chunk * d].reshape(chunk, d)
    y = links_lib.labels(settings.link, x @ theta, draws[chunk * d:], settings.noise_std)
    label = settings.transform(y).astype(jnp.float32)
    return sums + label @ links_lib.hermite(settings.degree, x)

  def step(state):
    keys = jax.vmap(lambda key: jax.random.fold_in(key, state.samples // chunk))(state.keys)
    sums = jax.vmap(accumulate)(state.sums, state.theta, keys)
    samples = state.samples + chunk
    found = jax.vmap(support_found)(sums, state.theta) & is_checkpoint[samples // chunk]
    hits = jnp.where((state.hits < 0) & found, samples, state.hits)
    return state._replace(samples=samples, sums=sums, hits=hits)

  def output(state):
    selected = jax.vmap(lambda sums: top_mask(jnp.abs(sums), k))(state.sums)
    return SparseResult(state.hits, selected, state.theta)

  return contract.Solver(
      init_state, step,
      lambda s: jnp.all(s.hits >= 0) | (s.samples >= settings.checkpoints[-1]), output)


def run_support(settings: SparseSettings, keys: jax.Array) -> SparseResult:
  """R seeds of support selection to the last checkpoint (pure; jit it)."""
  solver = support_solver(settings)
  return contract.iterate(solver, keys,
                          max_iterations=settings.checkpoints[-1] // settings.chunk).output


def checkpoints(first: int, growth: float, cap: int, chunk: int) -> tuple[int, ...]:
  """Sample counts first, first * growth, ... up to cap, each rounded up to a multiple of
  ``chunk`` (duplicates dropped)."""
  out, n = [], float(first)
  while True:
    rounded = int(math.ceil(n / chunk)) * chunk
    if not out or rounded > out[-1]:
      out.append(min(rounded, int(math.ceil(cap / chunk)) * chunk))
    if out[-1] >= cap:
      return tuple(out)
    n *= growth


def validate_sparse(settings: SparseSettings) -> None:
  """Raises ValueError when d is not above the sparsity level, or k, chunk, checkpoints
  are not allowed."""
  if _concrete(settings.sparsity):
    if settings.sparsity < 1:
      raise ValueError(f"sparsity (k) must be >= 1, got {settings.sparsity}")
    if int(settings.dim) <= settings.sparsity:
      raise ValueError(f"dim (d) must be above the sparsity level k = "
                       f"{settings.sparsity}, got d = {settings.dim}")
  cps = settings.checkpoints
  if (not cps or any(c % settings.chunk for c in cps)
      or any(b <= a for a, b in zip(cps, cps[1:]))):
    raise ValueError(f"checkpoints must be increasing multiples of chunk = "
                     f"{settings.chunk}, got {cps}")


# --------------------------------------------------------------------- second layer


class RidgeSettings(NamedTuple):
  """Stage 2: ridge on random ReLU features of <w_hat, x> (static).

  Attributes:
    num_features: features relu(s_j <w_hat, x> + b_j), s_j = +-1, b_j ~ U[-bias, bias].
    num_train: n_2 fresh training samples.
    num_test: fresh test samples.
    ridge: penalty ridge * n_2 on the output weights.
    bias: the range of b_j.
  """
  num_features: int = 256
  num_train: int = 8000
  num_test: int = 20000
  ridge: float = 1e-3
  bias: float = 3.0


def second_layer_fit(w_hat: jax.Array, key: jax.Array, step: StepSettings,
                     settings: RidgeSettings) -> jax.Array:
  """Test MSE / Var(y) of the ridge-fitted second layer on frozen ``w_hat`` [d].

  theta* = e_1; labels y = f(z) + noise (``step.link``, ``step.noise_std``). Runs in the
  dtype of ``w_hat`` (float64 recommended: the ReLU features are strongly correlated).
  """
  dtype, d, n = w_hat.dtype, w_hat.shape[0], settings.num_train
  k_feat, k_bias, k_data = jax.random.split(key, 3)
  signs = prng.rademacher(k_feat, (settings.num_features,), dtype)
  bias = prng.uniform(k_bias, (settings.num_features,), dtype, -settings.bias,
                      settings.bias)
  total = n + settings.num_test
  draws = prng.normal(k_data, (total * (d + 1),), dtype)
  x = draws[:total * d].reshape(total, d)
  y = links_lib.labels(step.link, x[:, 0], draws[total * d:], step.noise_std)
  features = jax.nn.relu(jnp.outer(x @ w_hat, signs) + bias)
  features = jnp.concatenate([features, jnp.ones((total, 1), dtype)], axis=1)
  train, test = features[:n], features[n:]
  gram = train.T @ train + settings.ridge * n * jnp.eye(train.shape[1], dtype=dtype)
  weights = jnp.linalg.solve(gram, train.T @ y[:n])
  residual = test @ weights - y[n:]
  return jnp.mean(residual ** 2) / jnp.var(y[n:])
