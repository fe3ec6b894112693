"""Test set-up: 8 fake CPU devices (before jax loads) so sharding is tested everywhere."""

import os

os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8").strip()
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
