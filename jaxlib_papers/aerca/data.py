"""AERCA's four synthetic data sets, as pure functions of a PRNG key.

Each generator returns a :class:`Dataset`: normal series, their abnormal twins (the same
noise plus one positive shift at one step ``t_p`` on a random set ``R`` of variables),
the root-cause labels and the true Granger graph. Graphs are ``graph[target, cause]``.

* ``linear``: lag-1 VAR on four variables x <- x; w <- w, x; y <- y, w; z <- z, w, y.
* ``nonlinear``: x_t = sum_{l=1..5} (A * C_l) cos(x_{t-l} + 1) + eps_t, A an Erdos-Renyi
  digraph with ``num_edges`` edges and no self-loops.
* ``lorenz96``: dx_i/dt = (x_{i+1} - x_{i-2}) x_{i-1} - x_i + F, RK4 (the official code
  uses scipy's BDF), shift added to the state.
* ``lotka_volterra``: multi-species predator-prey with blocks of ``block`` species, RK4
  with Gaussian noise per step, clipped at 0. The abnormal twin runs the same RK4 on its
  own state (the official abnormal branch mixes the normal predators into stages 2 and 4;
  not copied).

Every series is simulated by one ``lax.scan`` over time and the series by ``jax.vmap``.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxlib_papers.core import prng

DATASETS = ("linear", "nonlinear", "lorenz96", "lotka_volterra")


class Dataset(NamedTuple):
  normal: jax.Array      # [n, T, p] float32, normal series
  abnormal: jax.Array    # [n, T, p] float32, the twin with one shifted step
  labels: jax.Array      # [n, T, p] bool, True at (t_p, j) for j in the root causes R
  graph: jax.Array       # [p, p] float32, 1 where cause j Granger-causes target i (i, j)
  weights: jax.Array     # the generator's coefficients: linear [1, 4, 4] (A), nonlinear
                         # [L, p, p] (A * C_l for lag l = 1..L); [0] for the ODE sets
  name: str = ""


# One random call per generator: every threefry call is compiled on its own (about
# 0.5 s of CPU each), so each generator draws one block of uniforms and derives normals
# (Box-Muller), integers, subsets and signs from it.

def _draw(key: jax.Array, **shapes) -> dict[str, jax.Array]:
  """Independent U(0, 1) arrays of the given shapes, from one threefry call."""
  sizes = {name: int(np.prod(shape)) for name, shape in shapes.items()}
  flat = prng.uniform(key, (sum(sizes.values()),), minval=1e-7, maxval=1.0)
  out, offset = {}, 0
  for name, shape in shapes.items():
    out[name] = flat[offset:offset + sizes[name]].reshape(shape)
    offset += sizes[name]
  return out


def _normal(u: jax.Array) -> jax.Array:
  """Box-Muller: u [2, ...] ~ U(0, 1] -> N(0, 1) of shape u.shape[1:]."""
  return jnp.sqrt(-2.0 * jnp.log(u[0])) * jnp.cos(2.0 * jnp.pi * u[1])


def _uniform_int(u: jax.Array, low: int, high: int) -> jax.Array:
  """U{low..high - 1} from u ~ U(0, 1)."""
  return jnp.minimum(low + jnp.floor(u * (high - low)).astype(jnp.int32), high - 1)


def _random_subset(u: jax.Array, low: int, high: int) -> jax.Array:
  """[m] bool mask of a uniformly random subset of size U{low..high}; u [m + 1] ~ U(0, 1)."""
  size = _uniform_int(u[0], low, high + 1)
  rank = jnp.argsort(jnp.argsort(u[1:]))     # a uniformly random permutation
  return rank < size


def _anomaly(u: jax.Array, num_vars: int, t_low: int, t_high: int, r_low: int,
             r_high: int) -> tuple[jax.Array, jax.Array]:
  """(t_p [] int32 in [t_low, t_high), R [num_vars] bool, |R| ~ U{r_low..r_high}).

  u: [num_vars + 2] ~ U(0, 1).
  """
  return _uniform_int(u[0], t_low, t_high), _random_subset(u[1:], r_low, r_high)


def _labels(t_p: jax.Array, roots: jax.Array, length: int) -> jax.Array:
  return (jnp.arange(length) == t_p)[:, None] & roots[None, :]


def _check(name: str, value: int, low: int) -> int:
  value = int(value)
  if value < low:
    raise ValueError(f"{name} must be >= {low}; got {value}")
  return value


# --------------------------------------------------------------------------- linear

def linear_coefficients(u: jax.Array) -> jax.Array:
  """[4, 4] lag-1 matrix of the linear set from u [16] ~ U(0, 1): |a| ~ U(0.2, 0.8) with a
  random sign."""
  a = (0.2 + 0.6 * u[:8]) * jnp.where(u[8:] < 0.5, 1.0, -1.0)
  rows = jnp.array([0, 1, 1, 2, 2, 3, 3, 3])
  cols = jnp.array([0, 1, 0, 2, 1, 3, 1, 2])
  return jnp.zeros((4, 4)).at[rows, cols].set(a)


LINEAR_GRAPH = np.array([[1, 0, 0, 0], [1, 1, 0, 0], [0, 1, 1, 0], [0, 1, 1, 1]], np.float32)


def _simulate_linear(a: jax.Array, eps: jax.Array) -> jax.Array:
  """x_0 = 0, x_t = a x_{t-1} + eps_t; eps [T, p] -> x [T, p]."""
  def step(x, e):
    x = a @ x + e
    return x, x
  _, xs = jax.lax.scan(step, jnp.zeros(eps.shape[1]), eps[1:])
  return jnp.concatenate([jnp.zeros((1, eps.shape[1])), xs])


def linear(key: jax.Array, num_series: int, length: int = 500, noise: float = 0.4,
           shift: float = 3.0) -> Dataset:
  """The linear set (p = 4); coefficients drawn once from ``key`` for all series.

  Args:
    key: typed PRNG key.
    num_series: n, number of normal/abnormal pairs.
    length: T.
    noise: std of eps (0.4).
    shift: added to eps_{t_p, R} of the abnormal twin (3).
  """
  num_series = _check("num_series", num_series, 1)
  length = _check("length", length, 10)
  u = _draw(key, coef=(16,), eps=(2, num_series, length, 4), anomaly=(num_series, 6))
  a = linear_coefficients(u["coef"])

  def one(eps, u):
    eps = noise * eps
    t_p, roots = _anomaly(u, 4, int(0.2 * length), int(0.8 * length), 1, 4)
    labels = _labels(t_p, roots, length)
    return _simulate_linear(a, eps), _simulate_linear(a, eps + shift * labels), labels

  normal, abnormal, labels = jax.vmap(one)(_normal(u["eps"]), u["anomaly"])
  return Dataset(normal, abnormal, labels, jnp.asarray(LINEAR_GRAPH), a[None], "linear")


# ------------------------------------------------------------------------ nonlinear

def erdos_renyi_digraph(u: jax.Array, num_vars: int, num_edges: int) -> jax.Array:
  """[p, p] 0/1, ``num_edges`` distinct off-diagonal edges drawn uniformly.

  u: [p (p - 1)] ~ U(0, 1) (its argsort is a uniformly random permutation).
  """
  off = np.array([(i, j) for i in range(num_vars) for j in range(num_vars) if i != j])
  if not 0 <= num_edges <= len(off):
    raise ValueError(f"num_edges must be in [0, {len(off)}] for num_vars={num_vars}; "
                     f"got {num_edges}")
  pick = jnp.argsort(u)[:num_edges]
  off = jnp.asarray(off)[pick]
  return jnp.zeros((num_vars, num_vars)).at[off[:, 0], off[:, 1]].set(1.0)


def nonlinear_step(weights: jax.Array, history: jax.Array) -> jax.Array:
  """sum_l W_l cos(x_{t-l} + 1); weights [L, p, p] (l = 1..L), history [L, p] newest first."""
  return jnp.einsum("lij,lj->i", weights, jnp.cos(history + 1.0))


def _simulate_nonlinear(weights: jax.Array, x_init: jax.Array, eps: jax.Array) -> jax.Array:
  lags = weights.shape[0]

  def step(history, e):
    x = nonlinear_step(weights, history) + e
    return jnp.concatenate([x[None], history[:-1]]), x

  _, xs = jax.lax.scan(step, x_init[::-1], eps[lags:])
  return jnp.concatenate([x_init, xs])


def nonlinear(key: jax.Array, num_series: int, length: int = 500, num_vars: int = 6,
              num_edges: int = 7, lags: int = 5, noise: float = 1.0,
              shift: float = 10.0) -> Dataset:
  """The nonlinear cosine VAR; graph and C_l ~ U(0.1, 2) shared by all series.

  Args:
    key: typed PRNG key.
    num_series: n.
    length: T.
    num_vars: p.
    num_edges: edges of the Erdos-Renyi digraph (7).
    lags: number of lags (5); the first ``lags`` values are N(0, 1).
    noise: std of eps (1).
    shift: added to eps_{t_p, R} (10); |R| ~ U{1..min(10, p)}.
  """
  num_series = _check("num_series", num_series, 1)
  num_vars = _check("num_vars", num_vars, 2)
  lags = _check("lags", lags, 1)
  length = _check("length", length, lags + 10)
  u = _draw(key, graph=(num_vars * (num_vars - 1),), coef=(lags, num_vars, num_vars),
            normals=(2, num_series, lags + length, num_vars),
            anomaly=(num_series, num_vars + 2))
  graph = erdos_renyi_digraph(u["graph"], num_vars, num_edges)
  coef = 0.1 + 1.9 * u["coef"]
  weights = graph[None] * coef

  def one(normals, u):
    x_init = normals[:lags]
    eps = noise * normals[lags:]
    t_p, roots = _anomaly(u, num_vars, int(0.2 * length), int(0.8 * length), 1,
                          min(10, num_vars))
    labels = _labels(t_p, roots, length)
    return (_simulate_nonlinear(weights, x_init, eps),
            _simulate_nonlinear(weights, x_init, eps + shift * labels), labels)

  normal, abnormal, labels = jax.vmap(one)(_normal(u["normals"]), u["anomaly"])
  return Dataset(normal, abnormal, labels, graph, weights, "nonlinear")


# ------------------------------------------------------------------------ Lorenz-96

def lorenz96_drift(x: jax.Array, forcing: float) -> jax.Array:
  """dx_i/dt = (x_{i+1} - x_{i-2}) x_{i-1} - x_i + F; x [p]."""
  return (jnp.roll(x, -1) - jnp.roll(x, 2)) * jnp.roll(x, 1) - x + forcing


def lorenz96_graph(num_vars: int) -> np.ndarray:
  """[p, p]: target i has causes i, i - 1, i - 2, i + 1 (mod p)."""
  graph = np.zeros((num_vars, num_vars), np.float32)
  for i in range(num_vars):
    for d in (0, -1, -2, 1):
      graph[i, (i + d) % num_vars] = 1.0
  return graph


def rk4_step(f, x: jax.Array, dt: float) -> jax.Array:
  k1 = f(x)
  k2 = f(x + 0.5 * dt * k1)
  k3 = f(x + 0.5 * dt * k2)
  k4 = f(x + dt * k3)
  return x + dt / 6.0 * (k1 + 2 * k2 + 2 * k3 + k4)


def lorenz96(key: jax.Array, num_series: int, length: int = 2000, num_vars: int = 20,
             forcing: float = 8.0, dt: float = 0.01, substeps: int = 10,
             shift: float = 10.0) -> Dataset:
  """Lorenz-96 sampled every ``substeps`` RK4 steps of ``dt``; x_0 ~ U(0, 1).

  The abnormal twin gets ``shift`` added to the state of |R| ~ U{1..p // 2} variables at
  t_p ~ U[0.5 T, 0.8 T) and continues from the shifted state (no process noise).
  """
  num_series = _check("num_series", num_series, 1)
  num_vars = _check("num_vars", num_vars, 4)
  length = _check("length", length, 10)
  f = lambda x: lorenz96_drift(x, forcing)

  def flow(x):
    return jax.lax.fori_loop(0, substeps, lambda _, y: rk4_step(f, y, dt), x)

  def simulate(x0, bumps):
    def step(x, bump):
      x = flow(x) + bump
      return x, x
    _, xs = jax.lax.scan(step, x0, bumps[1:])
    return jnp.concatenate([x0[None], xs])

  def one(u):
    x0 = u[:num_vars]
    t_p, roots = _anomaly(u[num_vars:], num_vars, int(0.5 * length), int(0.8 * length), 1,
                          num_vars // 2)
    labels = _labels(t_p, roots, length)
    return simulate(x0, jnp.zeros((length, num_vars))), simulate(x0, shift * labels), labels

  normal, abnormal, labels = jax.vmap(one)(
      _draw(key, u=(num_series, 2 * num_vars + 2))["u"])
  return Dataset(normal, abnormal, labels, jnp.asarray(lorenz96_graph(num_vars)),
                 jnp.zeros((0,)), "lorenz96")


# ------------------------------------------------------------------- Lotka-Volterra

class LotkaVolterraParams(NamedTuple):
  alpha: float = 1.1      # prey growth
  beta: float = 0.2       # predation (predators of the block on each prey)
  gamma: float = 1.1      # predator death
  delta: float = 0.2      # predator growth from the prey of its block
  crowding: float = 2.75e-4  # prey self-limitation: - crowding (x / 200)^2


def _block_sums(v: jax.Array, block: int) -> jax.Array:
  """[p]: sum of v over the block of ``block`` consecutive species that holds each index."""
  sums = v.reshape(-1, block).sum(1)
  return jnp.repeat(sums, block)


def lotka_volterra_drift(state: jax.Array, params: LotkaVolterraParams,
                         block: int) -> jax.Array:
  """state [2 q] = (prey x, predators y) -> d state / dt."""
  x, y = jnp.split(state, 2)
  dx = params.alpha * x - params.beta * x * _block_sums(y, block) - \
      params.crowding * (x / 200.0) ** 2
  dy = params.delta * _block_sums(x, block) * y - params.gamma * y
  return jnp.concatenate([dx, dy])


def lotka_volterra_graph(num_species: int, block: int) -> np.ndarray:
  """[2 q, 2 q]: self-loops; prey j <- predators of its block; predator j <- its prey."""
  q = num_species
  graph = np.zeros((2 * q, 2 * q), np.float32)
  for j in range(q):
    lo = (j // block) * block
    graph[j, j] = graph[q + j, q + j] = 1.0
    graph[j, q + lo:q + lo + block] = 1.0
    graph[q + j, lo:lo + block] = 1.0
  return graph


class LotkaVolterraSim(NamedTuple):
  """How the Lotka-Volterra series are simulated and perturbed."""
  block: int = 2         # species per block (a block's predators eat the block's prey)
  dt: float = 0.01       # RK4 step
  substeps: int = 10     # RK4 steps per kept sample
  noise: float = 0.1     # std of the noise added after every RK4 step
  shift: float = 20.0    # added to the root causes' noise at t_p
  burn_in: int = 50      # samples dropped at the start


def lotka_volterra(key: jax.Array, num_series: int, length: int = 2000,
                   num_species: int = 20, sim: LotkaVolterraSim = LotkaVolterraSim(),
                   params: LotkaVolterraParams = LotkaVolterraParams()) -> Dataset:
  """Multi-species Lotka-Volterra: p = 2 q variables (q prey, then q predators).

  Each RK4 step of ``sim.dt`` adds N(0, sim.noise^2) and clips at 0; every
  ``sim.substeps``-th state is kept and the first ``sim.burn_in`` samples dropped, leaving
  ``length`` samples. The abnormal twin adds ``sim.shift`` to the noise of 3-5 species of
  one type (prey or predators) on the last RK4 step into sample t_p ~ U[0.5 T', T') of the
  T' = length + burn_in samples (label at t_p - burn_in). x_0, y_0 ~ U(10, 20).
  """
  block, dt, substeps, burn_in = sim.block, sim.dt, sim.substeps, sim.burn_in
  noise, shift = sim.noise, sim.shift
  num_series = _check("num_series", num_series, 1)
  num_species = _check("num_species", num_species, 3)
  if num_species % block:
    raise ValueError(f"num_species must be a multiple of block={block}; got {num_species}")
  length = _check("length", length, 10)
  total = length + burn_in
  p = 2 * num_species
  f = lambda s: lotka_volterra_drift(s, params, block)

  def simulate(state0, noises, bumps):
    def sample(state, inputs):
      eps, bump = inputs                         # [substeps, p], [p]
      eps = eps.at[-1].add(bump)

      def fine(s, e):
        return jnp.maximum(rk4_step(f, s, dt) + e, 0.0), None

      state, _ = jax.lax.scan(fine, state, eps)
      return state, state

    _, xs = jax.lax.scan(sample, state0, (noises[1:], bumps[1:]))
    return jnp.concatenate([state0[None], xs])[burn_in:]

  def one(noises, u):
    state0 = 10.0 + 10.0 * u[:p]
    noises = noise * noises
    t_p = _uniform_int(u[p], int(0.5 * total), total)
    species = _random_subset(u[p + 2:], min(3, num_species), min(5, num_species))
    predators = u[p + 1] < 0.5
    roots = jnp.where(predators, jnp.concatenate([jnp.zeros_like(species), species]),
                      jnp.concatenate([species, jnp.zeros_like(species)]))
    full_labels = _labels(t_p, roots, total)
    bumps = shift * full_labels
    return (simulate(state0, noises, jnp.zeros_like(bumps)),
            simulate(state0, noises, bumps), full_labels[burn_in:])

  u = _draw(key, noise=(2, num_series, total, substeps, p),
            other=(num_series, p + 3 + num_species))
  normal, abnormal, labels = jax.vmap(one)(_normal(u["noise"]), u["other"])
  return Dataset(normal, abnormal, labels,
                 jnp.asarray(lotka_volterra_graph(num_species, block)), jnp.zeros((0,)),
                 "lotka_volterra")


def generate(name: str, key: jax.Array, num_series: int, **kwargs) -> Dataset:
  """Dispatches to the generator ``name`` (one of :data:`DATASETS`)."""
  fns = {"linear": linear, "nonlinear": nonlinear, "lorenz96": lorenz96,
         "lotka_volterra": lotka_volterra}
  if name not in fns:
    raise ValueError(f"data set name must be one of {DATASETS}; got {name!r}")
  return fns[name](key, num_series, **kwargs)


def validate_series(name: str, x, num_vars: int | None = None) -> np.ndarray:
  """Checks a [n, T, p] array of series: rank 3, finite; returns it as float32 numpy."""
  x = np.asarray(x)
  if x.ndim != 3:
    raise ValueError(f"{name} must be [num_series, length, num_vars]; got shape {x.shape}")
  if num_vars is not None and x.shape[2] != num_vars:
    raise ValueError(f"{name} must have {num_vars} variables; got shape {x.shape}")
  if not np.all(np.isfinite(x)):
    raise ValueError(f"{name} contains NaN or Inf")
  return x.astype(np.float32)
