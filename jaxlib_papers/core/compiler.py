"""XLA options for one compiled program (``jax.jit(..., compiler_options=...)``).

``XLA_FLAGS`` is read once, when jax's backend starts, and applies to every program of the
process. The options here apply only to the program compiled with them, so a kernel whose
shapes run faster under another setting can take it beside kernels that do not
(``train_loop.run(compiler_options=...)``, ``stages.Stage.compiler_options``).

:func:`cpu_threaded_dots`: XLA:CPU (jax 0.10.2) hands every matmul to its YNNPACK library
(the ``LIBRARY_FUSION_TYPE_INDIVIDUAL_DOT`` fusion, on by default), which runs a small one,
such as the [256, 128] x [128, 128] products of OCM's head and DSM steps, on one thread;
without that fusion XLA's own Eigen dot splits it over the intra-op thread pool. On two
cores OCM's head step (10 per call) went from 2.42 to 1.59 ms per step, the loss equal
(``seeds/ocm.md``), while OCM's own sampler (2000 points) ran at 0.75x its speed with the
switch process-wide (``benchmarks/README.md``), so it is a per-program choice, not a flag.
"""

from __future__ import annotations

import os

import jax

_FUSION_OPTION = "xla_cpu_experimental_ynn_fusion_type"


def cpu_threaded_dots(backend: str | None = None) -> dict[str, str] | None:
  """Compiler options that keep YNNPACK's library fusions out of one XLA:CPU program: its
  matmuls go to XLA's multi-threaded Eigen dot (not YNNPACK's one-thread dot) and its
  reductions to XLA's own emitters. (An empty list: a per-program value replaces XLA's
  whole default list, which itself depends on other flags, so none is kept.)

  Args:
    backend: the backend the program compiles for (default: ``jax.default_backend()``).

  Returns:
    ``{"xla_cpu_experimental_ynn_fusion_type": ""}`` for ``jax.jit``'s
    ``compiler_options``; None on other backends, and None when this process's
    ``XLA_FLAGS`` already chooses the library fusions itself (that choice is kept).
  """
  backend = jax.default_backend() if backend is None else backend
  if backend != "cpu" or _FUSION_OPTION in os.environ.get("XLA_FLAGS", ""):
    return None
  return {_FUSION_OPTION: ""}


def named(name: str) -> dict[str, str] | None:
  """The compiler options a config names: ``"default"`` (None: the backend's own) or
  ``"cpu_threaded_dots"`` (:func:`cpu_threaded_dots`)."""
  if name == "default":
    return None
  if name == "cpu_threaded_dots":
    return cpu_threaded_dots()
  raise ValueError(f"compiler options must be 'default' or 'cpu_threaded_dots'; got {name!r}")
