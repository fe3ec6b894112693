r"""Runs null-space randomized LSVI and its baselines on one experiment.

  python -m launch.linear_rl --config=jaxlib_papers/linear_rl/configs/default.py:cpu
  python -m launch.linear_rl --config=jaxlib_papers/linear_rl/configs/default.py:cpu \
      --config.deep_sea.env.size=20
  python -m launch.linear_rl --config=jaxlib_papers/linear_rl/configs/default.py:cpu \
      --config.experiment=linear_system
  python -m launch.linear_rl --config=jaxlib_papers/linear_rl/configs/default.py:cpu \
      --config.experiment=lqr

Per-agent regret curves, out-of-span counts, timings (and LQR gains) land in
``<workdir>/results.json``.
"""

from absl import app
from ml_collections import config_flags

from launch import common

_CONFIG = config_flags.DEFINE_config_file(
    "config", "jaxlib_papers/linear_rl/configs/default.py:smoke")


def main(argv):
  del argv
  common.setup()
  from jaxlib_papers.linear_rl import train  # pylint: disable=g-import-not-at-top
  train.run(_CONFIG.value, common.workdir("linear_rl"))


if __name__ == "__main__":
  app.run(main)
