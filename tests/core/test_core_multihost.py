"""Two processes on 127.0.0.1 (gloo CPU collectives, 2 fake devices each) train a real kernel
of the suite; the result equals one process over 4 devices, and the checkpoint they leave
resumes in a single process."""

import os
import pathlib
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
WORKER = pathlib.Path(__file__).with_name("multihost_worker.py")
TIMEOUT = 180


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def _env():
  env = dict(os.environ)
  # The suite's compile settings (tests/conftest.py) at the in-process tests' LLVM -O0 (a
  # tiny kernel: compile-bound); the worker sets its device count.
  env["XLA_FLAGS"] = " ".join(
      f.replace("--xla_backend_optimization_level=1", "--xla_backend_optimization_level=0")
      for f in env.get("XLA_FLAGS", "").split()
      if not f.startswith("--xla_force_host_platform_device_count"))
  env.update({"PYTHONPATH": str(REPO), "JAX_PLATFORMS": "cpu", "OPENBLAS_NUM_THREADS": "1"})
  return env


def _launch(nproc, ndev, workdir, steps, out) -> dict[int, list[np.ndarray]]:
  """Runs the worker in ``nproc`` processes to each step count of ``steps`` in turn;
  returns {step count: parameter leaves}."""
  port = _free_port()
  log_paths = [pathlib.Path(f"{out}.{i}.log") for i in range(nproc)]
  procs = [subprocess.Popen(
      [sys.executable, str(WORKER), str(i), str(nproc), str(port), str(ndev), str(workdir),
       ",".join(map(str, steps)), str(out)],
      env=_env(), stdout=open(log_paths[i], "w"), stderr=subprocess.STDOUT)
      for i in range(nproc)]
  deadline = time.monotonic() + TIMEOUT
  try:
    # poll: a process that dies leaves its peer blocked in a collective, so stop them all
    while any(p.poll() is None for p in procs):
      if any(p.returncode not in (None, 0) for p in procs):
        break
      if time.monotonic() > deadline:
        pytest.fail(f"processes still running after {TIMEOUT} s; killed")
      time.sleep(0.2)
  finally:
    for p in procs:
      if p.poll() is None:
        p.kill()
        p.wait()
  logs = [path.read_text() for path in log_paths]
  for i, (p, log) in enumerate(zip(procs, logs)):
    assert p.returncode == 0, f"process {i} failed (exit {p.returncode}):\n{log[-4000:]}"
  def leaves(n):
    with np.load(f"{out}.{n}.npz") as f:
      return [f[f"arr_{i}"] for i in range(len(f.files))]
  return {n: leaves(n) for n in steps}


def test_two_processes_equal_one_and_resume_in_one(tmp_path):
  two = _launch(2, 2, tmp_path / "two", [6], tmp_path / "two")[6]
  # one process over 4 devices: to step 6, then on (resuming its own checkpoint) to step 9;
  # resume == uninterrupted is tests/core/test_core_fault.py's (bit for bit)
  one = _launch(1, 4, tmp_path / "one", [6, 9], tmp_path / "one")
  assert len(two) == len(one[6])
  for a, b in zip(two, one[6]):
    np.testing.assert_allclose(a, b, atol=1e-6, rtol=0)
  # the 2-process checkpoint (step 6) resumes in one process and continues to step 9,
  # landing where the single-process run lands at step 9
  resumed = _launch(1, 4, tmp_path / "two", [9], tmp_path / "resumed")[9]
  for a, b in zip(resumed, one[9]):
    np.testing.assert_allclose(a, b, atol=1e-6, rtol=0)
  assert not all(np.allclose(a, b) for a, b in zip(resumed, one[6]))  # it did train further
