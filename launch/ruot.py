r"""Trains DeepRUOT (stages 1-4) and evaluates W1/W2/TMV at every time point.

  python -m launch.ruot --config=ruot:smoke   # simulator
  python -m launch.ruot --config=ruot:cpu \
      --config.data.path=$(python -m jaxlib_papers.core.datasets ruot/simulation_gene_data.csv) \
      --workdir=runs/ruot
  python -m launch.ruot --config=...:cpu --config.data.path=emt.csv --config.data.hold_out=-1

Rerun with the same --workdir to resume (each stage checkpoints in <workdir>/stageN);
results land in ``<workdir>/results.json``.
"""

from launch import common

_CONFIG = common.define_config("ruot")


def main(argv):
  del argv
  common.setup()
  from jaxlib_papers.ruot import plotting, train  # pylint: disable=g-import-not-at-top
  workdir = common.workdir("ruot")
  result = train.run(_CONFIG.value, workdir)
  held = result.held_out_time
  print("time |   W1 (mean +- std)  |   W2   |  TMV  | no-growth TMV")
  for row in result.summary:
    mark = " (held out)" if held is not None and row["time"] == held else ""
    print(f"{row['time']:4g} | {row['w1']:.3f} +- {row['w1_std']:.3f} | {row['w2']:.3f} | "
          f"{row['tmv']:.3f} | {row['tmv_no_growth']:.3f}{mark}")
  print("stage seconds:", {k: round(v, 1) for k, v in result.timings.items()})
  common.save_figure(plotting.dynamics_figure(result, "DeepRUOT"), workdir / "dynamics.png")


if __name__ == "__main__":
  common.main(main, "ruot")
