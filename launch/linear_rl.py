r"""Runs null-space randomized LSVI and its baselines on one experiment.

  python -m launch.linear_rl --config=linear_rl:cpu
  python -m launch.linear_rl --config=linear_rl:cpu \
      --config.deep_sea.env.size=20
  python -m launch.linear_rl --config=linear_rl:cpu \
      --config.experiment=linear_system
  python -m launch.linear_rl --config=linear_rl:cpu \
      --config.experiment=lqr

Per-agent regret curves, out-of-span counts, timings (and LQR gains) land in
``<workdir>/results.json``.
"""

from launch import common

_CONFIG = common.define_config("linear_rl")


def main(argv):
  del argv
  common.setup()
  import numpy as np  # pylint: disable=g-import-not-at-top

  from jaxlib_papers.linear_rl import plotting, train  # pylint: disable=g-import-not-at-top
  workdir = common.workdir("linear_rl")
  result = train.run(_CONFIG.value, workdir)
  curves = {label: np.asarray(agent.regret) for label, agent in result.agents.items()}
  common.save_figure(plotting.regret_figure(curves, result.experiment),
                     workdir / "regret.png")


if __name__ == "__main__":
  common.main(main, "linear_rl")
