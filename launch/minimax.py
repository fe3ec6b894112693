r"""Runs LEN, EG-2 and EG on the synthetic saddle or the fairness problem.

  python -m launch.minimax --config=jaxlib_papers/minimax/configs/default.py:cpu
  python -m launch.minimax --config=jaxlib_papers/minimax/configs/default.py:cpu \
      --config.problem.kind=fairness \
      --config.problem.data_file=$(python -m jaxlib_papers.core.datasets len/heart_scale)
  python -m launch.minimax --config=jaxlib_papers/minimax/configs/default.py:full

Results (iterations, oracle costs, seconds, ||F|| histories) land in
``<workdir>/results.json``.
"""

from absl import app
from ml_collections import config_flags

from launch import common

_CONFIG = config_flags.DEFINE_config_file(
    "config", "jaxlib_papers/minimax/configs/default.py:smoke")


def main(argv):
  del argv
  common.setup()
  from jaxlib_papers.minimax import train  # pylint: disable=g-import-not-at-top
  train.run(_CONFIG.value, common.workdir("minimax"))


if __name__ == "__main__":
  app.run(main)
