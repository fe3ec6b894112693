"""Flags and set-up shared by every launcher.

Single process: no flag needed. Several processes: pass ``--coordinator_address``,
``--num_processes`` and ``--process_id`` (or none of them on a cluster that JAX detects
itself: Cloud TPU, SLURM, Open MPI). ``setup()`` must run before anything touches devices.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import pathlib
import sys
from collections.abc import Callable, Sequence

from absl import app, flags, logging

_WORKDIR = flags.DEFINE_string(
    "workdir", None, "Folder for checkpoints, metrics and results; rerun with the same "
    "folder to resume. Default: a fresh folder under ./workdirs.")
_COORDINATOR = flags.DEFINE_string(
    "coordinator_address", None, "host:port of process 0 for a multi-process run.")
_NUM_PROCESSES = flags.DEFINE_integer("num_processes", None, "Number of processes.")
_PROCESS_ID = flags.DEFINE_integer("process_id", None, "Index of this process.")
_CPU_COLLECTIVES = flags.DEFINE_string(
    "cpu_collectives", None, "CPU collectives across processes, e.g. 'gloo'.")
_LIBRARY_LOGS = flags.DEFINE_bool(
    "library_logs", False, "Show the INFO lines of jax, orbax and absl (hidden by default: "
    "orbax alone writes dozens per checkpoint); the run's own progress lines always show.")
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


def quiet_libraries() -> None:
  """Third-party INFO lines off (``--library_logs`` brings them back); warnings stay."""
  if _LIBRARY_LOGS.value:
    return
  logging.set_verbosity(logging.WARNING)
  import logging as std_logging  # pylint: disable=g-import-not-at-top
  for name in ("jax", "orbax", "absl", "etils", "tensorflow"):
    std_logging.getLogger(name).setLevel(std_logging.WARNING)


def setup() -> None:
  """Quiet library logs, multi-host start-up (when asked for) and the compilation cache."""
  quiet_libraries()
  from jaxlib_papers.core import distributed  # pylint: disable=g-import-not-at-top
  distributed.maybe_initialize(
      _COORDINATOR.value, _NUM_PROCESSES.value, _PROCESS_ID.value,
      cpu_collectives=_CPU_COLLECTIVES.value)
  enable_compilation_cache(_CACHE_DIR.value)


def save_figure(fig, path: pathlib.Path) -> pathlib.Path:
  """Saves a ``core.figures`` figure into the run's folder and says where."""
  from jaxlib_papers.core import figures  # pylint: disable=g-import-not-at-top
  path = figures.save(fig, path)
  print(f"figure: {path}", flush=True)
  return path


def workdir(default_name: str = "run") -> pathlib.Path:
  """The --workdir flag, or ./workdirs/<default_name> when it is not given."""
  return pathlib.Path(_WORKDIR.value or pathlib.Path("workdirs") / default_name)


# --- Configs by package name, from any folder; unknown keys named with the closest ones. ---

PACKAGE_ROOT = pathlib.Path(__file__).resolve().parents[1] / "jaxlib_papers"


def config_file(package: str) -> pathlib.Path:
  """The installed ``jaxlib_papers/<package>/configs/default.py`` (``<package>/<name>``:
  its ``configs/<name>.py``, e.g. ``ocm/digits``)."""
  package, _, name = package.partition("/")
  path = PACKAGE_ROOT / package / "configs" / f"{name or 'default'}.py"
  if not path.is_file():
    known = sorted(f"{p.parent.parent.name}" + ("" if p.stem == "default" else f"/{p.stem}")
                   for p in PACKAGE_ROOT.glob("*/configs/*.py") if p.stem != "__init__")
    raise ValueError(f"--config: no config {package + ('/' + name if name else '')!r}; "
                     f"expected one of {known}")
  return path


