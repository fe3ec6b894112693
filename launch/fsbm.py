r"""Trains FSBM (alternating CondSOC R-steps and bridge-matching M-steps) and evaluates it.

  python -m launch.fsbm --config=jaxlib_papers/fsbm/configs/default.py:cpu --workdir=runs/fsbm
  python -m launch.fsbm --config=jaxlib_papers/fsbm/configs/default.py:vneck,cpu \
      --config.keypoints_path=$(python -m jaxlib_papers.core.datasets fsbm/kp_traj_vneck.pt) \
      --workdir=runs/fsbm_vn
  python -m launch.fsbm --config=jaxlib_papers/fsbm/configs/default.py:opinion,cpu \
      --workdir=runs/fsbm_op   # D = 100, polarising mean-field drift, generated keypoints
  python -m launch.fsbm --config=...:cpu --config.tau=0      # unguided (DSBM-like) baseline

Rerun with the same --workdir to resume (one checkpoint per alternation); results land in
``<workdir>/results.json``.
"""

import json

from absl import app
from ml_collections import config_flags

from launch import common

_CONFIG = config_flags.DEFINE_config_file("config", "jaxlib_papers/fsbm/configs/default.py:smoke")


def main(argv):
  del argv
  common.setup()
  from jaxlib_papers.core import writers  # pylint: disable=g-import-not-at-top
  from jaxlib_papers.fsbm import train  # pylint: disable=g-import-not-at-top
  workdir = common.workdir("fsbm")
  (results,) = train.run(_CONFIG.value, workdir)
  summary = {k: results[k] for k in ("collision_rate", "w2", "mmd", "directional_similarity",
                                     "polarisation", "polarisation_max",
                                     "polarisation_path", "target_polarisation")
             if k in results}
  summary["keypoints_source"] = results["keypoints_source"]
  summary["history"] = results["history"]
  if workdir is not None and (workdir / "metrics.jsonl").exists():
    summary["history"] = writers.read_jsonl(workdir / "metrics.jsonl")  # all alternations
  print(json.dumps({k: v for k, v in summary.items() if k != "history"}, indent=2))
  if workdir is not None:
    writers.write_json(f"{workdir}/results.json", summary, indent=2)


if __name__ == "__main__":
  app.run(main)
