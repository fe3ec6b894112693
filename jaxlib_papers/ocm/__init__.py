"""OCM: optimal diagonal covariance matching for diffusion models (Ou et al., ICLR 2025).

Public API:

* :mod:`diffusion`: schedules, skip-step DDPM/DDIM reverse steps, ``sample``, K-step ``nelbo``.
* :mod:`covariance`: the OCM probe target (one jvp), head losses, every method's x0-covariance.
* :mod:`kernel`: the losses ``dsm_loss`` / ``head_loss`` over ``DSMSettings`` /
  ``HeadSettings``, ``make_dsm_kernel``, ``make_head_kernel`` (for ``core.stages``), and
  ``make_predictor`` for beta~, beta, Analytic-DPM, SN-DPM, NPR-DPM, OCM, the exact row and
  the report-only "jacobian" diagnostic (the eps network's own Jacobian diagonal, vectors only).
* :mod:`gmm`: Gaussian mixtures with closed-form diffused score and Hessian diagonal.
* :mod:`models`: MLP and UNet eps backbones returning their last features; the heads.
* :mod:`train`: ``run(config, workdir) -> train.Result``; configs in ``configs/default.py``.
* :mod:`plotting`: every figure (the reproduction check's and the demo's).
"""

from jaxlib_papers.ocm import configs, covariance, diffusion, gmm, kernel, models, train
from jaxlib_papers.ocm.configs import default as _default  # noqa: F401  (configs.default)
from jaxlib_papers.ocm.covariance import METHODS, ocm_target
from jaxlib_papers.ocm.diffusion import make_schedule, nelbo, sample, skip_timesteps
from jaxlib_papers.ocm.kernel import make_dsm_kernel, make_head_kernel, make_predictor

__all__ = [
    "METHODS", "configs", "covariance", "diffusion", "gmm", "kernel", "make_dsm_kernel",
    "make_head_kernel", "make_predictor", "make_schedule", "models", "nelbo", "ocm_target",
    "sample", "skip_timesteps", "train",
]
