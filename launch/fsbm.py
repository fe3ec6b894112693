r"""Trains FSBM (alternating CondSOC R-steps and bridge-matching M-steps) and evaluates it.

  python -m launch.fsbm --config=fsbm:cpu --workdir=runs/fsbm
  python -m launch.fsbm --config=fsbm:vneck,cpu \
      --config.keypoints_path=$(python -m jaxlib_papers.core.datasets fsbm/kp_traj_vneck.pt) \
      --workdir=runs/fsbm_vn
  python -m launch.fsbm --config=fsbm:opinion,cpu \
      --workdir=runs/fsbm_op   # D = 100, polarising mean-field drift, generated keypoints
  python -m launch.fsbm --config=...:cpu --config.tau=0      # unguided (DSBM-like) baseline

Rerun with the same --workdir to resume (one checkpoint per alternation, in
``<workdir>/tau_<tau>``); results land in ``<workdir>/results.json``.
"""

import json

from launch import common

_CONFIG = common.define_config("fsbm")


def main(argv):
  del argv
  common.setup()
  from jaxlib_papers.core import results  # pylint: disable=g-import-not-at-top
  from jaxlib_papers.fsbm import plotting, train  # pylint: disable=g-import-not-at-top
  workdir = common.workdir("fsbm")
  (run,) = train.run(_CONFIG.value, workdir).runs  # writes <workdir>/results.json
  scores = results.to_json_tree(run.evaluation)
  summary = {"keypoints_source": run.keypoints_source,
             **{k: v for k, v in scores.items() if v is not None}}
  print(json.dumps(summary, indent=2))
  if run.evaluation is not None:
    common.save_figure(plotting.run_figure(_CONFIG.value.task, run), workdir / "paths.png")


if __name__ == "__main__":
  common.main(main, "fsbm")
