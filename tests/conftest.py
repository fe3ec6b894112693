"""Test set-up: 8 fake CPU devices (before jax loads) so sharding is tested everywhere.

Compile settings. The suite is mostly XLA:CPU compile time of small programs; XLA's HLO
passes and the math are unchanged by any of these, only LLVM's work and the emitters:
- in this process (the xdist workers: the in-process tests, small shapes, compile-bound):
  LLVM at -O0. ``tests/ocm``, ``tests/cca`` and ``tests/aerca`` in one process: 171 s at -O1,
  127 s at -O0;
- in every subprocess a test starts (demos, launchers, the main job, multi-process workers:
  smoke-size training, where the compiled steps run long enough to matter): LLVM at -O1
  (1.6x faster compiles than XLA's default -O2, the smoke runs no slower; -O0 doubled the
  FSBM smoke check, 58 -> 118 s, by slowing its steps), except the compile-bound demos and
  the identifiability check, which set -O0 themselves (``tests/test_launchers_and_demos.py``);
- everywhere: XLA:CPU's classic elemental emitters instead of its newer MLIR fusion
  emitters: compile time halves again (identifiability demo 69 -> 34 s, fsbm demo 74 -> 53 s)
  while compiled steps run 20-65% slower, which smoke sizes barely feel;
- everywhere: LLVM code generation in one piece (``--xla_cpu_parallel_codegen_split_count=1``;
  XLA:CPU splits a module in parts to compile them on parallel threads, which a worker
  pinned to one core runs in turn): compile-bound programs compile faster (four programs
  of the ocm and identifiability smoke checks, compiled alone, alternated rounds on one
  core: at -O0 median 3.40 -> 2.78 s in 5 rounds, at -O1 ~10.7 -> ~9.4 s in 4, faster in
  every round; trained parameters bitwise the same; the whole suite 750 -> 714 s, one run
  each).
Probed first: a jaxlib without a flag aborts on an unknown XLA flag, so each is used only
where accepted.
XLA reads ``XLA_FLAGS`` once, when this process's backend starts: the -O0 flags are set,
the backend started, then ``XLA_FLAGS`` holds the -O1 flags that the subprocesses inherit.

One persistent XLA compilation cache per test session (a temporary folder, removed at the
end), jax's own ``JAX_COMPILATION_CACHE_DIR`` (in-process tests and demos never call
``launch.common.setup``), in two parts: one shared by the xdist workers, one by every
subprocess a test starts (a demo, a launcher and a reproduction check that run the same
smoke-size training load it instead of recompiling: the identifiability check, after its
demo, loads every program it needs). The two are apart because their programs are compiled
with different flags (and never match anyway: jax keys a program by the device topology,
8 fake devices here, 1 in a subprocess). It changes no result, only the suite's time.
"""

import os
import shutil
import tempfile

from jaxlib_papers.core import affinity  # imports no jax

# Each xdist worker on its own share of the CPUs, before numpy and jax size their thread
# pools (and every subprocess a test starts inherits it): two unpinned workers on 2 cores
# run four busy XLA threads that spin against each other (``core.affinity``).
_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")
if _WORKER.startswith("gw") and os.environ.get("PYTEST_XDIST_WORKER_COUNT", "").isdigit():
  _count = int(os.environ["PYTEST_XDIST_WORKER_COUNT"])
  affinity.pin(affinity.shares(affinity.available(), _count)[int(_WORKER[2:]) % _count])
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before numpy loads (through jax)
os.environ.setdefault("MPLBACKEND", "Agg")

# The session's cache folder: made by the xdist controller (or a single-process run) and
# inherited by the workers; a JAX_COMPILATION_CACHE_DIR of the user's is used as it is.
_ROOT = os.environ.get("JAXLIB_PAPERS_TEST_JIT_CACHE")
_OWN_CACHE = _ROOT is not None or "JAX_COMPILATION_CACHE_DIR" not in os.environ
if _OWN_CACHE and _ROOT is None:
  _ROOT = os.environ["JAXLIB_PAPERS_TEST_JIT_CACHE"] = tempfile.mkdtemp(
      prefix="jaxlib_papers_jit_")
  os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0.2")
_DEVICES = "--xla_force_host_platform_device_count=8"
_OPT_LEVEL = "--xla_backend_optimization_level="
_CLASSIC_EMITTERS = "--xla_cpu_use_fusion_emitters=false"
_ONE_CODEGEN_PART = "--xla_cpu_parallel_codegen_split_count=1"


