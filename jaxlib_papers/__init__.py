"""jaxlib-papers: faithful, fast JAX reimplementations of ICLR 2025 methods.

Each method lives in its own subpackage (``fsbm``, ``ruot``, ``ocm``, ``minimax``,
``linear_rl``) and builds on the paper-agnostic pieces in :mod:`jaxlib_papers.core`.
"""

__version__ = "0.1.0"
