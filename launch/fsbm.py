r"""Trains FSBM (alternating CondSOC R-steps and bridge-matching M-steps) and evaluates it.

  python -m launch.fsbm --config=jaxlib_papers/fsbm/configs/default.py:cpu --workdir=runs/fsbm
  python -m launch.fsbm --config=jaxlib_papers/fsbm/configs/default.py:vneck,cpu \
      --config.keypoints_path=$(python -m jaxlib_papers.core.datasets fsbm/kp_traj_vneck.pt) \
      --workdir=runs/fsbm_vn
  python -m launch.fsbm --config=jaxlib_papers/fsbm/configs/default.py:opinion,cpu \
      --workdir=runs/fsbm_op   # D = 100, polarising mean-field drift, generated keypoints
  python -m launch.fsbm --config=...:cpu --config.tau=0      # unguided (DSBM-like) baseline

Rerun with the same --workdir to resume (one checkpoint per alternation, in
``<workdir>/tau_<tau>``); results land in ``<workdir>/results.json``.
"""

import json

from absl import app
from ml_collections import config_flags

from launch import common

_CONFIG = config_flags.DEFINE_config_file("config", "jaxlib_papers/fsbm/configs/default.py:smoke")


def main(argv):
  del argv
  common.setup()
  from jaxlib_papers.core import results  # pylint: disable=g-import-not-at-top
  from jaxlib_papers.fsbm import train  # pylint: disable=g-import-not-at-top
  workdir = common.workdir("fsbm")
  (run,) = train.run(_CONFIG.value, workdir).runs  # writes <workdir>/results.json
  scores = results.to_json_tree(run.evaluation)
  summary = {"keypoints_source": run.keypoints_source,
             **{k: v for k, v in scores.items() if v is not None}}
  print(json.dumps(summary, indent=2))


if __name__ == "__main__":
  app.run(main)
