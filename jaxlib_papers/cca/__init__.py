"""CCA: guidance-free AR generation by condition contrastive alignment (Chen et al., ICLR 2025).

Public API:

* :mod:`kernel`: ``make_pretrain_kernel`` (condition dropout), ``alignment_loss`` (CCA, DPO,
  unlearning against a frozen reference), ``make_align_kernel`` (seeds x lambdas in one
  program), ``make_sampler`` (guidance-free or CFG, KV cache or full-prefix recompute).
* :mod:`models`: ``ARTransformer``, a tiny class-conditional decoder-only transformer.
* :mod:`toy`: the exact two-token toy (expected loss in float64, its optimum, CFG targets).
* :mod:`data`: tokenised sklearn digits; :mod:`evaluate`: accuracy, digit-IS, Fréchet
  distance, precision / recall, diversity, copies.
* :mod:`train`: ``run(config, workdir) -> train.Result`` (two ``core.stages``, a typed
  result); figures in :mod:`plotting`; configs in ``configs/default.py``.
"""

from jaxlib_papers.cca import configs, data, evaluate, kernel, models, toy, train  # noqa: F401
from jaxlib_papers.cca.kernel import (  # noqa: F401
    AlignSettings,
    alignment_loss,
    make_align_kernel,
    make_pretrain_kernel,
    make_sampler,
    sequence_logprob,
)
from jaxlib_papers.cca.models import ARTransformer  # noqa: F401

__all__ = [
    "AlignSettings", "ARTransformer", "alignment_loss", "configs", "data", "evaluate",
    "kernel", "make_align_kernel", "make_pretrain_kernel", "make_sampler", "models",
    "sequence_logprob", "toy", "train",
]
