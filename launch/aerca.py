r"""Trains AERCA on one synthetic set and evaluates it against the baselines.

  python -m launch.aerca --config=aerca:linear,cpu
  python -m launch.aerca --config=aerca:nonlinear,cpu \
      --config.variants="('aerca','paper_kl','encoder_only')" --workdir=runs/aerca_nl
  python -m launch.aerca --config=aerca:lorenz96,full

Rerun with the same --workdir to resume; results land in ``<workdir>/results.json``.

Training uses every device of the mesh: seeds (a multiple of the device count) run on their
own devices, otherwise each series' lag windows are split over them. On a CPU host one
device per core is ``XLA_FLAGS=--xla_force_host_platform_device_count=<cores>`` (2 cores:
one seed 1.25x, 8 seeds 1.39x faster per epoch; ``seeds/aerca.md``).
"""

from launch import common

_CONFIG = common.define_config("aerca")


def main(argv):
  del argv
  common.setup()
  from jaxlib_papers.aerca import plotting, reproduce, train  # pylint: disable=g-import-not-at-top
  workdir = common.workdir("aerca")
  results = train.run(_CONFIG.value, workdir)
  p = int(_CONFIG.value.data.num_vars)
  for name, m in results.methods.items():
    kb = reproduce.k_below(p, m)  # Avg@(p-1); the metrics stop at k = 10
    graph = f" | AUROC {m['auroc']:.3f} AUPRC {m['auprc']:.3f}" if "auroc" in m else ""
    print(f"{name:>12}: AC@1/3/5/10 "
          + "/".join(f"{m['ac'][k - 1]:.3f}" for k in (1, 3, 5, 10))
          + f" | Avg@10 {m['avg'][9]:.3f} | Avg@{kb} {m['avg'][kb - 1]:.3f}{graph}")
  common.save_figure(plotting.result_overview(results, _CONFIG.value.dataset),
                     workdir / "overview.png")
  common.save_figure(plotting.avg_at_k_figure(results.methods, p), workdir / "avg_at_k.png")


if __name__ == "__main__":
  common.main(main, "aerca")
