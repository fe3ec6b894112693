"""The experiment: config checks before any work, and one tiny end-to-end run."""

import functools
import json

import jax
import numpy as np
import pytest

from jaxlib_papers.core import distributed
from jaxlib_papers.unbalanced_fm import train
from jaxlib_papers.unbalanced_fm.configs import default


def test_presets_build_and_bad_values_name_the_key_before_any_work(tmp_path):
  for preset in ("smoke", "cpu", "full"):
    default.get_config(preset)
  for key, value, message in (
      ("dock.deltas", (0.6, -1.0), r"config.dock.deltas = \(0.6, -1.0\): expected a "
                                   r"non-empty list of a cutoff >= 0"),
      ("relax.epsilon", 1.5, r"config.relax.epsilon = 1.5: expected a number in \[0.0, "
                             r"1.0\]"),
      ("num_seeds", 0, r"config.num_seeds = 0: expected an integer >= 1")):
    config = default.get_config("smoke")
    group, _, leaf = key.rpartition(".")
    (config[group] if group else config)[leaf] = value
    with pytest.raises(ValueError, match=message):
      train.run(config, tmp_path)
    assert not list(tmp_path.iterdir())


def test_smoke_reproduction_check_holds_and_writes_typed_results(tmp_path, monkeypatch):
  """The check at smoke (the pipeline end to end: couplings, the docking members, the
  evaluation from p0); its JSON is the typed RunResult. On a one-device mesh, as a user's
  CPU (the 8-device sharding is test_unbalanced_fm_kernel's; here it doubled the time)."""
  from jaxlib_papers.core.reproduce import Context  # pylint: disable=g-import-not-at-top
  from jaxlib_papers.unbalanced_fm import reproduce  # pylint: disable=g-import-not-at-top
  one_device = distributed.make_mesh(devices=jax.devices()[:1])
  monkeypatch.setattr(train, "run", functools.partial(train.run, mesh=one_device))
  claims = reproduce.check(Context(preset="smoke", report_dir=tmp_path))
  assert claims and all(c.holds for c in claims), claims
  saved = json.loads((tmp_path / "unbalanced_fm.json").read_text())
  assert set(saved) == {"modes", "coupling", "dock", "relax", "seconds"}
  config = default.get_config("smoke")
  members = config.num_seeds * len(config.dock.deltas) * len(config.dock.energy_weights)
  assert len(saved["dock"]["success"]) == members
  assert np.asarray(saved["dock"]["straight"]).shape == (members, len(train.STRAIGHT_STEPS))
  for key in ("success", "tv", "valid"):
    assert np.all(np.isfinite(saved["dock"][key]))
  acceptance = np.asarray(saved["coupling"]["acceptance"])
  assert np.all(np.diff(acceptance, axis=1) >= 0) and np.all(acceptance[:, -1] == 1.0)
  for name in ("coupling", "flow", "ligands"):
    assert (tmp_path / f"unbalanced_fm_{name}.png").stat().st_size > 0
