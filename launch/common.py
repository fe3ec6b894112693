"""Flags and set-up shared by every launcher.

Single process: no flag needed. Several processes: pass ``--coordinator_address``,
``--num_processes`` and ``--process_id`` (or none of them on a cluster that JAX detects
itself: Cloud TPU, SLURM, Open MPI). ``setup()`` must run before anything touches devices.
"""

from __future__ import annotations

import os
import pathlib

from absl import flags

_WORKDIR = flags.DEFINE_string(
    "workdir", None, "Folder for checkpoints, metrics and results; rerun with the same "
    "folder to resume. Default: a fresh folder under ./workdirs.")
_COORDINATOR = flags.DEFINE_string(
    "coordinator_address", None, "host:port of process 0 for a multi-process run.")
_NUM_PROCESSES = flags.DEFINE_integer("num_processes", None, "Number of processes.")
_PROCESS_ID = flags.DEFINE_integer("process_id", None, "Index of this process.")
_CPU_COLLECTIVES = flags.DEFINE_string(
    "cpu_collectives", None, "CPU collectives across processes, e.g. 'gloo'.")
_CACHE_DIR = flags.DEFINE_string(
    "compilation_cache_dir", None, "Persistent XLA compilation cache folder, or 'none'. "
    "Default: $JAXLIB_PAPERS_CACHE; without either it is on for GPU/TPU "
    "(~/.cache/jaxlib_papers/xla) and off for CPU (see enable_compilation_cache).")


def enable_compilation_cache(path: str | None = None) -> str | None:
  """Turns on JAX's persistent compilation cache; returns its folder (None when off).

  On GPU/TPU it is on by default. On CPU it is opt-in: while chasing an XLA:CPU hang
  (cache-loaded executables stuck in ``block_until_ready`` with several processes sharing
  the cache; traced to the scheduler disabled in ``jaxlib_papers/__init__.py``) we could
  not rule the cache out, and small CPU programs compile in seconds anyway. (The test
  suite does share one CPU cache per session between its processes, through jax's
  ``JAX_COMPILATION_CACHE_DIR``, which this function leaves alone on CPU: see
  ``tests/conftest.py``; two full suite runs with it passed, 2026-12-01.)
  """
  import jax  # pylint: disable=g-import-not-at-top
  path = path or os.environ.get("JAXLIB_PAPERS_CACHE")
  if path is None:
    if jax.default_backend() == "cpu":
      return None
    path = str(pathlib.Path.home() / ".cache" / "jaxlib_papers" / "xla")
  if path.lower() == "none":
    return None
  pathlib.Path(path).mkdir(parents=True, exist_ok=True)
  jax.config.update("jax_compilation_cache_dir", path)
  jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)
  return path


def setup() -> None:
  """Multi-host start-up (when asked for) and the compilation cache."""
  from jaxlib_papers.core import distributed  # pylint: disable=g-import-not-at-top
  distributed.maybe_initialize(
      _COORDINATOR.value, _NUM_PROCESSES.value, _PROCESS_ID.value,
      cpu_collectives=_CPU_COLLECTIVES.value)
  enable_compilation_cache(_CACHE_DIR.value)


def workdir(default_name: str = "run") -> pathlib.Path:
  """The --workdir flag, or ./workdirs/<default_name> when it is not given."""
  return pathlib.Path(_WORKDIR.value or pathlib.Path("workdirs") / default_name)
