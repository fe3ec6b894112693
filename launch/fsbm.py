r"""Trains FSBM (alternating CondSOC R-steps and bridge-matching M-steps) and evaluates it.

  python -m launch.fsbm --config=jaxlib_papers/fsbm/configs/default.py:cpu --workdir=runs/fsbm
  python -m launch.fsbm --config=jaxlib_papers/fsbm/configs/default.py:cpu \
      --config.task=vneck --config.tau=10 --config.csoc.lr_mean=0.3 --config.csoc.lr_gamma=0.2 \
      --config.csoc.mB=256 --config.keypoints_path=../shared/data/fsbm/kp_traj_vneck.npy
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
  from jaxlib_papers.fsbm import train  # pylint: disable=g-import-not-at-top
  workdir = common.workdir("fsbm")
  results = train.run(_CONFIG.value, workdir)
  summary = {k: results[k] for k in ("collision_rate", "w2", "mmd", "directional_similarity")
             if k in results}
  summary["keypoints_source"] = results["keypoints_source"]
  summary["history"] = results["history"]
  print(json.dumps({k: v for k, v in summary.items() if k != "history"}, indent=2))
  if workdir is not None:
    with open(f"{workdir}/results.json", "w") as f:
      json.dump(summary, f, indent=2)


if __name__ == "__main__":
  app.run(main)
