"""Importing the library must not start jax's backend.

XLA reads ``XLA_FLAGS`` once, when the first backend starts. The launchers, the reproduction
and the benchmarks set flags after importing the packages (a check's registered flags, fake
CPU devices for the sharded rows), so an import that computes an array at module level
(``float(jnp.log(...))`` for a constant) silently freezes the flags of the whole process.
"""

import pkgutil
import subprocess
import sys

import jaxlib_papers


def test_importing_every_module_leaves_the_backend_unstarted():
  modules = sorted(m.name for m in pkgutil.walk_packages(jaxlib_papers.__path__,
                                                         "jaxlib_papers."))
  code = ("import importlib, sys\n"
          "from jax._src import xla_bridge\n"
          "started = []\n"
          "for name in sys.argv[1:]:\n"
          "  importlib.import_module(name)\n"
          "  if xla_bridge.backends_are_initialized():\n"
          "    started.append(name)\n"
          "    break\n"
          "print('STARTED', *started)\n")
  out = subprocess.run([sys.executable, "-c", code, *modules], capture_output=True, text=True,
                       timeout=300, check=True)
  assert "STARTED" in out.stdout, out.stderr[-2000:]
  assert out.stdout.split("STARTED", 1)[1].split() == [], (
      f"importing {out.stdout.split('STARTED', 1)[1].split()} started jax's backend "
      f"(of {len(modules)} modules imported in order)")
