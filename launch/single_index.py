r"""Samples to weak recovery of a Gaussian single-index model, per link, algorithm and d.

  python -m launch.single_index --config=single_index:cpu
  python -m launch.single_index --config=single_index:cpu \
      --config.dense.cells='("he3_lt","he3_vanilla")' --config.sparse.links='()'
  python -m launch.single_index --config=single_index:cpu --config.run.engine=full
  python -m launch.single_index --config=single_index:full     # 256 seeds, sharded

n* per (link, algorithm, d) with the cap hits, the fitted slopes with bootstrap intervals,
the sparse variant and stage 2 land in ``<workdir>/results.json``; the figures in
``<workdir>/nstar.png`` (and ``sparse.png``, ``stage2.png``).
"""

from launch import common

_CONFIG = common.define_config("single_index")


def main(argv):
  del argv
  common.setup()
  from jaxlib_papers.single_index import plotting, train  # pylint: disable=g-import-not-at-top
  workdir = common.workdir("single_index")
  result = train.run(_CONFIG.value, workdir)
  common.save_figure(plotting.scaling_figure(result.cells), workdir / "nstar.png")
  if result.sparse:
    common.save_figure(plotting.sparse_figure(result.sparse), workdir / "sparse.png")
  if result.stage2 is not None:
    common.save_figure(plotting.stage2_figure(result.stage2), workdir / "stage2.png")


if __name__ == "__main__":
  common.main(main, "single_index")
