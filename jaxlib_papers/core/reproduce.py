"""Registry of reproduction checks: each paper registers one, ``launch.reproduce`` runs them.

A check is ``fn(ctx: Context) -> list[Claim]``: it runs the experiment at ``ctx.preset``
("cpu" for the report, "smoke" in tests), saves plots under ``ctx.report_dir`` and says,
claim by claim, the paper's number, ours, and whether the claim holds.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import pathlib
import pkgutil
from collections.abc import Callable

from jaxlib_papers.core import config as config_lib


def check_modules() -> list[str]:
  """The core's own check, then ``jaxlib_papers.<paper>.reproduce`` of every package that
  has one, in alphabetical order: a new paper is found by its folder, core names none."""
  import jaxlib_papers  # pylint: disable=g-import-not-at-top
  found = sorted(
      info.name for info in pkgutil.iter_modules(jaxlib_papers.__path__)
      if info.ispkg and info.name != "core"
      and importlib.util.find_spec(f"jaxlib_papers.{info.name}.reproduce") is not None)
  return ["jaxlib_papers.core.selfcheck"] + [f"jaxlib_papers.{n}.reproduce" for n in found]


@dataclasses.dataclass(frozen=True)
class Claim:
  claim: str          # what is asserted, with its threshold
  paper: str          # the paper's (or the official code's) number, or "-"
  ours: str           # our measured number(s)
  holds: bool         # does our number meet the claim's threshold
  data: str = "generated"  # "shared: <file>" or "generated"


@dataclasses.dataclass
class Context:
  preset: str
  report_dir: pathlib.Path
  data_dir: pathlib.Path | None = None
  seed: int = 0

  def __post_init__(self):
    config_lib.check_preset(self.preset)
    self.report_dir = pathlib.Path(self.report_dir)
    self.report_dir.mkdir(parents=True, exist_ok=True)
    if self.data_dir is not None:
      self.data_dir = pathlib.Path(self.data_dir)

  def data_file(self, relative: str) -> pathlib.Path | None:
    """``data_dir / relative`` if it exists, else None (the caller falls back to generated)."""
    if self.data_dir is None:
      return None
    path = self.data_dir / relative
    return path if path.is_file() else None


Check = Callable[[Context], list[Claim]]
REGISTRY: dict[str, Check] = {}


def register(name: str) -> Callable[[Check], Check]:
  """Decorator: ``@register("fsbm") def check(ctx): ...``."""
  def wrap(fn: Check) -> Check:
    REGISTRY[name] = fn
    return fn
  return wrap


def load_all() -> dict[str, Check]:
  """Imports every module of :func:`check_modules`; returns the registry."""
  for module in check_modules():
    importlib.import_module(module)
  return REGISTRY
