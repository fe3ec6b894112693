"""Tests of the LEN / EG-2 / EG / LEN-restart solvers and the problems (float64)."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.optimize

from jaxlib_papers.core.precision import enable_x64
from jaxlib_papers.minimax import data as mm_data
from jaxlib_papers.minimax import kernel, problems, train


@pytest.fixture(autouse=True)
def x64():
  with enable_x64():
    yield


@pytest.fixture(scope="module")
def cubic():
  with enable_x64():
    return problems.cubic_bilinear(8, seed=3)


@pytest.fixture(scope="module")
def len_program(cubic):
  """One compiled LEN program (m and M are run-time arguments) shared by several tests."""
  with enable_x64():
    program = jax.jit(kernel.make_len_sweep(cubic, tol=1e-8, max_iters=400,
                                            factorization="hessenberg"))

  def solve(m):
    reg_weight = kernel.official_reg_weight(cubic.lipschitz_jacobian, m)
    with enable_x64():
      return program(jnp.zeros(16), jnp.int32(m), jnp.float64(reg_weight))

  return solve


def test_exact_saddle_is_a_zero_of_the_field(cubic):
  z_star = jnp.asarray(cubic.z_star)
  assert z_star.dtype == jnp.float64
  at_star, nearby = jax.jit(lambda z: (cubic.field(z), cubic.field(z + 1e-3)))(z_star)
  assert float(jnp.linalg.norm(at_star)) < 1e-12
  # And the field is not trivially zero elsewhere.
  assert float(jnp.linalg.norm(nearby)) > 1e-6


def test_analytic_and_autodiff_jacobians_agree(cubic):
  objective, _ = problems.cubic_bilinear_objective(8, seed=3)
  auto = problems.from_objective(objective, 8, 8)
  z = jnp.asarray(np.random.default_rng(0).normal(size=16))

  @jax.jit
  def all_of_them(z):
    eps = 1e-6
    # Central finite differences of the analytic F, one column per basis vector.
    fd = jax.vmap(lambda e: (cubic.field(z + eps * e) - cubic.field(z - eps * e))
                  / (2 * eps))(jnp.eye(16)).T
    return (auto.field(z), cubic.field(z), auto.jacobian(z), cubic.jacobian(z), fd)

  auto_f, f, auto_j, j, fd = all_of_them(z)
  np.testing.assert_allclose(auto_f, f, atol=1e-12)
  np.testing.assert_allclose(auto_j, j, atol=1e-12)
  np.testing.assert_allclose(fd, j, atol=1e-8)


def test_cubic_norm_is_guarded_at_the_origin(cubic):
  objective, _ = problems.cubic_bilinear_objective(8, seed=3)
  auto = problems.from_objective(objective, 8, 8)
  zero = jnp.zeros(16)
  auto_j, j = jax.jit(lambda z: (auto.jacobian(z), cubic.jacobian(z)))(zero)
  assert bool(jnp.all(jnp.isfinite(auto_j)))
  np.testing.assert_allclose(auto_j, j, atol=0)
  # The unguarded norm really is NaN there: the guard is what makes it work.
  naive = jax.jit(jax.hessian(lambda x: jnp.linalg.norm(x) ** 3))(jnp.zeros(3))
  assert not bool(jnp.all(jnp.isfinite(naive)))


def test_subproblem_solution_satisfies_its_equation(cubic):
  rng = np.random.default_rng(1)
  snapshot = jnp.asarray(rng.normal(size=16))
  z = jnp.asarray(rng.normal(size=16))
  reg_weight = 0.37

  @jax.jit
  def solve_all(snapshot, z):
    jac, field_value = cubic.jacobian(snapshot), cubic.field(z)
    return jac, field_value, [
        kernel.solve_subproblem(jac, field_value, reg_weight, factorization=name,
                                lam_init=5.0) for name in kernel.FACTORIZATIONS]

  jac, field_value, solutions = solve_all(snapshot, z)
  for name, (step, lam) in zip(kernel.FACTORIZATIONS, solutions):
    norm = jnp.linalg.norm(step)
    residual = field_value - (jac + reg_weight * norm * jnp.eye(16)) @ step
    assert float(jnp.linalg.norm(residual)) <= 1e-10, name
    assert abs(float(lam - reg_weight * norm)) <= 1e-10 * float(lam), name


@pytest.mark.parametrize("dim", [1, 4, 7, 13])
@pytest.mark.parametrize("dtype", [jnp.float64, jnp.complex128])
def test_blocked_back_substitution_matches_a_triangular_solve(dim, dtype):
  rng = np.random.default_rng(dim)
  upper = np.triu(rng.normal(size=(dim, dim))) + 3 * np.eye(dim)
  rhs = rng.normal(size=dim)
  if dtype == jnp.complex128:
    upper = upper + 1j * np.triu(rng.normal(size=(dim, dim)))
    rhs = rhs + 1j * rng.normal(size=dim)
  shift = 0.7
  solved = jax.jit(kernel._back_substitute)(jnp.asarray(upper, dtype), jnp.asarray(rhs, dtype),
                                            jnp.asarray(shift, dtype))
  expected = np.linalg.solve(upper + shift * np.eye(dim), rhs)
  np.testing.assert_allclose(np.asarray(solved), expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", ["hessenberg", "schur", "dense"])
def test_root_search_takes_a_tiny_newton_step_without_a_new_solve(cubic, name):
  """A warm start 1e-8 off the root: one solve, then the Newton step to first order."""
  rng = np.random.default_rng(2)
  jac = cubic.jacobian(jnp.asarray(rng.normal(size=16)))
  field_value = cubic.field(jnp.asarray(rng.normal(size=16)))
  reg_weight = jnp.float64(0.37)
  root = scipy.optimize.brentq(
      lambda lam: float(reg_weight) * np.linalg.norm(
          np.linalg.solve(np.asarray(jac) + lam * np.eye(16), np.asarray(field_value))) - lam,
      1e-12, 100.0, xtol=1e-15, rtol=1e-15)
  ops = kernel._ops(name)
  fac = ops.factor(jac)
  lam, tries, w = kernel.find_regularization(ops, fac, ops.rotate(fac, field_value),
                                             reg_weight, jnp.float64(root * (1 + 1e-8)))
  assert int(tries) == 1
  assert abs(float(lam) - root) <= 1e-12 * root
  exact = np.linalg.solve(np.asarray(jac) + root * np.eye(16), np.asarray(field_value))
  np.testing.assert_allclose(np.asarray(ops.unrotate(fac, w)), exact, rtol=1e-10, atol=1e-12)


def _eg2_reference(problem, z0, reg_weight, iters):
  """Independent NumPy EG-2: dense solves and Brent's method for lam."""
  z = np.asarray(z0, np.float64)
  grads, gammas = [], []
  field, jacobian = jax.jit(problem.field), jax.jit(problem.jacobian)
  for _ in range(iters):
    jac = np.asarray(jacobian(jnp.asarray(z)))
    g = np.asarray(field(jnp.asarray(z)))
    eye = np.eye(len(z))

    def phi(lam, jac=jac, eye=eye, g=g):
      return reg_weight * np.linalg.norm(np.linalg.solve(jac + lam * eye, g)) - lam

    lam = scipy.optimize.brentq(phi, 1e-14, math.sqrt(reg_weight * np.linalg.norm(g)) + 1,
                                xtol=1e-15, rtol=1e-15)
    z_half = z - np.linalg.solve(jac + lam * eye, g)
    gamma = reg_weight * np.linalg.norm(z - z_half)
    g_half = np.asarray(field(jnp.asarray(z_half)))
    z = z - g_half / gamma
    grads.append(np.linalg.norm(g_half))
    gammas.append(gamma)
  return z, np.array(grads), np.array(gammas)


