"""Couplings and geometry against closed forms and dense references (small, fast)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlib_papers.unbalanced_fm import couplings, geometry, problems
from jaxlib_papers.unbalanced_fm import train as train_lib


def _reference_rmsd(x, y):
  """Float64 Kabsch by full SVD with the rotation applied (a dense reference)."""
  x = np.asarray(x, np.float64) - np.mean(x, 0)
  y = np.asarray(y, np.float64) - np.mean(y, 0)
  u, _, vt = np.linalg.svd(x.T @ y)
  d = np.sign(np.linalg.det(u @ vt))
  rot = u @ np.diag([1, 1, d]) @ vt
  return np.sqrt(((x @ rot - y) ** 2).sum(-1).mean())


def test_kabsch_rmsd_matches_a_float64_svd_reference_on_chains_and_reflections():
  rng = np.random.default_rng(0)
  lig = problems.make_ligand()
  apo = problems.sample_apo(rng, lig, 16)
  holo, _ = problems.sample_holo(rng, lig, 16)
  planar = apo.copy()
  planar[..., 2] = 0.0                          # planar chains (the float32 pitfall)
  mirrored = holo * np.array([1, 1, -1], np.float32)   # needs det < 0 handled
  for x, y in ((apo, holo), (planar, holo), (mirrored, holo)):
    ours = np.asarray(geometry.kabsch_rmsd(x, y))
    ref = np.array([_reference_rmsd(a, b) for a, b in zip(x, y)])
    np.testing.assert_allclose(ours, ref, atol=2e-4)
  rot = problems._rotation(np.array([0.3, -1.1, 0.4]))  # pylint: disable=protected-access
  moved = (holo[0] @ rot.T + 1.5).astype(np.float32)
  assert float(geometry.kabsch_rmsd(moved, holo[0])) < 1e-3


def test_kabsch_gradient_is_finite_at_zero_rmsd_and_atom_counts_must_match():
  x = jnp.asarray(problems.make_ligand().references[0])
  grad = jax.grad(lambda z: geometry.kabsch_rmsd(z, x))(x)
  assert np.all(np.isfinite(np.asarray(grad)))
  with pytest.raises(ValueError, match=r"x0 and x1 must have the same number of atoms; "
                                       r"got 8 and 7"):
    geometry.pairwise_rmsd(np.zeros((3, 8, 3)), np.zeros((2, 7, 3)))
  with pytest.raises(ValueError, match=r"x must be a point cloud \[..., atoms, 3\]"):
    geometry.kabsch_rmsd(np.zeros((8, 2)), np.zeros((8, 2)))


def test_cutoff_on_reweighted_modes_matches_the_closed_form():
  """Problem A: acceptance and TV(q0, p0) within 5% of the closed form, q1 = p1."""
  w0, w1 = problems.mode_weights()
  n = 2048
  labels0, labels1 = problems.stratified_labels(n, w0), problems.stratified_labels(n, w1)
  rng = np.random.default_rng(1)
  x0, x1 = problems.sample_modes(rng, labels0), problems.sample_modes(rng, labels1)
  deltas = jnp.asarray([0.5, 1.0, 1.5])
  out = jax.jit(train_lib.modes_coupling)(x0, x1, labels0, labels1, deltas)
  for i, d in enumerate([0.5, 1.0, 1.5]):
    closed = problems.modes_closed_form(d)
    assert abs(float(out["acceptance"][i]) / closed["acceptance"] - 1) <= 0.05
    assert abs(float(out["tv0"][i]) - closed["tv0"]) <= 0.05 * closed["tv0"]
    assert float(out["tv1"][i]) <= 0.03
  assert abs(problems.modes_closed_form(0.25)["tv0"] - 0.3554) < 1e-3


def test_cutoff_sampler_draws_uniformly_among_accepted_pairs_and_zero_when_none():
  cost = jnp.asarray([[0.1, 2.0, 0.3], [3.0, 0.2, 5.0]])
  pairs = couplings.cutoff(jax.random.key(0), cost, 0.5, 30000)
  chosen = np.asarray(cost)[np.asarray(pairs.rows), np.asarray(pairs.cols)]
  assert np.all(chosen < 0.5) and np.all(np.asarray(pairs.weights) == 1)
  freq = np.bincount(np.asarray(pairs.rows) * 3 + np.asarray(pairs.cols), minlength=6) / 30000
  np.testing.assert_allclose(freq[[0, 2, 4]], 1 / 3, atol=0.02)
  empty = couplings.cutoff(jax.random.key(1), cost, 0.05, 8)
  assert np.all(np.asarray(empty.weights) == 0)
  paired = couplings.paired_cutoff(jnp.asarray([[0.1, 9.0], [9.0, 0.9]]), 0.5)
  np.testing.assert_array_equal(np.asarray(paired.weights), [1.0, 0.0])


def test_candidate_rule_keeps_inside_drops_empty_rows_and_flips_with_epsilon():
  cost = jnp.asarray([[0.1, 0.9, 0.2], [0.8, 0.9, 0.7]])
  pairs = couplings.candidate(jax.random.key(0), cost, couplings.CandidateRule(0.5))
  np.testing.assert_array_equal(np.asarray(pairs.weights), [1.0, 0.0])
  assert int(pairs.cols[0]) in (0, 2)
  flipped = couplings.candidate(jax.random.key(0), cost, couplings.CandidateRule(0.5, 1.0))
  assert int(flipped.cols[0]) == 1 and float(flipped.weights[1]) == 1.0


def test_cutoff_stats_match_a_brute_force_count():
  rng = np.random.default_rng(2)
  cost = rng.uniform(0, 2, (40, 30)).astype(np.float32)
  stats = couplings.cutoff_stats(cost, 0.7)
  mask = cost < 0.7
  z = mask.mean()
  k = mask.sum(1)
  second = np.mean(k * (k - 1) / (30 * 29)) / z ** 2
  np.testing.assert_allclose(float(stats.acceptance), z, rtol=1e-6)
  np.testing.assert_allclose(float(stats.d2_0), np.log(second), rtol=1e-4)
  np.testing.assert_allclose(float(stats.tv_0), 0.5 * np.mean(np.abs(k / 30 / z - 1)),
                             rtol=1e-4)
  np.testing.assert_allclose(float(stats.cost2), (cost[mask] ** 2).mean(), rtol=1e-4)


def test_partial_ot_moves_the_requested_mass_and_matches_pot():
  import ot  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(3)
  cost = rng.uniform(0, 1, (12, 10)).astype(np.float32)
  plan = np.asarray(couplings.partial_plan(cost, 0.3, 0.1, num_iters=2000))
  assert abs(plan.sum() - 0.3) < 1e-5
  assert np.all(plan.sum(1) <= 1 / 12 + 1e-5) and np.all(plan.sum(0) <= 1 / 10 + 1e-5)
  ref = ot.partial.entropic_partial_wasserstein(np.full(12, 1 / 12), np.full(10, 1 / 10),
                                                cost.astype(np.float64), 0.1, m=0.3,
                                                numItermax=2000, stopThr=1e-12)
  np.testing.assert_allclose(plan, ref, atol=2e-5)


def test_uot_plan_is_ott_jax_and_relaxes_the_mass():
  from ott.geometry import geometry as ott_geometry  # pylint: disable=g-import-not-at-top
  from ott.solvers import linear  # pylint: disable=g-import-not-at-top
  cost = jnp.asarray(np.random.default_rng(4).uniform(0, 1, (9, 7)), jnp.float32)
  plan = couplings.uot_plan(cost, 0.05, 0.5, 0.5)
  direct = linear.solve(ott_geometry.Geometry(cost_matrix=cost, epsilon=0.05), tau_a=0.5,
                        tau_b=0.5).matrix
  np.testing.assert_allclose(np.asarray(plan), np.asarray(direct), rtol=1e-5, atol=1e-8)
  assert float(plan.sum()) < 0.999


def test_bad_coupling_inputs_fail_naming_the_argument():
  cost = jnp.ones((4, 3))
  with pytest.raises(ValueError, match=r"delta must be a cutoff >= 0 .* got -0.5"):
    couplings.cutoff(jax.random.key(0), cost, -0.5, 4)
  for mass in (0.0, 1.5):
    with pytest.raises(ValueError, match=r"mass must be in \(0, 1\]"):
      couplings.partial_plan(cost, mass, 0.1)
  with pytest.raises(ValueError, match=r"cost must be a matrix of shape \(4, 3\) \[n, m\]; "
                                       r"got shape \(3, 4\)"):
    couplings.plan_stats(jnp.ones((4, 3)), jnp.ones((3, 4)))
  with pytest.raises(ValueError, match=r"cost must be a matrix of shape \(4, 4\)"):
    couplings.paired_cutoff(cost, 0.5)
  with pytest.raises(ValueError, match=r"tau_a must be in \(0, 1\]"):
    couplings.uot_plan(cost, 0.1, 0.0, 1.0)


def test_gibbs_pairs_follow_exp_minus_c2_over_kappa():
  cost = jnp.asarray([[0.0, 1.0], [0.5, 2.0]])
  pairs = couplings.gibbs(jax.random.key(3), cost, 0.5, 40000)
  freq = np.bincount(np.asarray(pairs.rows) * 2 + np.asarray(pairs.cols), minlength=4) / 4e4
  expected = np.exp(-np.asarray(cost).ravel() ** 2 / 0.5)
  np.testing.assert_allclose(freq, expected / expected.sum(), atol=0.01)
