"""FSBM: Feedback Schrodinger Bridge Matching (Theodoropoulos et al., ICLR 2025).

Public API:
  gpath       Gaussian-path splines, drifts (forward/backward).
  feedback    feedback cost G from aligned keypoints, grad G, divergence term.
  kernel      CondSOC loss/solve (one program over all pairs), bridge matching,
              sampling, the alternating kernel (``make_kernel``).
  tasks       S-tunnel / V-neck marginals and obstacles, generated keypoints,
              keypoint and latent loaders, metrics (collision, directional similarity).
  train       ``run(config, workdir, taus=...)``: core.train_loop, one compile for every tau.
"""

from jaxlib_papers.fsbm import configs, feedback, gpath, kernel, tasks, train
from jaxlib_papers.fsbm.configs import default as _default  # noqa: F401  (configs.default)

__all__ = ["configs", "feedback", "gpath", "kernel", "tasks", "train"]