def test_m1_is_eg2_step_for_step(cubic, len_program):
  reg_weight = kernel.official_reg_weight(cubic.lipschitz_jacobian, 1)
  out = len_program(1)
  iters = int(out.num_iters)
  assert bool(out.converged) and iters >= 4
  z_ref, grads_ref, gammas_ref = _eg2_reference(cubic, np.zeros(16), reg_weight, iters)
  np.testing.assert_allclose(out.grad_norm_history[:iters], grads_ref, rtol=1e-6)
  np.testing.assert_allclose(out.gamma_history[:iters], gammas_ref, rtol=1e-7)
  np.testing.assert_allclose(out.z_last, z_ref, rtol=1e-7, atol=1e-10)
  assert int(out.num_jacobian_calls) == iters and int(out.num_field_calls) == 2 * iters


def test_len_converges_with_lazy_jacobians_and_counts_oracles(cubic, len_program):
  m = 4
  out = len_program(m)
  iters = int(out.num_iters)
  assert bool(out.converged) and float(out.grad_norm) <= 1e-8
  assert int(out.num_jacobian_calls) == math.ceil(iters / m)
  assert float(out.oracle_cost) == 2 * iters + 16 * math.ceil(iters / m)
  assert float(out.dist_history[iters - 1]) < 1e-6
  assert np.all(np.isnan(np.asarray(out.grad_norm_history[iters:])))
  # The output average is a better point than the start (Gap guarantee is for it).
  assert float(jnp.linalg.norm(out.z_average - cubic.z_star)) < float(
      jnp.linalg.norm(cubic.z_star))


