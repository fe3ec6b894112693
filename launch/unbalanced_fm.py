r"""Unbalanced flow matching on the generated problems: couplings, docking and relaxation.

  python -m launch.unbalanced_fm --config=unbalanced_fm:cpu
  python -m launch.unbalanced_fm --config=unbalanced_fm:cpu \
      --config.dock.deltas='(0.5, 0.75, 1.0, inf)' --config.num_seeds=5
  python -m launch.unbalanced_fm --config=unbalanced_fm:full        # on an accelerator

The coupling diagnostics (acceptance, D2, TV, E_q[c^2] per cutoff, partial OT at equal
mass), the docking flow's success / TV / validity / straightness per (cutoff, energy weight,
seed) and the relaxation's validity land in ``<workdir>/results.json``; the figures in
``<workdir>/coupling.png``, ``flow.png`` and ``ligands.png``. Rerun with the same
``--workdir`` to resume (each stage checkpoints under ``<workdir>/<stage>``).
"""

from launch import common

_CONFIG = common.define_config("unbalanced_fm")


def main(argv):
  del argv
  common.setup()
  from jaxlib_papers.unbalanced_fm import plotting, problems, train  # pylint: disable=g-import-not-at-top
  workdir = common.workdir("unbalanced_fm")
  result = train.run(_CONFIG.value, workdir)
  common.save_figure(plotting.coupling_figure(result), workdir / "coupling.png")
  common.save_figure(plotting.flow_figure(result), workdir / "flow.png")
  common.save_figure(plotting.ligands_figure(
      result.samples, problems.make_ligand().pocket,
      result.samples.get("generated_deltas", [])), workdir / "ligands.png")


if __name__ == "__main__":
  common.main(main, "unbalanced_fm")
