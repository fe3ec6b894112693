"""Empty stand-in modules for the official code's imports that its timed or measured paths
never use (``ipdb``, ``torchvision``, ``pytorch_lightning``, ...), shared by the scripts
here that import an official PyTorch checkout (``fsbm.py``, ``fsbm_gsbm_official.py``)."""

from __future__ import annotations

import importlib.util
import sys
import types

_STAND_INS: set[str] = set()  # top-level names replaced by empty modules


def stand_in(name: str, *, force: bool = False, **attrs) -> None:
  """An empty module ``name`` (and its parents) in sys.modules with ``attrs`` set on it,
  unless its top-level package is installed (then the official code gets the real one);
  ``force``: the stand-in even then (a driver that needs, e.g., a plain base class)."""
  top = name.split(".")[0]
  if top not in _STAND_INS:
    if not force and importlib.util.find_spec(top) is not None:
      return
    _STAND_INS.add(top)
  parts = name.split(".")
  for i in range(1, len(parts) + 1):
    full = ".".join(parts[:i])
    if full not in sys.modules:
      sys.modules[full] = types.ModuleType(full)
      if i > 1:
        setattr(sys.modules[".".join(parts[:i - 1])], parts[i - 1], sys.modules[full])
  for key, value in attrs.items():
    setattr(sys.modules[name], key, value)