def test_jit_equals_eager():
  # Fully eager (disable_jit) dispatches every op of the loop one by one, so the run is
  # small: three EG steps. LEN's jitted trajectory is checked against an independent
  # NumPy implementation in test_m1_is_eg2_step_for_step.
  small = problems.cubic_bilinear(2, seed=0)
  z0 = jnp.asarray([0.3, -0.2, 0.1, 0.4])
  eg = kernel.make_eg(small, eta=0.5, tol=0.0, max_iters=3)
  jitted = jax.jit(eg)(z0)
  with jax.disable_jit():
    eager = eg(z0)
  for a, b in zip(jitted, eager):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-12, atol=1e-15)


def test_len_restart_contracts_on_scsc_quadratic():
  # f = (mu/2)||x||^2 + x^T B y - (mu/2)||y||^2 - c^T x: saddle solves a linear system.
  rng = np.random.default_rng(2)
  mu, dim = 0.1, 4
  coupling = rng.normal(size=(dim, dim))
  shift = rng.normal(size=dim)

  def objective(x, y):
    return (0.5 * mu * x @ x + x @ (jnp.asarray(coupling) @ y) - 0.5 * mu * y @ y
            - jnp.asarray(shift) @ x)

  full = np.block([[mu * np.eye(dim), coupling], [-coupling.T, mu * np.eye(dim)]])
  z_star = np.linalg.solve(full, np.concatenate([shift, np.zeros(dim)]))
  problem = problems.from_objective(objective, dim, dim, z_star=z_star)
  reg_weight = 1.0
  radius = float(np.linalg.norm(z_star))
  iters = kernel.restart_iterations(reg_weight, radius, mu)
  out = jax.jit(kernel.make_len_restart(problem, m=3, reg_weight=reg_weight,
                                        iters_per_epoch=iters, epochs=3))(jnp.zeros(8))
  dist = np.concatenate([[radius], np.asarray(out.epoch_dist)])
  # Each epoch at least halves the distance until it reaches rounding level.
  assert np.all(dist[1:] <= np.maximum(0.5 * dist[:-1], 1e-12 * radius)), dist
  assert dist[-1] < 1e-10 * radius
  assert int(out.num_jacobian_calls) == 3 * math.ceil(iters / 3)


def test_eg_reaches_tolerance_and_counts(cubic):
  out = train.solve(cubic, "eg", eta=0.5, tol=1e-6, max_iters=20000)
  assert bool(out.converged)
  assert int(out.num_jacobian_calls) == 0
  assert int(out.num_field_calls) == 2 * int(out.num_iters)


def test_fairness_field_matches_closed_form_gradient():
  fair = mm_data.generated_fairness_data(40, 5, seed=0)
  problem = problems.fairness_logistic(fair.features, fair.labels, fair.sensitive)
  rng = np.random.default_rng(3)
  x, y = rng.normal(size=5), rng.normal(size=1)
  a, b, c = fair.features, fair.labels[:, None], fair.sensitive[:, None]
  score = a @ x[:, None]
  p1 = 1 / (1 + np.exp(b * score))
  p2 = 1 / (1 + np.exp(c * score * y[0]))
  grad_x = (-a.T @ (p1 * b) + a.T @ (c * y[0] * p2 * 0.5)) / 40 + 2e-4 * x[:, None]
  grad_y = np.sum(score * c * 0.5 * p2) / 40 - 2e-4 * y[0]
  expected = np.concatenate([grad_x[:, 0], [-grad_y]])
  np.testing.assert_allclose(jax.jit(problem.field)(jnp.asarray(np.concatenate([x, y]))),
                             expected,
                             rtol=1e-10, atol=1e-14)


def test_bad_inputs_raise_clear_errors(cubic, tmp_path):
  with pytest.raises(ValueError, match="m must be"):
    kernel.make_len(cubic, m=0, reg_weight=1.0)
  with pytest.raises(ValueError, match="reg_weight"):
    kernel.make_len(cubic, m=1, reg_weight=-1.0)
  with pytest.raises(ValueError, match="factorization"):
    kernel.make_len(cubic, m=1, reg_weight=1.0, factorization="qr")
  with pytest.raises(ValueError, match="eta"):
    kernel.make_eg(cubic, eta=0.0)
  with pytest.raises(ValueError, match="z0 must have shape"):
    train.solve(cubic, "eg", z0=np.zeros(3), eta=0.1)
  with pytest.raises(ValueError, match="NaN"):
    train.solve(cubic, "eg", z0=np.full(16, np.nan), eta=0.1)
  with pytest.raises(ValueError, match="method"):
    kernel.make_solver(cubic, "newton")
  with pytest.raises(ValueError, match="float64"):
    kernel.make_eg(cubic, eta=0.1)(jnp.zeros(16, jnp.float32))
  with pytest.raises(ValueError, match="labels"):
    problems.fairness_logistic(np.ones((3, 2)), np.array([1.0, 0.0, 1.0]), np.ones(3))
  bad = tmp_path / "bad"
  bad.write_text("+1 1:0.5 2:x\n")
  with pytest.raises(ValueError, match="bad:1: malformed"):
    mm_data.read_libsvm(bad)


