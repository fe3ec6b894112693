r"""Similarity-aware train/test splits (SAE) of affinity data, with baselines and models.

  python -m launch.sae_split --config=sae_split:cpu          # EGFR, the brief's CPU plan
  python -m launch.sae_split --config=sae_split:cpu \
      --config.target.edges='(0.0,0.4,0.7,1.0)' --config.target.weights='(0.2,0.3,0.5)'
  python -m launch.sae_split --config=sae_split:full         # all four sets, 20k iterations

Official files come from ``$JAXLIB_PAPERS_DATA_DIR``, the cache or a pinned download
(offline: a generated stand-in, said so). Per set: the random / scaffold / Butina / SAE
test histograms, SAE's relaxed test mass and kept iteration, ridge and kNN R^2 per bin, in
``<workdir>/results.json``; figures ``<workdir>/histograms.png`` and ``r2.png``.
"""

from launch import common

_CONFIG = common.define_config("sae_split")


def main(argv):
  del argv
  common.setup()
  from jaxlib_papers.sae_split import plotting, train  # pylint: disable=g-import-not-at-top
  workdir = common.workdir("sae_split")
  result = train.run(_CONFIG.value, workdir)
  for index, data_set in enumerate(result.sets):
    suffix = "" if len(result.sets) == 1 else f"_{data_set.name}"
    common.save_figure(plotting.histogram_figure(result, index),
                       workdir / f"histograms{suffix}.png")
    common.save_figure(plotting.r2_figure(result, index), workdir / f"r2{suffix}.png")


if __name__ == "__main__":
  common.main(main, "sae_split")
