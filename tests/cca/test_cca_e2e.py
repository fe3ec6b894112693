"""End to end at smoke size: pretrain -> align -> sample -> evaluate, written to a workdir,
and the reproduction's claims and figure from that result (the registered smoke check itself
runs in tests/test_launchers_and_demos.py)."""

import json

import jax
import numpy as np

from jaxlib_papers.cca import plotting, reproduce, train
from jaxlib_papers.cca.configs.default import get_config
from jaxlib_papers.core import distributed


def test_smoke_run_writes_results_aligns_and_feeds_the_claims(tmp_path):
  config = get_config("smoke")
  result = train.run(config, tmp_path, mesh=distributed.make_mesh(devices=jax.devices()[:1]))
  written = json.loads((tmp_path / "results.json").read_text())
  assert set(written) == {"metrics", "summary", "test_nll", "timing", "lambdas", "main_lambda",
                          "classifier_accuracy", "align_steps"}   # in-memory fields left out
  assert [row["setting"] for row in written["summary"]] == list(result.metrics)
  np.testing.assert_allclose(written["summary"][0]["accuracy"],
                             np.mean(result.metrics["base"]["accuracy"]))
  assert (tmp_path / "pretrain" / "metrics.jsonl").is_file()
  assert (tmp_path / "align" / "metrics.jsonl").is_file()
  assert result.pretrain_history[-1]["loss"] < result.pretrain_history[0]["loss"]
  # CCA moved theta away from the frozen reference: matched pairs gained likelihood relative
  # to mismatched ones (at step 0 both gaps are exactly 0).
  last = result.align_history[-1]
  assert last["gap_pos"] > last["gap_neg"]
  assert set(result.metrics) == {"base", "cfg s=1", "cca lambda=0", "cca lambda=30",
                                    "cca+cfg s=1"}
  for name, row in result.metrics.items():
    assert result.samples[name].shape == (2, 80, 64)
    assert all(np.all(np.isfinite(v)) for v in row.values())
    assert np.all((row["accuracy"] >= 0) & (row["accuracy"] <= 100))
  claims = reproduce.digit_claims(result)
  assert len(claims) == 6 and all(isinstance(c.holds, bool) for c in claims)
  fig = plotting.figure(result, tmp_path / "grid.png")
  assert (tmp_path / "grid.png").stat().st_size > 1000
  del fig
