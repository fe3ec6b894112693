r"""Trains AERCA on one synthetic set and evaluates it against the baselines.

  python -m launch.aerca --config=jaxlib_papers/aerca/configs/default.py:linear,cpu
  python -m launch.aerca --config=jaxlib_papers/aerca/configs/default.py:nonlinear,cpu \
      --config.variants="('aerca','paper_kl','encoder_only')" --workdir=runs/aerca_nl
  python -m launch.aerca --config=jaxlib_papers/aerca/configs/default.py:lorenz96,full

Rerun with the same --workdir to resume; results land in ``<workdir>/results.json``.
"""

from absl import app
from ml_collections import config_flags

from launch import common

_CONFIG = config_flags.DEFINE_config_file(
    "config", "jaxlib_papers/aerca/configs/default.py:smoke")


def main(argv):
  del argv
  common.setup()
  from jaxlib_papers.aerca import train  # pylint: disable=g-import-not-at-top
  results = train.run(_CONFIG.value, common.workdir("aerca"))
  p = int(_CONFIG.value.data.num_vars)
  for name, m in results.methods.items():
    graph = f" | AUROC {m['auroc']:.3f} AUPRC {m['auprc']:.3f}" if "auroc" in m else ""
    print(f"{name:>12}: AC@1/3/5/10 "
          + "/".join(f"{m['ac'][k - 1]:.3f}" for k in (1, 3, 5, 10))
          + f" | Avg@10 {m['avg'][9]:.3f} | Avg@{p - 1} {m['avg'][p - 2]:.3f}{graph}")


if __name__ == "__main__":
  app.run(main)
