"""T1-T5 of the brief on random small distributions (float64), against closed forms, a
generic simplex optimiser (scipy SLSQP) and scipy root finding."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import optimize

from jaxlib_papers.core import contract
from jaxlib_papers.core.precision import enable_x64
from jaxlib_papers.cp_fuse import fusion

VOCAB = 6


def _instances(seed, count=12, vocab=VOCAB, history_scale=2.0):
  """Random (log p1, log p2, S) with peaked and flat rows and histories of either sign."""
  rng = np.random.default_rng(seed)
  out = []
  for _ in range(count):
    temps = rng.uniform(0.3, 3.0, size=2)
    l1 = rng.normal(size=vocab) * temps[0]
    l2 = rng.normal(size=vocab) * temps[1]
    l1 -= np.log(np.exp(l1).sum())
    l2 -= np.log(np.exp(l2).sum())
    history = -np.abs(rng.normal(size=2)) * history_scale
    out.append((l1, l2, history))
  return out


def _f(q, l, s):
  q = np.clip(q, 1e-300, None)
  return float(np.sum(q * (np.log(q) - l)) - s)


def _softmax(x):
  e = np.exp(x - x.max())
  return e / e.sum()


def _kl_to_first(lam, l1, l2):
  """KL(q_lam || p1) for q_lam ∝ p1^lam p2^(1 - lam)."""
  q = _softmax(lam * l1 + (1 - lam) * l2)
  return np.sum(q * (np.log(q) - l1))


def _balance(lam, l1, l2, history):
  q = _softmax(lam * l1 + (1 - lam) * l2)
  return float(q @ (l2 - l1) + history[1] - history[0])


def _simplex_min(l1, l2, history):
  """min over the simplex of max_i F_i by SLSQP on the epigraph (several starts)."""
  vocab = l1.shape[0]
  best = np.inf
  starts = [np.exp(l1), np.exp(l2), np.full(vocab, 1.0 / vocab)]
  for q0 in starts:
    x0 = np.concatenate([q0, [max(_f(q0, l1, history[0]), _f(q0, l2, history[1]))]])
    cons = [{"type": "eq", "fun": lambda x: np.sum(x[:-1]) - 1.0},
            {"type": "ineq", "fun": lambda x, l, s: x[-1] - _f(x[:-1], l, s),
             "args": (l1, history[0])},
            {"type": "ineq", "fun": lambda x, l, s: x[-1] - _f(x[:-1], l, s),
             "args": (l2, history[1])}]
    res = optimize.minimize(lambda x: x[-1], x0, constraints=cons, method="SLSQP",
                            bounds=[(1e-12, 1.0)] * vocab + [(None, None)],
                            options={"maxiter": 500, "ftol": 1e-12})
    q = res.x[:-1] / res.x[:-1].sum()
    best = min(best, max(_f(q, l1, history[0]), _f(q, l2, history[1])))
  return best


_EXACT = jax.jit(lambda l1, l2, h: fusion.exact_solve(l1, l2, h, iterations=80))


def _exact_all(instances):
  """(lam [N], J [N]) of the exact solver on stacked instances (one jitted call)."""
  l1, l2, history = (jnp.asarray(np.stack(x)) for x in zip(*instances))
  w = _EXACT(l1, l2, history)
  return np.asarray(w.alpha), np.asarray(w.objective)


def _exact(l1, l2, history):
  lam, j = _exact_all([(l1, l2, history)])
  return float(lam[0]), float(j[0])


def test_official_grid_shape_and_no_convex_pair():
  grid = fusion.official_grid(10)
  assert grid.shape == (18,)
  np.testing.assert_allclose(grid[:9], np.linspace(0, 2, 10)[:-1], rtol=1e-6)
  np.testing.assert_allclose(grid[9:], np.arange(2, 11), rtol=1e-6)
  pairs = np.asarray(fusion.grid_pairs(grid))
  assert pairs.shape == (324, 2)
  np.testing.assert_array_equal(pairs[1], [0.0, grid[1]])     # alpha is the slow index
  # T5: the grid never holds a pair of the theory's family alpha + beta = 1.
  assert np.min(np.abs(pairs.sum(1) - 1.0)) > 1e-3
  with pytest.raises(ValueError, match="grid_size"):
    fusion.official_grid(1)


def test_t1_optimum_lies_in_the_geometric_family():
  with enable_x64():
    instances = _instances(0, count=8)
    a, b = np.meshgrid(np.linspace(0, 3, 61), np.linspace(0, 3, 61), indexing="ij")
    l1s, l2s, hs = (jnp.asarray(np.stack(x)) for x in zip(*instances))
    j2d = np.asarray(jax.jit(fusion.objective)(
        jnp.asarray(a.ravel())[None], jnp.asarray(b.ravel())[None], l1s[:, None],
        l2s[:, None], hs[:, None]))                                        # [N, 61 * 61]
    for (l1, l2, history), j_exact, j_grid in zip(instances, _exact_all(instances)[1], j2d):
      # A generic optimiser over the whole simplex cannot beat the 1-D family minimum ...
      j_simplex = _simplex_min(l1, l2, history)
      assert j_simplex >= j_exact - 1e-6, (j_simplex, j_exact)
      assert j_simplex <= j_exact + 1e-4, (j_simplex, j_exact)
      # ... nor can a fine 2-D grid of unnormalised weights (alpha, beta).
      assert j_grid.min() >= j_exact - 1e-9


def test_t2_balance_at_interior_optimum_and_corners():
  with enable_x64():
    interior = 0
    instances = _instances(1, count=20, history_scale=0.3)
    for (l1, l2, history), lam in zip(instances, _exact_all(instances)[0]):
      q = np.exp(lam * l1 + (1 - lam) * l2)
      q /= q.sum()
      f = np.array([_f(q, l1, history[0]), _f(q, l2, history[1])])
      if 1e-9 < lam < 1 - 1e-9:
        interior += 1
        assert abs(f[0] - f[1]) <= 1e-9 * max(1.0, abs(f[0])), (lam, f)
        # Equivalent form: E_q[log p1(y<=t)] = E_q[log p2(y<=t)].
        np.testing.assert_allclose(history[0] + q @ l1, history[1] + q @ l2, atol=1e-9)
        # The root agrees with scipy's brentq on g.
        root = optimize.brentq(_balance, 0.0, 1.0, args=(l1, l2, history), xtol=1e-14)
        np.testing.assert_allclose(lam, root, atol=1e-9)
    assert interior >= 10
    # Corner: log p1(y<t) - log p2(y<t) >= KL(p2 || p1) gives q* = p2 (and the mirror).
    l1, l2, _ = _instances(2, count=1)[0]
    p1, p2 = np.exp(l1), np.exp(l2)
    kl21, kl12 = p2 @ (l2 - l1), p1 @ (l1 - l2)
    lams, _ = _exact_all([(l1, l2, np.array([-1.0, -1.0 - kl21 - 1e-6])),
                          (l1, l2, np.array([-1.0 - kl12 - 1e-6, -1.0])),
                          (l1, l2, np.array([-1.0, -1.0 - kl21 + 1e-3]))])
    assert lams[0] == 0.0 and lams[1] == 1.0
    assert 0.0 < lams[2] < 1.0


def test_t3_kl_derivative_closed_form_and_monotone_balance():
  with enable_x64():
    for l1, l2, history in _instances(3, count=6):
      for lam in (0.1, 0.5, 0.9):
        q = _softmax(lam * l1 + (1 - lam) * l2)
        d = l2 - l1
        var = q @ d ** 2 - (q @ d) ** 2
        fd = (_kl_to_first(lam + 1e-6, l1, l2) - _kl_to_first(lam - 1e-6, l1, l2)) / 2e-6
        np.testing.assert_allclose(float(fd), -(1 - lam) * var, rtol=1e-5, atol=1e-9)
      lams = jnp.linspace(0.0, 1.0, 201)
      g = np.asarray(fusion.balance(lams, jnp.asarray(l1)[None], jnp.asarray(l2)[None],
                                    jnp.asarray(history)[None]))
      assert np.all(np.diff(g) <= 1e-12)


def test_t4_knaf_bounds():
  with enable_x64():
    rng = np.random.default_rng(4)
    instances = [(l1, l2, np.zeros(2)) for l1, l2, _ in _instances(5, count=15)]
    for (l1, l2, _), lam in zip(instances, _exact_all(instances)[0]):
      q = np.exp(lam * l1 + (1 - lam) * l2)
      q /= q.sum()
      p1, p2 = np.exp(l1), np.exp(l2)
      k = max(q @ (np.log(q) - l1), q @ (np.log(q) - l2))
      assert k <= -2 * np.log(np.sum(np.sqrt(p1 * p2))) + 1e-9          # CP-Delta bound
      assert k <= min(p1 @ (l1 - l2), p2 @ (l2 - l1)) + 1e-9
      for _ in range(10):
        event = rng.random(VOCAB) < 0.4
        for p in (p1, p2):
          mass = p[event].sum()
          if 0 < mass < 1:
            assert q[event].sum() <= (k + np.log(2)) / np.log(1 / mass) + 1e-9


def test_t5_grid_never_below_exact_and_usually_above():
  with enable_x64():
    pairs = fusion.grid_pairs(fusion.official_grid(10)).astype(jnp.float64)
    instances = _instances(6, count=40)
    l1s, l2s, hs = (jnp.asarray(np.stack(x)) for x in zip(*instances))
    grid = jax.jit(fusion.grid_solve)(l1s, l2s, hs, pairs)
    gaps = np.asarray(grid.objective) - _exact_all(instances)[1]
    assert gaps.min() >= -1e-10
    assert np.median(gaps) > 1e-4


def test_grid_first_argmin_on_ties():
  # Identical models with zero history: every pair with the same alpha + beta ties; the
  # first one in (alpha slow, beta fast) order wins, as jnp/torch argmin.
  l = jnp.log(jnp.array([[0.5, 0.25, 0.25]]))
  pairs = jnp.array([[0.0, 1.0], [1.0, 0.0], [0.5, 0.5]])
  w = fusion.grid_solve(l, l, jnp.zeros((1, 2)), pairs)
  assert (float(w.alpha[0]), float(w.beta[0])) == (0.0, 1.0)


def test_bisection_solver_jit_equals_eager_and_contract_shape():
  l1, l2, history = (np.stack(x) for x in zip(*_instances(7, count=5)))
  args = tuple(jnp.asarray(x, jnp.float32) for x in (l1, l2, history))
  solver = fusion.bisection_solver(tolerance=0.0)
  eager = contract.iterate(solver, *args, max_iterations=30)
  jitted = jax.jit(lambda *a: contract.iterate(solver, *a, max_iterations=30))(*args)
  np.testing.assert_array_equal(eager.output.alpha, jitted.output.alpha)
  np.testing.assert_allclose(eager.output.alpha + eager.output.beta, 1.0)
  assert int(eager.iterations) == 30
  loose = contract.iterate(fusion.bisection_solver(tolerance=0.1), *args, max_iterations=30)
  assert bool(loose.converged) and int(loose.iterations) == 4      # 2^-4 <= 0.1
  with pytest.raises(ValueError, match="logp1 and logp2"):
    fusion.exact_solve(args[0], args[1][:, :3], args[2])
  with pytest.raises(ValueError, match="history"):
    fusion.exact_solve(args[0], args[1], args[2][:, :1])


def _top_k_masked(instances, ruled_out):
  """(l1, l2, history) stacked, model i's tokens ``ruled_out[i]`` at -inf (renormalised)."""
  l1, l2, history = (np.stack(x) for x in zip(*instances))
  out = []
  for l, gone in zip((l1, l2), ruled_out):
    l = l.copy()
    l[:, list(gone)] = -np.inf
    out.append(l - np.log(np.exp(l).sum(-1, keepdims=True)))
  return out[0], out[1], history


