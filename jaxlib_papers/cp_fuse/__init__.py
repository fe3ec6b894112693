"""CP-Fuse: copyright-protected language generation by adaptive model fusion (Abad et al.,
ICLR 2025).

Public API:

* :mod:`fusion`: the per-step min-max objective, the official grid rule (``grid_solve``)
  and the exact rule (``bisection_solver`` / ``exact_solve``, a ``core.contract.Solver``).
* :mod:`kernel`: ``make_lm_kernel`` (M causal LMs in one vmapped train step),
  ``decode`` (fused decoding as one ``lax.scan``: single models, CP-Delta, CP-Fuse grid or
  exact, MemFree blocking; greedy or sampling), ``decode_cached`` (the same on a key-value
  cache) and ``fused_token_log_probs``.
* :mod:`data`: the synthetic two-corpus benchmark with asserted n-gram separation.
* :mod:`metrics`: longest common substring in tokens and characters.
* :mod:`models`: the causal transformer.
* :mod:`train`: ``run(config, workdir)``; configs in ``configs/default.py``.
"""

from jaxlib_papers.cp_fuse import configs, data, fusion, kernel, metrics, models, train  # noqa: F401
from jaxlib_papers.cp_fuse.fusion import exact_solve, grid_solve, official_grid  # noqa: F401
from jaxlib_papers.cp_fuse.kernel import decode, decode_cached, make_lm_kernel  # noqa: F401

__all__ = ["configs", "data", "fusion", "kernel", "metrics", "models", "train", "decode",
           "decode_cached", "exact_solve", "grid_solve", "make_lm_kernel", "official_grid"]
