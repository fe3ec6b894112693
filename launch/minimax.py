r"""Runs LEN, EG-2 and EG on the synthetic saddle or the fairness problem.

  python -m launch.minimax --config=minimax:cpu
  python -m launch.minimax --config=minimax:cpu \
      --config.problem.kind=fairness \
      --config.problem.data_file=$(python -m jaxlib_papers.core.datasets len/heart_scale)
  python -m launch.minimax --config=minimax:full

Results (iterations, oracle costs, seconds, ||F|| histories) land in
``<workdir>/results.json``.
"""

from launch import common

_CONFIG = common.define_config("minimax")


def main(argv):
  del argv
  common.setup()
  from jaxlib_papers.minimax import plotting, train  # pylint: disable=g-import-not-at-top
  workdir = common.workdir("minimax")
  result = train.run(_CONFIG.value, workdir)
  common.save_figure(plotting.history_figure(result), workdir / "convergence.png")


if __name__ == "__main__":
  common.main(main, "minimax")
