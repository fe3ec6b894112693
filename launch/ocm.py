r"""Trains OCM (DSM backbone, then the covariance heads) and evaluates every method.

  python -m launch.ocm --config=ocm:cpu --workdir=runs/ocm
  python -m launch.ocm --config=ocm:full \
      --config.data.train_limit=-1 --workdir=runs/ocm_cifar     # CIFAR-10 on a GPU/TPU

Rerun with the same --workdir to resume; results land in ``<workdir>/results.json``.
"""

from launch import common

_CONFIG = common.define_config("ocm")


def main(argv):
  del argv
  common.setup()
  from jaxlib_papers.ocm import plotting, train  # pylint: disable=g-import-not-at-top
  workdir = common.workdir("ocm")
  result = train.run(_CONFIG.value, workdir)
  for num_k, row in result.nelbo.items():
    print(f"K={num_k} NELBO (nats/dim): "
          + ", ".join(f"{name} {value:.4f}" for name, value in row.items()))
  for name, fig in (("nelbo", plotting.nelbo_figure(result)),
                    ("head_error", plotting.head_error_figure(result)),
                    ("samples", plotting.samples_figure(result, _CONFIG.value.data.name))):
    if fig is not None:
      common.save_figure(fig, workdir / f"{name}.png")


if __name__ == "__main__":
  common.main(main, "ocm")
