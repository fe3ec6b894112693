"""DeepRUOT (Zhang, Li, Zhou, ICLR 2025): stochastic dynamics with growth from snapshots.

Public API:
  * ``models.make_networks``: v, g, s MLPs on ``[t, x]``.
  * ``kernel``: weighted-particle ODE and inference SDE, per-interval losses (OT, mass,
    energy, PINN, initial density), score matching, stage kernels for ``core.train_loop``.
  * ``data``: our gene-network simulator, the ``samples,x1..xd`` CSV loader, hold-out.
  * ``train.run(config, workdir)``: stages 1-4 and evaluation (W1/W2/TMV per time).
"""

from jaxlib_papers.ruot import configs, data, kernel, models, train
from jaxlib_papers.ruot.configs import default as _default  # noqa: F401  (configs.default)

__all__ = ["configs", "data", "kernel", "models", "train"]
