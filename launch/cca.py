r"""Pretrains the digit transformer, aligns it with CCA (a lambda sweep), samples, evaluates.

  python -m launch.cca --config=jaxlib_papers/cca/configs/default.py:cpu --workdir=runs/cca
  python -m launch.cca --config=jaxlib_papers/cca/configs/default.py:cpu \
      --config.align.loss=dpo --workdir=runs/cca_dpo         # the DPO comparison
  python -m launch.cca --config=jaxlib_papers/cca/configs/default.py:full --workdir=runs/cca_full

Rerun with the same --workdir to resume; results land in ``<workdir>/results.json``.
"""

from absl import app
from ml_collections import config_flags

from launch import common

_CONFIG = config_flags.DEFINE_config_file("config", "jaxlib_papers/cca/configs/default.py:smoke")


def main(argv):
  del argv
  common.setup()
  from jaxlib_papers.cca import train  # pylint: disable=g-import-not-at-top
  result = train.run(_CONFIG.value, common.workdir("cca"))
  print(train.summary_table(result))


if __name__ == "__main__":
  app.run(main)