def test_minus_inf_log_probs_restrict_the_fused_support_without_nan():
  # Top-k masking leaves -inf log-probabilities: model 1 rules out tokens 0 and 1, model 2
  # token 7. Everything must equal the problem on the common support {2..6}, also at the
  # weight 0 (where 0 * -inf would be NaN), and those tokens get probability zero.
  with enable_x64():
    l1, l2, history = (jnp.asarray(x) for x in _top_k_masked(
        _instances(11, count=6, vocab=8), ((0, 1), (7,))))
    on = slice(2, 7)
    alpha = jnp.array([0.0, 1.0, 0.5, 3.0, 0.0, 2.0])
    beta = jnp.array([1.0, 0.0, 0.5, 0.0, 0.0, 7.0])
    fused = fusion.fused_logits(alpha, beta, l1, l2)
    assert not np.isnan(fused).any()
    assert np.all(np.isneginf(fused[:, :2])) and np.all(np.isneginf(fused[:, 7:]))
    np.testing.assert_allclose(fused[:, on], alpha[:, None] * l1[:, on]
                               + beta[:, None] * l2[:, on])
    per_model = fusion.per_model_objective(alpha, beta, l1, l2, history)
    assert np.all(np.isfinite(per_model))
    np.testing.assert_allclose(per_model, fusion.per_model_objective(
        alpha, beta, l1[:, on], l2[:, on], history), rtol=1e-12)
    for lam in (0.0, 0.3, 1.0):
      g = fusion.balance(jnp.full((6,), lam), l1, l2, history)
      np.testing.assert_allclose(g, fusion.balance(jnp.full((6,), lam), l1[:, on], l2[:, on],
                                                   history), rtol=1e-12)
    pairs = fusion.grid_pairs(fusion.official_grid(10))
    for solve in (lambda a, b: fusion.grid_solve(a, b, history, pairs),
                  lambda a, b: fusion.exact_solve(a, b, history, 60)):
      full, restricted = solve(l1, l2), solve(l1[:, on], l2[:, on])
      assert all(np.all(np.isfinite(x)) for x in full)
      np.testing.assert_allclose(full.alpha, restricted.alpha, atol=1e-12)
      np.testing.assert_allclose(full.beta, restricted.beta, atol=1e-12)
      np.testing.assert_allclose(full.objective, restricted.objective, rtol=1e-10)
