"""The experiment: config checks, the user's own link, the slope statistics, and one tiny
end-to-end run."""

import json

import numpy as np
import pytest

from jaxlib_papers.single_index import links, train
from jaxlib_papers.single_index.configs import default


def _tiny():
  config = default.get_config("smoke")
  config.run.num_seeds = 8
  config.run.chunk = 100
  config.run.bootstrap = 50
  config.dense.cells = ("he3_lt",)
  config.dense.dims.default = (8, 16)
  config.sparse.links = ()
  config.stage2.enabled = False
  return config


def test_presets_build_and_bad_values_name_the_key():
  for preset in ("smoke", "cpu", "full"):
    default.get_config(preset)
  config = default.get_config("smoke")
  config.steps.eta_p1 = -0.2
  with pytest.raises(ValueError, match=r"config.steps.eta_p1 = -0.2: expected a number > 0"):
    train.run(config)
  config = default.get_config("smoke")
  config.sparse.dims = (4,)
  with pytest.raises(ValueError, match=r"d = 4 is not above the sparsity level k = 4"):
    train.run(config)
  config = default.get_config("smoke")
  config.dense.cells = ("he5_lt",)
  with pytest.raises(ValueError, match=r"names link 'he5'"):
    train.run(config)
  config = default.get_config("smoke")
  config.dense.cells = ("he3_sgd",)
  with pytest.raises(ValueError, match=r"algorithm must be one of"):
    train.run(config)


def test_a_users_link_with_wrong_exponents_fails_before_anything_runs():
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  cubic = links.Link("cubic", lambda z: z ** 3, 3, 1, jnp.sign)   # E[z^3 h1] = 3: k* = 1
  config = _tiny()
  config.dense.cells = ("cubic_vanilla",)
  with pytest.raises(ValueError, match=r"'cubic': declared information_exponent k\* = 3.*"
                                       r"first nonzero one is at j = 1"):
    train.run(config, links={"cubic": cubic})


def test_slopes_and_bootstrap_on_known_data():
  dims = [32, 64, 128, 256]
  hits = np.array([[int(5 * d ** 1.5)] * 9 for d in dims])
  assert train.loglog_slope(dims, train.medians(hits)) == pytest.approx(1.5, abs=1e-3)
  low, high, defined = train.bootstrap_slope(dims, hits, 50, 0)
  assert low == pytest.approx(1.5, abs=1e-3) and high == pytest.approx(1.5, abs=1e-3)
  hits[-1, :5] = -1   # a majority at the cap: that median is a failure, no slope
  assert np.isinf(train.medians(hits)[-1])
  assert np.isnan(train.loglog_slope(dims, train.medians(hits)))
  eta, cap = train.step_rule(dict(default.get_config("cpu").steps), 3, False, 64)
  assert eta == pytest.approx(2.0 * 64 ** -1.5) and cap == 10 * 64 ** 2
  assert train.theory_slope(train.algorithm("lt_s", links.LINKS["bin3"]),
                            links.LINKS["bin3"]) == 1.5


def test_tiny_run_end_to_end(tmp_path):
  result = train.run(_tiny(), tmp_path, log=lambda *a: None)
  (cell,) = result.cells
  assert cell.cell == "he3_lt" and cell.dims == [8, 16] and cell.failures == [0, 0]
  assert all(np.isfinite(cell.median)) and np.isfinite(cell.slope)
  written = json.loads((tmp_path / "results.json").read_text())
  assert written["cells"][0]["median"] == cell.median
  assert written["measured_links"]["he3"]["transformed"][0] == pytest.approx(-0.44, abs=0.02)