def test_heart_loader(tmp_path):
  path = tmp_path / "tiny"
  path.write_text("+1 1:0.5 2:1 13:-1\n-1 2:-1 5:0.25\n")
  with pytest.raises(ValueError, match="exceeds num_features"):
    mm_data.read_libsvm(path, 12)
  short = tmp_path / "short"
  short.write_text("+1 1:0.5 2:1\n")
  with pytest.raises(ValueError, match="13 features"):
    mm_data.load_heart(short)
  fair = mm_data.load_heart(path)
  assert fair.features.shape == (2, 12)
  np.testing.assert_array_equal(fair.sensitive, [1.0, -1.0])
  np.testing.assert_array_equal(fair.labels, [1.0, -1.0])
  assert fair.features[0, 0] == 0.5 and fair.features[1, 3] == 0.25


def test_configs_and_problem_builder():
  from jaxlib_papers.minimax import train
  from jaxlib_papers.minimax.configs import default

  smoke, cpu = default.get_config("smoke"), default.get_config("cpu")
  assert smoke.problem.n == 10 and cpu.problem.n == 100
  assert tuple(cpu.methods.len_ms) == (1, 10, 100)
  with pytest.raises(ValueError, match="unknown preset"):
    default.get_config("huge")
  fair = default.get_config("smoke")
  fair.problem.kind = "fairness"
  problem, source = train.build_problem(fair)
  assert source == "generated" and problem.dim == 13
  assert train.resolve_factorization(fair) == "schur"
  assert train.resolve_factorization(smoke) == "hessenberg"
  fair.problem.kind = "poker"
  with pytest.raises(ValueError, match="config.problem.kind"):
    train.build_problem(fair)


def test_heart_scale_file_when_shared_data_is_present(shared_data):
  path = None if shared_data is None else shared_data / "len" / "heart_scale"
  if path is None or not path.is_file():
    pytest.skip("shared data folder absent")
  fair = mm_data.load_heart(path)
  assert fair.features.shape == (270, 12)
  assert set(np.unique(fair.sensitive)) == {-1.0, 1.0}
  assert set(np.unique(fair.labels)) == {-1.0, 1.0}
  assert np.all(np.abs(fair.features) <= 1.0)


def test_negative_reg_factor_fails_before_solving(monkeypatch):
  from jaxlib_papers.minimax.configs import default

  def no_solving(*args, **kwargs):
    raise AssertionError("the config must be rejected before any problem is built")

  monkeypatch.setattr(train, "build_problem", no_solving)
  config = default.get_config("smoke")
  config.solve.reg_factor = -1.0
  with pytest.raises(ValueError, match=r"config\.solve\.reg_factor"):
    train.run(config, None, verbose=False)
  config.solve.reg_factor = 16.0 / 3.0
  config.solve.max_iters = 0
  with pytest.raises(ValueError, match=r"config\.solve\.max_iters"):
    train.settings_from_config(config)


def test_run_returns_a_typed_result_and_writes_it(tmp_path):
  import dataclasses
  import json

  from jaxlib_papers.minimax.configs import default

  config = default.get_config("smoke")
  config.problem.n = 4
  config.methods.len_ms = (1, 2)
  result = train.run(config, tmp_path, verbose=False)
  assert isinstance(result, train.RunResult)
  assert list(result.methods) == ["EG(eta=0.5)", "EG-2", "LEN(m=2)"]
  lazy = result.methods["LEN(m=2)"]
  assert lazy.converged and lazy.num_jacobian_calls == math.ceil(lazy.iterations / 2)
  assert len(lazy.grad_norm_history) == lazy.iterations
  with pytest.raises(dataclasses.FrozenInstanceError):
    result.dim = 3  # type: ignore[misc]
  written = json.loads((tmp_path / "results.json").read_text())
  assert written["dim"] == 8 and written["factorization"] == "hessenberg"
  assert written["methods"]["LEN(m=2)"]["iterations"] == lazy.iterations


def test_len_restart_rejects_unknown_options(cubic):
  with pytest.raises(TypeError, match="root_tol"):
    kernel.make_len_restart(cubic, m=1, reg_weight=1.0, iters_per_epoch=2, epochs=1,
                            root_tol=1e-3)
