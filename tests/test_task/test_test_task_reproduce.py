"""The paper's analyses on its own evaluations against independent numpy fits (1e-8), the
reproduction check's claims on them, the config's constraints and the toy."""

import dataclasses
import math

import numpy as np
import pytest

from jaxlib_papers.core.precision import enable_x64
from jaxlib_papers.test_task import data as data_lib
from jaxlib_papers.test_task import evaluate, plotting, reproduce, toy, train
from jaxlib_papers.test_task.configs import default as default_config

from .test_test_task_data import SHARED
from .test_test_task_kernel import loop_pareto, numpy_ols

SETTINGS = evaluate.AnalysisSettings(bootstrap_samples=40)


@pytest.fixture(scope="module")
def official():
  if not (SHARED / data_lib.PREFIX / data_lib.TABLES).is_file():
    pytest.skip("the shared test_task files are not here")
  table = data_lib.fetch_table()
  return table, evaluate.analyse(table, SETTINGS)


def numpy_profile(log_c, design_new, y, grid):
  """Best grid point by explicit residuals of batched 2x2 solves, then numpy's lstsq."""
  hinge = np.maximum(0.0, log_c[None, :] - grid[:, None])                   # [G, n]
  cols = [np.broadcast_to(design_new, hinge.shape), hinge] if design_new is not None else [
      hinge]
  x = np.stack(cols, axis=-1)                                                # [G, n, k]
  valid = hinge.any(axis=1)
  gram = np.einsum("gnk,gnl->gkl", x[valid], x[valid])
  coef = np.linalg.solve(gram, np.einsum("gnk,n->gk", x[valid], y)[..., None])[..., 0]
  sse = np.sum((y - np.einsum("gnk,gk->gn", x[valid], coef)) ** 2, axis=1)
  return grid[valid][int(np.argmin(sse))]


def test_every_fitted_number_equals_numpy_least_squares(official):
  table, results = official
  grid = 19.0 + 0.0005 * np.arange(12000)  # numpy's arange differs in the last bits
  log_c = np.log10(table.compute)
  for bench, r in results.items():
    pre = table.scores[f"{bench}_pre"]
    ft = table.scores[f"{bench}_ft"]
    chance = data_lib.CHANCE[bench]
    for fit, score in ((r.pre, pre), (r.post, np.maximum(pre, ft)), (r.post_ft_only, ft)):
      y = score - chance
      c_e = numpy_profile(log_c, table.new, y, grid)
      assert fit.log10_emergence == c_e
      want = numpy_ols(np.c_[table.new, np.maximum(0.0, log_c - c_e)], y)
      got = (fit.theta, fit.se, fit.p, fit.ci_low, fit.ci_high, fit.alpha,
             fit.r2_uncentered, fit.r2_centered)
      expected = (*(want[k][0] for k in ("coef", "se", "p", "ci_low", "ci_high")),
                  want["coef"][1], want["r2_uncentered"], want["r2_centered"])
      np.testing.assert_allclose(got, expected, rtol=1e-8, atol=1e-10)
    design = np.c_[np.ones_like(log_c), table.new, np.minimum(log_c, 22),
                   np.clip(log_c - 22, 0, 1), np.maximum(0, log_c - 23)]
    post = np.maximum(pre, ft)
    for coef, y in ((r.psi, post), (r.phi, pre - post)):
      want = numpy_ols(design, y)
      np.testing.assert_allclose((coef.coef, coef.se, coef.p, coef.r2_centered),
                                 (want["coef"][1], want["se"][1], want["p"][1],
                                  want["r2_centered"]), rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose((r.pareto_pre, r.pareto_post),
                               (loop_pareto(log_c, pre, table.new),
                                loop_pareto(log_c, post, table.new)), rtol=1e-12)
    for label, column in evaluate.emergence_columns(table, bench).items():
      a = table.scores[column]
      keep = (table.new == 0) & (table.compute > 1e20) & (table.compute < 1e24) & (
          np.isfinite(a))
      assert r.emergence_n[label] == keep.sum()
      assert r.emergence[label] == numpy_profile(
          log_c[keep], None, a[keep] - chance, 19.5 + 0.0005 * np.arange(9000))


def test_the_claims_hold_on_the_paper_evaluations_and_figures_draw(official):
  table, results = official
  claims = []
  for bench, r in results.items():
    claims += reproduce._fit_claims(bench, r, "shared") + reproduce._table_claims(  # pylint: disable=protected-access
        bench, r, "shared")
  assert len(claims) == 15
  assert all(c.holds for c in claims), [c for c in claims if not c.holds]
  # the headline numbers, rounded as the paper prints them
  assert [round(results[b].pre.theta, 3) for b in ("mmlu", "gsm8k")] == [0.068, 0.168]
  assert [round(results[b].post.theta, 3) for b in ("mmlu", "gsm8k")] == [-0.005, -0.001]
  for fig in (plotting.figure1(table, results), plotting.gain_figure(table),
              plotting.emergence_figure(table, results), plotting.pareto_figure(table, results)):
    assert fig.axes


def test_config_constraints_name_the_key():
  config = default_config.get_config("smoke")
  config.analysis.post = "min"
  config.toy.task_fraction = 0.0
  with pytest.raises(ValueError, match=r"config.analysis.post = 'min'.*\n.*config.toy"
                                       r".task_fraction = 0.0"):
    train.settings_from_config(config)
  with pytest.raises(ValueError, match="unknown preset"):
    default_config.get_config("huge")
  with pytest.raises(ValueError, match="toy settings: batch_size = 0"):
    toy.check_settings(toy.ToySettings(batch_size=0))


def test_ridge_with_masked_features_and_examples_equals_the_unpadded_fit():
  rng = np.random.default_rng(0)
  features, targets = rng.normal(size=(12, 5)), rng.normal(size=12)
  centre = rng.normal(size=5)
  padded = np.zeros((20, 9))
  padded[:12, :5] = features
  with enable_x64():
    small = toy._ridge(features, targets, 0.3, centre)  # pylint: disable=protected-access
    big = toy._ridge(padded, np.r_[targets, np.zeros(8)], 0.3,  # pylint: disable=protected-access
                     np.r_[centre, np.zeros(4)])
  np.testing.assert_allclose(big[:5], small, rtol=1e-10)
  np.testing.assert_allclose(big[5:], 0.0, atol=1e-14)


def test_toy_runs_and_its_fit_matches_numpy():
  settings = toy.ToySettings(num_models=12, input_dim=8, log2_width=(2.0, 4.0),
                             log2_examples=(4.0, 6.0), finetune_examples=64,
                             test_examples=128, batch_size=4, dtype="float64")
  with enable_x64():
    fits, worlds = toy.run_toy([3], settings)
  models, fit = worlds[0], fits[0]
  assert np.all((models.width >= 4) & (models.width <= 16))
  assert models.new.sum() == 4 and np.all(np.isfinite(models.acc_pre))
  design = np.c_[np.ones(12), np.log10(models.width * models.examples), models.new]
  want = numpy_ols(design, np.maximum(models.acc_pre, models.acc_ft))
  np.testing.assert_allclose((fit.theta_post, fit.se_post, fit.p_post),
                             (want["coef"][2], want["se"][2], want["p"][2]), rtol=1e-8)
  assert math.isfinite(fit.theta_pre) and dataclasses.asdict(fit)["seed"] == 3
  assert plotting.toy_figure(models, fit).axes
