"""jaxlib-papers: faithful, fast JAX reimplementations of ICLR 2025 methods.

Each method lives in its own subpackage (``fsbm``, ``ruot``, ``ocm``, ``minimax``,
``linear_rl``, ``aerca``, ``cca``, ``cp_fuse``, ``identifiability``) and builds on the
paper-agnostic pieces in :mod:`jaxlib_papers.core` (the method contract in
:mod:`jaxlib_papers.core.contract`).
"""

import os as _os

__version__ = "0.1.0"

# XLA:CPU work-around (jax 0.10.2): the concurrency-optimized thunk scheduler deadlocks on
# some long scanned programs (linear_rl DeepSea N = 20, 10 seeds vmapped: block_until_ready
# waits forever with every XLA worker idle, in 4 of 4 runs; 0 of 4 with the scheduler off).
# XLA reads XLA_FLAGS when the first backend starts, so this must run before any device is
# touched; importing jaxlib_papers first (as the launchers and tests do) guarantees it.
_SCHEDULER_FLAG = "--xla_cpu_enable_concurrency_optimized_scheduler=false"
if "xla_cpu_enable_concurrency_optimized_scheduler" not in _os.environ.get("XLA_FLAGS", ""):
  _os.environ["XLA_FLAGS"] = f"{_os.environ.get('XLA_FLAGS', '')} {_SCHEDULER_FLAG}".strip()
