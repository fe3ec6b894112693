"""The relaxation and its solver: Tanimoto against RDKit, the table against the dense
readout, the loss against a float64 NumPy transcription and finite differences, ExtraAdam
against a NumPy reference, jit == eager, seeds sharded over 8 fake devices == one device."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlib_papers.core.precision import enable_x64
from jaxlib_papers.sae_split import data, kernel, splitter

SMILES = ["CCO", "CCN", "c1ccccc1O", "c1ccccc1N", "CC(=O)Oc1ccccc1C(=O)O",
          "CN1C=NC2=C1C(=O)N(C(=O)N2C)C", "CC(C)Cc1ccc(cc1)C(C)C(=O)O", "C1CCCCC1",
          "c1ccc2ccccc2c1", "OC(=O)c1ccccc1", "Nc1ncnc2[nH]cnc12", "CCOC(=O)C1=CC=CC=C1",
          "COc1cc2ncnc(Nc3ccc(F)c(Cl)c3)c2cc1OCCCN1CCOCC1", "CC(=O)NC1=CC=C(O)C=C1",
          "c1ccncc1", "FC(F)(F)c1ccccc1", "CCCCCCCC", "C#CC1=CC=CC=C1", "O=C1CCCN1", "CS(=O)C"]


@pytest.fixture(scope="module")
def small():
  """A generated set of 60 vectors, its dense similarity, a target and a problem."""
  d = data.generated(60, seed=3, num_families=8, num_bits=256)
  fps = jnp.asarray(d.fingerprints, jnp.float32)
  target = kernel.make_target([0.2, 0.5, 0.8], [0.5, 0.5])
  table = kernel.neighbour_table(fps, 60, 16)
  problem = splitter.make_problem(table, target, 0.25)
  return d, fps, target, problem


def test_tanimoto_matches_rdkit_on_real_molecules():
  from rdkit import Chem, DataStructs
  from rdkit.Chem import rdFingerprintGenerator
  gen = rdFingerprintGenerator.GetMorganGenerator(radius=2, fpSize=2048)
  vectors = [gen.GetFingerprint(Chem.MolFromSmiles(s)) for s in SMILES]
  expected = np.array([DataStructs.BulkTanimotoSimilarity(v, vectors) for v in vectors])
  fps = data.fingerprints(SMILES)
  ours = np.asarray(kernel.tanimoto(fps, fps))
  np.testing.assert_allclose(ours, expected, atol=1e-7)
  assert 0.05 < expected[~np.eye(len(SMILES), dtype=bool)].max() < 1.0


def test_table_with_every_column_is_the_dense_readout(small):
  _, fps, _, problem = small
  dense = kernel.dense_table(kernel.tanimoto(fps, fps))
  w = jax.random.uniform(jax.random.key(0), (60,))
  np.testing.assert_allclose(kernel.soft_readout(w, problem.values, problem.index, 100.0),
                             kernel.soft_readout(w, *dense, 100.0), atol=1e-6)
  # the self term is S_ii = 0 (one e^0), as the official dense sum
  row = np.asarray(problem.index[0]).tolist()
  assert np.asarray(problem.values[0])[row.index(0)] == 0.0


def test_top_k_hard_readout_is_exact_where_the_condition_holds(small):
  _, fps, _, _ = small
  s = np.asarray(kernel.tanimoto(fps, fps), np.float64)
  np.fill_diagonal(s, -np.inf)
  values, index = kernel.neighbour_table(fps, 6, 16)
  test = np.asarray(kernel.binarise(jax.random.uniform(jax.random.key(1), (60,)), 45))
  brute = s[np.ix_(test, ~test)].max(1)
  table = np.asarray(kernel.hard_readout(jnp.asarray(test), values, index))[test]
  holds = np.asarray(jnp.any(~jnp.asarray(test)[index], axis=1))[test]
  assert holds.sum() >= 5
  np.testing.assert_allclose(table[holds], brute[holds], atol=1e-7)
  assert int(kernel.table_failures(jnp.asarray(test), index)) == int((~holds).sum())


def _numpy_loss(t, s, target, mass, lam, scale=100.0):
  """The official closure transcribed in float64 NumPy (dense S, S_ii = 0)."""
  w = 1 / (1 + np.exp(-t))
  z = scale * (1 - w)[None, :] * s
  m = z.max(1, keepdims=True)
  r = (m[:, 0] + np.log(np.exp(z - m).sum(1))) / scale
  c, sk, e = (np.asarray(a, np.float64) for a in (target.centres, target.widths,
                                                  target.weights))
  logits = -(r[:, None] - c[None]) ** 2 / (2 * sk ** 2)
  p = np.exp(logits - logits.max(1, keepdims=True))
  p /= p.sum(1, keepdims=True)
  o = w @ p
  used = e * mass > 1e-6
  main = np.sum((o - e * mass)[used] ** 2 / (e * mass)[used])
  ent = -np.sum(w * np.log(w) + (1 - w) * np.log1p(-w))
  return main + lam * ent, w.sum() - mass


def test_relaxed_loss_matches_numpy_and_finite_differences(small):
  _, fps, target, problem = small
  settings = kernel.Settings(lam=0.05)
  t = np.asarray(jax.random.normal(jax.random.key(2), (60,)), np.float64)
  s = np.asarray(kernel.dense_table(kernel.tanimoto(fps, fps))[0], np.float64)
  loss, h = kernel.relaxed_loss(jnp.asarray(t, jnp.float32), problem, settings)
  ref_loss, ref_h = _numpy_loss(t, s, target, 15.0, 0.05)
  np.testing.assert_allclose([float(loss), float(h)], [ref_loss, ref_h], rtol=2e-4, atol=2e-4)
  with enable_x64():
    p64 = jax.tree.map(lambda a: a.astype(jnp.float64) if a.dtype == jnp.float32 else a,
                       problem)
    f = jax.jit(lambda x: kernel.lagrangian(x, jnp.float64(0.7), p64, settings)[0])
    grad = np.asarray(jax.jit(jax.grad(f))(jnp.asarray(t)))
    direction = np.asarray(jax.random.normal(jax.random.key(3), (60,)), np.float64)
    eps = 1e-5
    fd = (f(jnp.asarray(t + eps * direction)) - f(jnp.asarray(t - eps * direction))) / (2 * eps)
    np.testing.assert_allclose(grad @ direction, float(fd), rtol=1e-6)


def _numpy_extra_adam(t, mu, grad_fn, settings, iterations):
  """ExtraAdam as the brief states it: both calls advance one set of moments."""
  state = {"m": np.zeros_like(t), "v": np.zeros_like(t), "mm": 0.0, "vm": 0.0, "n": 0}

  def adam(g, gm, t0, mu0, dual_lr):
    state["n"] += 1
    b1, b2, n = 0.9, 0.999, state["n"]
    g = g + settings.weight_decay * t0
    state["m"] = b1 * state["m"] + (1 - b1) * g
    state["v"] = b2 * state["v"] + (1 - b2) * g * g
    state["mm"] = b1 * state["mm"] + (1 - b1) * gm
    state["vm"] = b2 * state["vm"] + (1 - b2) * gm * gm
    step = (state["m"] / (1 - b1 ** n)) / (np.sqrt(state["v"] / (1 - b2 ** n)) + 1e-8)
    step_m = (state["mm"] / (1 - b1 ** n)) / (np.sqrt(state["vm"] / (1 - b2 ** n)) + 1e-8)
    return t0 - settings.lr * step, mu0 - dual_lr * step_m

  for i in range(iterations):
    dual_lr = settings.dual_lr * 0.5 * (1 + np.cos(np.pi * i / settings.iterations))
    g, gm = grad_fn(t, mu)
    half_t, half_mu = adam(g, gm, t, mu, dual_lr)
    g, gm = grad_fn(half_t, half_mu)
    t, mu = adam(g, gm, t, mu, dual_lr)
  return t, mu


def test_extragradient_matches_numpy_extra_adam_and_jit_equals_eager(small):
  _, _, _, problem = small
  settings = kernel.Settings(lam=0.02, lr=0.05, dual_lr=0.1, iterations=10)
  state = kernel.init_state(jax.random.key(4), problem, settings)

  def grad_fn(t, mu):
    g = jax.grad(lambda a, b: kernel.lagrangian(a, b, problem, settings)[0],
                 argnums=(0, 1))(jnp.asarray(t, jnp.float32), jnp.float32(mu))
    return np.asarray(g[0], np.float64), -float(g[1])

  eager = state
  for _ in range(3):
    eager = kernel.extragradient_step(eager, problem, settings)
  jitted = jax.jit(lambda s: jax.lax.fori_loop(
      0, 3, lambda _, x: kernel.extragradient_step(x, problem, settings), s))(state)
  np.testing.assert_allclose(jitted.logits, eager.logits, rtol=1e-5, atol=1e-5)
  assert int(eager.primal_opt[1].count) == 6      # moments advanced twice per iteration
  ref_t, ref_mu = _numpy_extra_adam(np.asarray(state.logits, np.float64), 0.0, grad_fn,
                                    settings, 3)
  np.testing.assert_allclose(eager.logits, ref_t, rtol=1e-4, atol=1e-4)
  np.testing.assert_allclose(float(eager.multiplier), ref_mu, rtol=1e-4, atol=1e-6)


def test_binarise_counts_and_histogram_closed_top_bin():
  w = jnp.asarray([0.9, 0.1, 0.5, 0.7, 0.2])
  test = kernel.binarise(w, jnp.int32(3))
  assert np.asarray(test).tolist() == [True, False, False, True, False]
  counts = kernel.histogram(jnp.asarray([0.0, 1.0, 0.5, 1 / 3, 0.2]), jnp.ones(5, bool),
                            jnp.asarray([0.0, 1 / 3, 2 / 3, 1.0]))
  assert np.asarray(counts).tolist() == [2, 2, 1]


def test_seeds_sharded_over_devices_equal_one_device(small):
  _, _, _, problem = small
  assert jax.device_count() == 8
  settings = kernel.Settings(lam=0.02, lr=0.1, dual_lr=0.1, iterations=40, log_every=20)
  sharded = splitter.solve_seeds(problem, settings, 5, 8)
  assert len(sharded.best_score.sharding.device_set) == 8
  states = jax.device_put(splitter.seed_states(problem, settings, 5, 8), jax.devices()[0])
  single = splitter._solve_program(states, problem, settings, 2)  # pylint: disable=protected-access
  np.testing.assert_allclose(np.asarray(sharded.best_score), np.asarray(single.best_score))
  np.testing.assert_allclose(np.asarray(sharded.logits), np.asarray(single.logits),
                             rtol=1e-5, atol=1e-5)
