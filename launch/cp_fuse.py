r"""Trains the CP-Fuse model pairs on the synthetic two-corpus benchmark and compares every
decoding rule (single models, CP-Delta, MemFree, CP-Fuse grid and exact).

  python -m launch.cp_fuse --config=jaxlib_papers/cp_fuse/configs/default.py:cpu \
      --workdir=runs/cp_fuse
  python -m launch.cp_fuse --config=jaxlib_papers/cp_fuse/configs/default.py:full \
      --workdir=runs/cp_fuse_full                   # larger models, three pairs (GPU/TPU)

Rerun with the same --workdir to resume training; results land in
``<workdir>/results.json``.
"""

from absl import app
from ml_collections import config_flags

from launch import common

_CONFIG = config_flags.DEFINE_config_file(
    "config", "jaxlib_papers/cp_fuse/configs/default.py:smoke")


def main(argv):
  del argv
  common.setup()
  from jaxlib_papers.cp_fuse import reproduce, train  # pylint: disable=g-import-not-at-top
  config = _CONFIG.value
  result = train.run(config, common.workdir("cp_fuse"))
  for k, pair in enumerate(result.pairs):
    stats = reproduce.pair_statistics(pair, result.settings)
    print(f"pair {k}:")
    print(reproduce.table_markdown([stats]))


if __name__ == "__main__":
  app.run(main)
