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


@pytest.fixture(scope="session")
def shared_data() -> pathlib.Path | None:
  """``../shared/data`` when present (CI has it), else None."""
  return SHARED_DATA if SHARED_DATA.is_dir() else None
