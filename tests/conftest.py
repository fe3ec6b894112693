"""Test set-up: 8 fake CPU devices (before jax loads) so sharding is tested everywhere.

One persistent XLA compilation cache per test session, shared by the xdist workers and by
every subprocess a test starts (demos, launchers, the main job): a program compiled by one
of them (the same smoke-size training in a demo, a launcher and a reproduction check) is
loaded, not recompiled, by the others. It changes no result (the same HLO gives the same
executable), only the suite's time; the folder is removed when the session ends. It is
jax's own variable (``JAX_COMPILATION_CACHE_DIR``), not ``launch.common``'s opt-in
``--compilation_cache_dir``, because in-process tests and demos never call
``launch.common.setup``; on CPU the launchers leave jax's setting as they find it.
"""

import os
import shutil
import tempfile

_OWN_CACHE = "JAX_COMPILATION_CACHE_DIR" not in os.environ
if _OWN_CACHE:  # set by the xdist controller before it starts the workers, who inherit it
  os.environ["JAX_COMPILATION_CACHE_DIR"] = tempfile.mkdtemp(prefix="jaxlib_papers_jit_")
  os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0.2")
# Compile settings of the suite (tests and every subprocess they start), which is mostly XLA
# compile time of smoke-size programs; XLA's HLO passes and the math are unchanged:
# - LLVM at -O1 instead of XLA's default -O2: compiles 1.6x faster, the smoke-size runs are
#   no slower (the identifiability and fsbm demos: 75 -> 46 s and 45 -> 42 s cold);
# - XLA:CPU's classic elemental emitters instead of its newer MLIR fusion emitters:
#   compile time halves again (identifiability demo 69 -> 34 s, fsbm demo 74 -> 53 s, of
#   which XLA compilation 51 -> 21 s and 38 -> 23 s); compiled steps run 20-65% slower
#   (the FSBM opinion smoke step 1.6 -> 2.7 s), which smoke sizes barely feel. Probed
#   first: a jaxlib without the flag aborts on an unknown XLA flag, so it is used only
#   where it is accepted.
# Both demos print identical results either way.
_FAST_COMPILE = "--xla_backend_optimization_level=1"
_CLASSIC_EMITTERS = "--xla_cpu_use_fusion_emitters=false"


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


_flags = os.environ.get("XLA_FLAGS", "").split() + ["--xla_force_host_platform_device_count=8"]
if _FAST_COMPILE not in _flags:  # the xdist workers inherit the controller's flags
  _flags += [_FAST_COMPILE] + ([_CLASSIC_EMITTERS] if _accepted(_CLASSIC_EMITTERS) else [])
os.environ["XLA_FLAGS"] = " ".join(_flags)
import jaxlib_papers  # noqa: E402,F401  (sets the XLA:CPU scheduler work-around first)

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("MPLBACKEND", "Agg")

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
    shutil.rmtree(os.environ["JAX_COMPILATION_CACHE_DIR"], ignore_errors=True)


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