def _accepted(flag: str) -> bool:
  import subprocess  # pylint: disable=g-import-not-at-top
  import sys  # pylint: disable=g-import-not-at-top
  env = {**os.environ, "XLA_FLAGS": flag, "JAX_PLATFORMS": "cpu"}
  try:
    probe = subprocess.run([sys.executable, "-c", "import jax; jax.devices()"], env=env,
                           capture_output=True, timeout=120, check=False)
  except (OSError, subprocess.SubprocessError):
    return False
  return probe.returncode == 0


# The workers inherit the controller's flags (emitters probed there once).
_flags = [f for f in os.environ.get("XLA_FLAGS", "").split()
          if not f.startswith((_OPT_LEVEL, _DEVICES.split("=")[0]))]
_missing = [f for f in (_CLASSIC_EMITTERS, _ONE_CODEGEN_PART) if f not in _flags]
if _missing and _accepted(" ".join(_missing)):  # one probe when the jaxlib has both
  _flags += _missing
else:
  _flags += [f for f in _missing if _accepted(f)]
os.environ["XLA_FLAGS"] = " ".join(_flags + [_DEVICES, _OPT_LEVEL + "0"])
import jax  # noqa: E402

import jaxlib_papers  # noqa: E402,F401  (adds the XLA:CPU scheduler work-around first)

if _OWN_CACHE:
  jax.config.update("jax_compilation_cache_dir", os.path.join(_ROOT, "in_process"))
  os.environ["JAX_COMPILATION_CACHE_DIR"] = os.path.join(_ROOT, "subprocesses")
jax.devices()  # this process's backend starts at -O0; the subprocesses get -O1
os.environ["XLA_FLAGS"] = os.environ["XLA_FLAGS"].replace(_OPT_LEVEL + "0", _OPT_LEVEL + "1")

import pathlib  # noqa: E402

import pytest  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"
# Official data files (jaxlib_papers/core/datasets.py): CI lays out a copy beside the
# checkout; tests read it from there and never download (a test that needs a missing file
# skips, and reproduction checks fall back to generated data).
if SHARED_DATA.is_dir():
  os.environ.setdefault("JAXLIB_PAPERS_DATA_DIR", str(SHARED_DATA))
os.environ.setdefault("JAXLIB_PAPERS_DATA_OFFLINE", "1")


# The longest tests (subprocess demos and checks, multi-process runs) go first, so the two
# xdist workers do not end with one of them running alone.
_LONG_FIRST = (
    "test_colab_demo_runs_at_smoke_size", "test_every_check_runs_on_generated_data",
    "test_launchers_resume",
    "identifiability/test_identifiability_reproduce", "test_core_multihost",
    "cca/test_cca_e2e", "cp_fuse/test_cp_fuse_train", "ruot/test_ruot_train",
    "test_core_fault", "identifiability/test_identifiability_kernel", "fsbm/test_fsbm_opinion",
    "ocm/test_ocm_e2e", "fsbm/test_fsbm_train",
)


def pytest_collection_modifyitems(items):
  def rank(item):
    for i, pattern in enumerate(_LONG_FIRST):
      if pattern in item.nodeid:
        return i
    return len(_LONG_FIRST)
  items.sort(key=rank)  # stable: the order within each group is unchanged


def pytest_unconfigure(config):
  del config
  if _OWN_CACHE and "PYTEST_XDIST_WORKER" not in os.environ:
    shutil.rmtree(_ROOT, ignore_errors=True)


@pytest.fixture(scope="session")
def shared_data() -> pathlib.Path | None:
  """``../shared/data`` when present (CI has it), else None."""
  return SHARED_DATA if SHARED_DATA.is_dir() else None


@pytest.fixture
def offline_data(monkeypatch, tmp_path_factory):
  """No official data files: no local folder, an empty cache, downloads off (the fetcher
  raises ``datasets.DataUnavailable`` and checks fall back to generated data)."""
  monkeypatch.delenv("JAXLIB_PAPERS_DATA_DIR", raising=False)
  monkeypatch.delenv("JAXLIB_PAPERS_DATA_URL", raising=False)
  monkeypatch.setenv("JAXLIB_PAPERS_DATA", str(tmp_path_factory.mktemp("empty_data_cache")))
  monkeypatch.setenv("JAXLIB_PAPERS_DATA_OFFLINE", "1")