def resolve_config(value: str) -> str:
  """``--config`` as a user may write it, as the path ``config_flags`` needs.

  ``fsbm:vneck,cpu`` (a package name) and ``jaxlib_papers/fsbm/configs/default.py:cpu``
  (the repository-relative path, from any folder) both become the installed file's
  absolute path; an existing file is left as it is.
  """
  path, sep, arg = value.partition(":")
  if pathlib.Path(path).expanduser().is_file():
    return value
  if not path.endswith(".py") and path.count("/") <= 1 and "jaxlib_papers" not in path:
    return f"{config_file(path)}{sep}{arg}"
  parts = pathlib.PurePath(path).parts
  if "jaxlib_papers" in parts:
    inside = PACKAGE_ROOT.joinpath(*parts[parts.index("jaxlib_papers") + 1:])
    if inside.is_file():
      return f"{inside}{sep}{arg}"
  return value


def _load(value: str):
  path, _, arg = value.partition(":")
  spec = importlib.util.spec_from_file_location("_launch_config", path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module.get_config(arg) if arg else module.get_config()


def check_overrides(argv: Sequence[str], default: str) -> list[str]:
  """``argv`` with ``--config`` resolved; raises app.UsageError for an unknown key.

  An unknown ``--config.<key>`` (which ``config_flags`` reports as a long traceback) is
  named with the closest valid keys, before any set-up.
  """
  from jaxlib_papers.core import config as config_lib  # pylint: disable=g-import-not-at-top
  out, value = [], default
  for arg in argv:
    if arg.startswith("--config="):
      value = resolve_config(arg.split("=", 1)[1])
      arg = f"--config={value}"
    out.append(arg)
  keys = [a[len("--config."):].split("=", 1)[0] for a in out if a.startswith("--config.")]
  if not keys:
    return out
  config = _load(value)
  valid = set(config_lib.flat_keys(config))
  groups = {k.rsplit(".", 1)[0] for k in valid if "." in k}
  for key in keys:
    if key not in valid and key not in groups:
      raise app.UsageError(
          f"--config.{key}: no such key in {value}; closest: "
          f"{', '.join(config_lib.closest_keys(config, key)) or 'none'} "
          f"(top-level groups: {', '.join(sorted({k.split('.')[0] for k in valid}))})")
  return out


def define_config(package: str, default_arg: str = "smoke"):
  """``--config`` of a launcher, defaulting to the installed package's config file, with
  the shared flags (``--workdir`` ...) shown in the launcher's ``--help``."""
  from ml_collections import config_flags  # pylint: disable=g-import-not-at-top
  holder = config_flags.DEFINE_config_file(
      "config", f"{config_file(package)}:{default_arg}",
      f"{package}'s config: '{package}:<arg>[,<preset>]' (its configs/default.py), or a "
      "config file path with ':<arg>'; override keys with --config.<key>=<value>.")
  flags.adopt_module_key_flags(sys.modules[__name__])
  return holder


def _fail(error: Exception) -> None:
  print(f"{os.path.basename(sys.argv[0])}: {error}", file=sys.stderr)
  sys.exit(2)


def validate_config(package: str) -> None:
  """Checks ``--config`` (overrides applied) against the package's ``CONSTRAINTS``."""
  from jaxlib_papers.core import config as config_lib  # pylint: disable=g-import-not-at-top
  module = importlib.import_module(f"jaxlib_papers.{package}.configs.default")
  constraints = getattr(module, "CONSTRAINTS", None)
  if constraints:
    config_lib.validate(flags.FLAGS["config"].value, constraints)


def main(run: Callable[[list[str]], None], package: str, default_arg: str = "smoke") -> None:
  """``app.run(run)`` with ``--config`` resolved, its override keys and its values checked
  first: a bad key or value exits with status 2 and one message, before any set-up."""
  try:
    sys.argv = check_overrides(sys.argv, f"{config_file(package)}:{default_arg}")
  except (app.UsageError, ValueError) as error:
    _fail(error)

  def checked(argv: list[str]) -> None:
    try:
      validate_config(package)
    except ValueError as error:
      _fail(error)
    run(argv)

  app.run(checked)


# Flags a launcher defines through the functions above are the launcher's key flags.
flags.disclaim_key_flags()
