r"""Trains CE encoders on the vMF mixture (or sprites) and evaluates identifiability.

  python -m launch.identifiability --config=jaxlib_papers/identifiability/configs/default.py:cpu \
      --workdir=runs/ident
  python -m launch.identifiability --config=jaxlib_papers/identifiability/configs/default.py:cpu \
      --config.objective.kind=diet --config.objective.normalize_head="(False,True)"
  python -m launch.identifiability \
      --config=jaxlib_papers/identifiability/configs/default.py:sprites,cpu --workdir=runs/sprites

Rerun with the same --workdir to resume; results land in ``<workdir>/results.json``.
"""

from absl import app
from ml_collections import config_flags

from launch import common

_CONFIG = config_flags.DEFINE_config_file(
    "config", "jaxlib_papers/identifiability/configs/default.py:smoke")


def main(argv):
  del argv
  common.setup()
  from jaxlib_papers.identifiability import train  # pylint: disable=g-import-not-at-top
  config = _CONFIG.value
  result = train.run(config, common.workdir("identifiability"))
  if config.task == "sprites":
    for name, r in result.r.items():
      print(f"{name:>9}: " + ", ".join(
          f"{f} r={v:.3f}" for f, v in zip(result.factors, r.mean(0))))
    return
  for e in result.summary:
    print(f"kappa={e['kappa']:g} normalize_head={e['normalize_head']}: "
          f"R2(z) {e['r2_z']:.3f}±{e['r2_z_std']:.3f} (no intercept "
          f"{e['r2_z_no_intercept']:.3f}), raw x {e['r2_x']:.3f}, untrained "
          f"{e['r2_z_untrained']:.3f}, R2(W->v) {e['r2_head']:.3f}, sv MAE "
          f"{e['sv_mae_z']:.3f}, CE {e['model_ce']:.3f} (Bayes {e['bayes_ce']:.3f})")

if __name__ == "__main__":
  app.run(main)
