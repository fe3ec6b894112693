"""core.affinity: CPU shares for processes run side by side."""

import os
import subprocess
import sys

import pytest

from jaxlib_papers.core import affinity


def test_shares_split_the_cpus_disjointly_and_evenly():
  assert affinity.shares([0, 1], 2) == [[0], [1]]
  assert affinity.shares([0, 1, 2, 3, 4], 2) == [[0, 1, 2], [3, 4]]
  assert affinity.shares([3, 5, 6, 9], 3) == [[3, 5], [6], [9]]
  assert affinity.shares([0, 1], 1) == [[0, 1]]
  assert affinity.shares([0], 2) == [[0], [0]]  # fewer CPUs than jobs: no split
  with pytest.raises(ValueError, match="jobs must be >= 1"):
    affinity.shares([0, 1], 0)


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="no CPU affinity here")
def test_pin_restricts_the_process_and_what_it_starts():
  cpu = affinity.available()[-1]
  code = ("import os, subprocess, sys; from jaxlib_papers.core import affinity; "
          f"affinity.pin([{cpu}]); print(sorted(os.sched_getaffinity(0))); "
          "print(subprocess.run([sys.executable, '-c', 'import os; "
          "print(sorted(os.sched_getaffinity(0)))'], capture_output=True, text=True).stdout)")
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=60, check=True).stdout.split()
  assert out == [f"[{cpu}]", f"[{cpu}]"]
