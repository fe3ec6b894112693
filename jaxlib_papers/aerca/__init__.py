"""AERCA (Han, Absar, Zhang, Yuan; ICLR 2025): root causes of multivariate time-series
anomalies through Granger causal discovery.

Public API:
  * :mod:`data`: the four synthetic sets (``linear``, ``nonlinear``, ``lorenz96``,
    ``lotka_volterra``) as pure functions of a key, with abnormal twins and labels.
  * :mod:`models`: ``GVAR`` (SENN-style generalised VAR, lag axis stacked), ``Networks``.
  * :mod:`kernel`: ``LossSettings``, ``forward``, ``encode``, ``loss_fn`` (coded or paper
    KL, lag or time smoothness), ``TrainSettings`` and ``make_train_kernel`` (the core
    blocks: Adam steps over the series, vmapped seeds, keep-best and early stopping,
    scanned epochs; a step is one epoch) for ``core.train_loop``.
  * :mod:`evaluate`: Granger graph AUROC/AUPRC, AC@k / Avg@k, POT and AC*@k, VAR and raw
    baselines.
  * :mod:`train`: ``run(config, workdir) -> Result`` (one ``core.stages`` stage per
    variant); :mod:`plotting`: the figures.
"""

from jaxlib_papers.aerca import configs, data, evaluate, kernel, models, train  # noqa: F401
from jaxlib_papers.aerca.kernel import LossSettings, encode, forward, loss_fn, make_train_kernel
from jaxlib_papers.aerca.models import GVAR, Networks

__all__ = ["GVAR", "LossSettings", "Networks", "configs", "data", "encode", "evaluate",
           "forward", "kernel", "loss_fn", "make_train_kernel", "models", "train"]
