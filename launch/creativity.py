r"""Creativity Index of human and Markov-"LLM" texts against an indexed corpus.

  python -m launch.creativity --config=creativity:cpu
  python -m launch.creativity --config=creativity:cpu --config.index.min_ngram=5 \
      --config.index.max_ngram=12
  python -m launch.creativity --config=creativity:cpu --config.data.source=generated
  python -m launch.creativity --config=creativity:full

The exactness counts, every group's cov_L and index per seed and the comparisons (gap,
alignment change, AUROCs) land in ``<workdir>/results.json``; the figures in
``<workdir>/coverage.png`` and ``spans.png``.
"""

from launch import common

_CONFIG = common.define_config("creativity")


def main(argv):
  del argv
  common.setup()
  from jaxlib_papers.creativity import plotting, train  # pylint: disable=g-import-not-at-top
  workdir = common.workdir("creativity")
  config = _CONFIG.value
  result = train.run(config, workdir)
  common.save_figure(plotting.coverage_figure(result), workdir / "coverage.png")
  common.save_figure(plotting.spans_figure(result.example, int(config.index.min_ngram)),
                     workdir / "spans.png")


if __name__ == "__main__":
  common.main(main, "creativity")
