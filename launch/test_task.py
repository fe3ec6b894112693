r"""Fits the paper's evaluations (confound, adjustment, emergence, Pareto) and runs the toy.

  python -m launch.test_task --config=test_task:cpu
  python -m launch.test_task --config=test_task:cpu --config.data.source=toy
  python -m launch.test_task --config=test_task:cpu --config.data.source=folder \
      --config.data.folder=/path/to/training-on-the-test-task   # a clone, or your own results

The 337 official files are fetched once into the data cache (``core.datasets``). Results
(every fit, the bootstrap intervals, the emergence points, the toy's fits) land in
``<workdir>/results.json``, the figures beside it.
"""

from launch import common

_CONFIG = common.define_config("test_task")


def main(argv):
  del argv
  common.setup()
  from jaxlib_papers.test_task import plotting, train  # pylint: disable=g-import-not-at-top
  workdir = common.workdir("test_task")
  result = train.run(_CONFIG.value, workdir)
  for stem, fig in plotting.all_figures(result).items():
    common.save_figure(fig, workdir / f"{stem}.png")


if __name__ == "__main__":
  common.main(main, "test_task")
