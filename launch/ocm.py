r"""Trains OCM (DSM backbone, then the covariance heads) and evaluates every method.

  python -m launch.ocm --config=jaxlib_papers/ocm/configs/default.py:cpu --workdir=runs/ocm
  python -m launch.ocm --config=jaxlib_papers/ocm/configs/default.py:full \
      --config.data.train_limit=-1 --workdir=runs/ocm_cifar     # CIFAR-10 on a GPU/TPU

Rerun with the same --workdir to resume; results land in ``<workdir>/results.json``.
"""

from absl import app
from ml_collections import config_flags

from launch import common

_CONFIG = config_flags.DEFINE_config_file("config", "jaxlib_papers/ocm/configs/default.py:smoke")


def main(argv):
  del argv
  common.setup()
  from jaxlib_papers.ocm import train  # pylint: disable=g-import-not-at-top
  result = train.run(_CONFIG.value, common.workdir("ocm"))
  for num_k, row in result.nelbo.items():
    print(f"K={num_k} NELBO (nats/dim): "
          + ", ".join(f"{name} {value:.4f}" for name, value in row.items()))


if __name__ == "__main__":
  app.run(main)
