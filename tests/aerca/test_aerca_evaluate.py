"""Readouts and baselines: closed forms and known cases (numpy / scipy only, no compile)."""

import numpy as np
import pytest

from jaxlib_papers.aerca import evaluate as ev


def test_topk_accuracy_closed_form():
  scores = np.array([[0.0, 0.0, 0.0, 0.0], [3.0, 1.0, 2.0, 0.0]])
  labels = np.array([[0, 0, 0, 0], [1, 0, 0, 1]], bool)     # R = {0, 3} at step 1
  steps = ev.topk_at_steps(scores, labels, max_k=5)
  # ranking 0, 2, 1, 3: AC@1 = 1/1, AC@2 = 1/2, AC@3 = 1/2, AC@4 = 2/2, AC@5 = 1.
  np.testing.assert_allclose(steps, [[1.0, 0.5, 0.5, 1.0, 1.0]])
  out = ev.rca_metrics(scores[None], labels[None], max_k=5)
  np.testing.assert_allclose(out["avg"], np.cumsum(steps[0]) / np.arange(1, 6))
  with pytest.raises(ValueError, match="no anomalous step"):
    ev.rca_metrics(scores[None], np.zeros_like(labels)[None])


def test_random_ranking_matches_its_expectation():
  rng = np.random.default_rng(0)
  p, roots, n = 6, 2, 4000
  labels = np.zeros((n, 1, p), bool)
  labels[:, 0, :roots] = True
  out = ev.rca_metrics(rng.standard_normal((n, 1, p)), labels, max_k=p)
  for k in range(1, p + 1):
    assert abs(out["ac"][k - 1] - ev.random_expected_ac(p, roots, k)) < 0.03


def test_graph_scores_and_granger_graph():
  truth = np.array([[1, 0, 1], [1, 1, 0], [0, 0, 1]])
  auroc, auprc = ev.graph_scores(truth * 0.9 + 0.05, truth)
  assert auroc == 1.0 and auprc == 1.0
  assert ev.graph_scores(1 - truth, truth)[0] == 0.0
  coeffs = np.zeros((5, 2, 3, 3))
  coeffs[:, 1, 0, 2] = [-0.1, 0.5, -0.6, 0.7, 0.2]   # median |.| = 0.5
  coeffs[:, 0, 0, 2] = 0.3
  np.testing.assert_allclose(ev.granger_graph(coeffs)[0, 2], 0.5)


def test_pot_threshold_recovers_an_exponential_quantile():
  rng = np.random.default_rng(1)
  values = rng.exponential(size=200000)
  # Exponential tails are GPD with shape 0: the 1 - q quantile is log(1 / q).
  np.testing.assert_allclose(ev.pot_threshold(values, risk=1e-3, level=0.98),
                             np.log(1e3), rtol=0.05)
  with pytest.raises(ValueError, match="risk"):
    ev.pot_threshold(values, risk=2.0)


def test_ac_star_ranks_all_steps_and_variables_together():
  scores = np.zeros((1, 4, 2))
  scores[0, 2, 1] = 5.0
  scores[0, 1, 0] = 4.0
  labels = np.zeros((1, 4, 2), bool)
  labels[0, 2, 1] = True
  out = ev.ac_star(scores, labels, np.array([1.0, 1.0]), ks=(1, 2))
  assert out == {1: 1.0, 2: 1.0}
  out = ev.ac_star(scores, labels, np.array([1.0, 6.0]), ks=(1,))  # below threshold -> 0
  assert out[1] == 0.0


def test_var_fit_recovers_a_linear_var():
  rng = np.random.default_rng(2)
  a = np.array([[0.5, 0.0], [-0.4, 0.3]])
  x = np.zeros((3, 10000, 2))
  for t in range(1, 10000):
    x[:, t] = x[:, t - 1] @ a.T + 0.5 * rng.standard_normal((3, 2))
  coef, intercept = ev.fit_var(x, lag=1, ridge=0.0)
  np.testing.assert_allclose(coef[0], a, atol=0.03)
  assert np.abs(intercept).max() < 0.03
  s = ev.var_residuals(coef, intercept, x)
  assert s.shape == (3, 9999, 2)
  np.testing.assert_allclose(s.std(), 0.5, rtol=0.05)
  np.testing.assert_allclose(ev.var_graph(coef), np.abs(coef[0]))


def test_epsilon_diagnosis_is_one_minus_squared_window_correlation():
  rng = np.random.default_rng(4)
  x = rng.standard_normal((2, 40, 3))
  x[:, 20:30, 1] = 3.0 * x[:, 10:20, 1] + 5.0     # after-window a linear image of the before
  got = ev.epsilon_diagnosis_scores(x, window=10)
  assert got.shape == x.shape
  assert np.allclose(got[:, 20, 1], 0.0, atol=1e-12)
  for i, t, j, m in ((0, 20, 0, 10), (1, 7, 2, 7), (0, 35, 2, 5)):
    rho = np.corrcoef(x[i, t - m:t, j], x[i, t:t + m, j])[0, 1]
    np.testing.assert_allclose(got[i, t, j], 1.0 - rho ** 2, rtol=1e-12)
  assert np.all(got[:, :3] == 0.0) and np.all(got[:, -2:] == 0.0)   # m < 3: no score
