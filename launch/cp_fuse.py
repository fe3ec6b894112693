r"""Trains the CP-Fuse model pairs on the synthetic two-corpus benchmark and compares every
decoding rule (single models, CP-Delta, MemFree, CP-Fuse grid and exact).

  python -m launch.cp_fuse --config=cp_fuse:cpu \
      --workdir=runs/cp_fuse
  python -m launch.cp_fuse --config=cp_fuse:full \
      --workdir=runs/cp_fuse_full                   # larger models, three pairs (GPU/TPU)

Rerun with the same --workdir to resume training; results land in
``<workdir>/results.json``.
"""

from launch import common

_CONFIG = common.define_config("cp_fuse")


def main(argv):
  del argv
  common.setup()
  from jaxlib_papers.cp_fuse import plotting, reproduce, train  # pylint: disable=g-import-not-at-top
  config = _CONFIG.value
  workdir = common.workdir("cp_fuse")
  result = train.run(config, workdir)
  for k, pair in enumerate(result.pairs):
    stats = reproduce.pair_statistics(pair, result.settings)
    print(f"pair {k}:")
    print(reproduce.table_markdown([stats]))
    common.save_figure(plotting.summary_figure(pair, result.bench), workdir / f"pair_{k}.png")


if __name__ == "__main__":
  common.main(main, "cp_fuse")
