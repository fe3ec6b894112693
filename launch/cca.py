r"""Pretrains the digit transformer, aligns it with CCA (a lambda sweep), samples, evaluates.

  python -m launch.cca --config=cca:cpu --workdir=runs/cca
  python -m launch.cca --config=cca:cpu \
      --config.align.loss=dpo --workdir=runs/cca_dpo         # the DPO comparison
  python -m launch.cca --config=cca:full --workdir=runs/cca_full

Rerun with the same --workdir to resume; results land in ``<workdir>/results.json``.
"""

from launch import common

_CONFIG = common.define_config("cca")


def main(argv):
  del argv
  common.setup()
  from jaxlib_papers.cca import plotting, train  # pylint: disable=g-import-not-at-top
  workdir = common.workdir("cca")
  result = train.run(_CONFIG.value, workdir)
  print(train.summary_table(result))
  common.save_figure(plotting.figure(result),
                     workdir / "samples_and_tradeoff.png")


if __name__ == "__main__":
  common.main(main, "cca")
