"""Cross-entropy identifiability (Reizinger et al., ICLR 2025).

An encoder trained with plain cross-entropy (on cluster labels, or on instance indices as
in DIET) inverts the data-generating process up to a linear (under normalisation:
orthogonal) map, when latents on the sphere come from a von Mises-Fisher mixture and pass
through an injective mixing.

Public API:

* :mod:`data`: the data-generating process (cluster vectors, Wood's vMF sampler with
  static shapes, Laplace / Normal conditionals, the leaky-ReLU mixing, indices and
  labels) and the sprites renderer.
* :mod:`kernel`: supervised and DIET CE, normalised head / features with a temperature,
  one run's step and evaluation as functions of ``Settings``; ``make_kernel(Settings,
  Variants)`` composes them with ``core.blocks`` (seeds x variants vmapped).
* :mod:`evaluate`: held-out linear R^2, singular-value MAE, same-class cosine, Bayes CE.
* :mod:`sprites`: the DisLib stand-in (CE on the shape, linear decoding of the factors).
* :mod:`train`: ``run(config, workdir)`` -> ``VmfResult`` | ``SpritesResult``; configs in
  ``configs/default.py``; figures in ``plotting.py``.
"""

from jaxlib_papers.identifiability import configs, data, evaluate, kernel, models, sprites, train  # noqa: F401
from jaxlib_papers.identifiability.kernel import Settings, Variants, make_kernel, make_variants  # noqa: F401

__all__ = ["configs", "data", "evaluate", "kernel", "models", "sprites", "train", "Settings",
           "Variants", "make_kernel", "make_variants"]
