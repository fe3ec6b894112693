"""DeepRUOT (Zhang, Li, Zhou, ICLR 2025): stochastic dynamics with growth from snapshots.

Public API:
  * ``models.make_networks``: v, g, s MLPs on ``[t, x]``.
  * ``losses``: weighted-particle ODE and inference SDE, per-interval losses (OT, mass,
    energy, PINN, initial density), score matching.
  * ``kernel``: the stage kernels (core blocks around ``losses``) for ``core.stages``.
  * ``flows``: inference programs of the trained model (pushforward, SDE, action).
  * ``data``: our gene-network simulator, the ``samples,x1..xd`` CSV loader, hold-out.
  * ``train.run(config, workdir)``: stages 1-4 and evaluation (W1/W2/TMV per time), a
    typed ``train.RuotResult``.
  * ``plotting``: every figure (the reproduction check and the Colab demo call it).
"""

from jaxlib_papers.ruot import configs, data, flows, kernel, losses, models, train
from jaxlib_papers.ruot.configs import default as _default  # noqa: F401  (configs.default)

__all__ = ["configs", "data", "flows", "kernel", "losses", "models", "train"]
