r"""Trains CE encoders on the vMF mixture (or sprites) and evaluates identifiability.

  python -m launch.identifiability --config=identifiability:cpu --workdir=runs/ident
  python -m launch.identifiability --config=identifiability:cpu \
      --config.objective.kind=diet --config.objective.normalize_head="(False,True)"
  python -m launch.identifiability --config=identifiability:sprites,cpu --workdir=runs/sprites
  python -m launch.identifiability --config=identifiability:cpu \
      --config.data.path=mine.npz --workdir=runs/mine   # your x [N, p], y [N] (, z [N, d])

``--config`` also takes the config file's path (``jaxlib_papers/identifiability/configs/
default.py:cpu``), from any folder.

Rerun with the same --workdir to resume; results land in ``<workdir>/results.json``.
"""

from launch import common

_CONFIG = common.define_config("identifiability")


def main(argv):
  del argv
  common.setup()
  from jaxlib_papers.identifiability import plotting, train  # pylint: disable=g-import-not-at-top
  config = _CONFIG.value
  workdir = common.workdir("identifiability")
  result = train.run(config, workdir)
  if config.task == "sprites":
    common.save_figure(plotting.decoding_figure(result), workdir / "sprites.png")
    for name, r in result.r.items():
      print(f"{name:>9}: " + ", ".join(
          f"{f} r={v:.3f}" for f, v in zip(result.factors, r.mean(0))))
    return
  if isinstance(result, train.DatasetResult):
    print(f"data set: {result.shapes}")
    for name, value in result.summary[0].items():
      print(f"  {name}: {value:.4g}")
    return
  for e in result.summary:
    print(f"kappa={e['kappa']:g} normalize_head={e['normalize_head']}: "
          f"R2(z) {e['r2_z']:.3f}±{e['r2_z_std']:.3f} (no intercept "
          f"{e['r2_z_no_intercept']:.3f}), raw x {e['r2_x']:.3f}, untrained "
          f"{e['r2_z_untrained']:.3f}, R2(W->v) {e['r2_head']:.3f}, sv MAE "
          f"{e['sv_mae_z']:.3f}, CE {e['model_ce']:.3f} (Bayes {e['bayes_ce']:.3f})")
  common.save_figure(plotting.summary_figure({config.objective.kind: result}),
                     workdir / "summary.png")


if __name__ == "__main__":
  common.main(main, "identifiability")
