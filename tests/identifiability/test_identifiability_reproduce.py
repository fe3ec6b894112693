"""The reproduction check: claim logic on hand-made results, and the smoke run end to end."""

import json
import os
import pathlib
import subprocess
import sys

import numpy as np

from jaxlib_papers.core.reproduce import load_all
from jaxlib_papers.identifiability import reproduce, train


def _entry(kappa, norm, r2, **kw):
  base = {"kappa": kappa, "normalize_head": norm, "seeds": 3, "r2_z": r2,
          "r2_z_no_intercept": r2, "r2_x": 0.65, "r2_z_untrained": 0.5, "r2_head": 0.99,
          "r2_head_no_intercept": 0.99, "sv_mae_z": 0.01, "head_cosine": 0.99,
          "model_ce": 2.4, "bayes_ce": 2.3}
  base.update(kw)
  out = {}
  for k, v in base.items():
    out[k] = v
    if isinstance(v, float) and k != "kappa":
      out[k + "_std"], out[k + "_min"] = 0.01, v - 0.01
  return out


def _vmf(*summary):
  return train.VmfResult(rows=[], summary=list(summary), history=[], timings={},
                         optimizer_steps=0)


def _results(r2_d5=0.97, r2_d10=0.9, sprites_scale=0.95):
  r = {"trained": np.array([[0.99, sprites_scale, 0.97, 0.97]] * 3),
       "pixels": np.array([[0.3, 0.6, 0.9, 0.9]] * 3),
       "untrained": np.array([[0.3, 0.5, 0.8, 0.8]] * 3)}
  return {
      "sup_d5": _vmf(_entry(10.0, False, r2_d5), _entry(50.0, False, 0.7)),
      "diet_d5": _vmf(_entry(10.0, False, 0.95), _entry(10.0, True, 0.94)),
      "sup_d10": _vmf(_entry(10.0, False, r2_d10)),
      "sup_c10": _vmf(_entry(10.0, False, 0.9)),
      "sprites": train.SpritesResult(r=r, factors=("shape", "scale", "pos_x", "pos_y"),
                                     val_accuracy=np.ones(3), history=[], timings={},
                                     num_images=0),
  }


def test_claims_hold_and_miss():
  good = reproduce.claims_for(_results())
  assert len(good) == 8 and all(c.holds for c in good), [c for c in good if not c.holds]
  bad = reproduce.claims_for(_results(r2_d5=0.93, r2_d10=0.95, sprites_scale=0.5))
  holds = {c.claim.split(":")[0]: c.holds for c in bad}
  assert not holds["supervised d=5 |C|=100 kappa=10"]
  assert not holds["trend d"]          # d=10 above d=5 is not the paper's trend
  assert not holds["sprites"]
  assert holds["trend kappa"] and holds["DIET d=5 N=1000"]
  assert "0.930 ± 0.010" in bad[0].ours


def test_cpu_programs_scale_the_encoder_with_d_as_the_paper():
  # The paper's encoder is [10d, 50d x 4, 10d]: its widths double from d = 5 to d = 10.
  runs = reproduce.programs("cpu")
  d5, d10 = runs["sup_d5"], runs["sup_d10"]
  assert (d5.dgp.dim, d10.dgp.dim) == (5, 10)
  assert tuple(d10.model.hidden) == tuple(2 * w for w in d5.model.hidden)
  assert d10.loop.num_steps == 2 * d5.loop.num_steps == runs["diet_d5"].loop.num_steps
  assert runs["sup_c10"].model.hidden == d5.model.hidden


def test_smoke_check_end_to_end(tmp_path):
  # Through the command line on one CPU device, as a user runs it: in this process (8 fake
  # CPU devices on 2 cores) the sharded vMF train step deadlocked XLA:CPU in
  # train_loop (not understood yet; see seeds/identifiability.md).
  assert "identifiability" in load_all()
  repo = pathlib.Path(__file__).resolve().parents[2]
  env = dict(os.environ, PYTHONPATH=str(repo), JAXLIB_PAPERS_CACHE="none")
  # LLVM -O0, as the identifiability demo runs (same smoke programs, served from the
  # compilation cache to whichever of the two runs second): 26 -> 18 s alone.
  env["XLA_FLAGS"] = " ".join(
      f.replace("--xla_backend_optimization_level=1", "--xla_backend_optimization_level=0")
      for f in env.get("XLA_FLAGS", "").split()
      if not f.startswith("--xla_force_host_platform_device_count"))
  out = subprocess.run(
      [sys.executable, "-m", "launch.reproduce", "--only=identifiability", "--preset=smoke",
       "--jobs=1", f"--report_dir={tmp_path}"],
      cwd=repo, env=env, capture_output=True, text=True, timeout=900)
  assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
  rows = json.loads((tmp_path / "report.json").read_text())
  names = [r["claim"].split(":")[0] for r in rows]
  assert names == ["supervised d=5 |C|=100 kappa=10", "sanity", "trend kappa", "sprites"]
  assert all(r["data"] == "generated" for r in rows)
  tmp_path = tmp_path / "identifiability"
  assert (tmp_path / "identifiability.png").stat().st_size > 1000
  table = (tmp_path / "identifiability_tables.md").read_text()
  assert "sup_d5" in table and "| trained |" in table
  dump = json.loads((tmp_path / "identifiability.json").read_text())
  summary = dump["sup_d5"]["summary"]
  assert [e["kappa"] for e in summary] == [10.0, 50.0] and summary[0]["seeds"] == 2
  # the Bayes CE is a floor the model's CE on fresh samples cannot beat
  for e in summary:
    assert e["model_ce"] > e["bayes_ce"] - 0.02
  assert np.asarray(dump["sprites"]["r"]["pixels"]).shape == (2, 4)
