"""Registry of reproduction checks: each paper registers one, ``launch.reproduce`` runs them.

A check is ``fn(ctx: Context) -> list[Claim]``: it runs the experiment at ``ctx.preset``
("cpu" for the report, "smoke" in tests), saves plots under ``ctx.report_dir`` and says,
claim by claim, the paper's number, ours, and whether the claim holds.
"""

from __future__ import annotations

import dataclasses
import importlib
import pathlib
import pkgutil
import time
from collections.abc import Callable

from jaxlib_papers.core import config as config_lib
from jaxlib_papers.core import datasets


def check_modules() -> list[str]:
  """The core's own check, then ``jaxlib_papers.<paper>.reproduce`` of every package that
  has one, in alphabetical order: a new paper is found by its folder, core names none."""
  import jaxlib_papers  # pylint: disable=g-import-not-at-top
  def has_check(info) -> bool:  # looks at the folder: importing the package is not needed
    folder = pathlib.Path(info.module_finder.path) / info.name
    return any(m.name == "reproduce" for m in pkgutil.iter_modules([str(folder)]))
  found = sorted(info.name for info in pkgutil.iter_modules(jaxlib_papers.__path__)
                 if info.ispkg and info.name != "core" and has_check(info))
  return ["jaxlib_papers.core.selfcheck"] + [f"jaxlib_papers.{n}.reproduce" for n in found]


@dataclasses.dataclass(frozen=True)
class Claim:
  claim: str          # what is asserted, with its threshold
  paper: str          # the paper's (or the official code's) number, or "-"
  ours: str           # our measured number(s)
  holds: bool | None  # does our number meet the claim's threshold; None: not run (see
  #                     not_run: ``ours`` says why), counted apart from held and missed
  data: str = "generated"  # Context.data_label: "shared: <file>", "fetched: <file>",
  #                           "generated (offline: <file>)" or "generated"
  why: str = ""  # one line: why the claim misses when it does (its category and the
  #                measurement behind it, written up in seeds/<paper>.md); the report shows
  #                it beside "NO" only, so a check may pass it whatever ``holds`` is

  @classmethod
  def not_run(cls, claim: str, paper: str, reason: str, data: str) -> "Claim":
    """A claim the check could not run here (e.g. its measured data set is not available
    offline and nothing generated can stand in for it): the report keeps its row, says why,
    and counts it neither as held nor as missed."""
    return cls(claim, paper, f"not run: {reason}", None, data)


def tally(holds: list[bool | None]) -> str:
  """``"3/4 claims hold"``, plus ``", 1 not run"`` when some claims could not run."""
  ran = [h for h in holds if h is not None]
  text = f"{sum(bool(h) for h in ran)}/{len(ran)} claims hold"
  return text + (f", {len(holds) - len(ran)} not run" if len(ran) < len(holds) else "")


@dataclasses.dataclass
class Context:
  """What a check runs with. ``data_dir``: the user's local folder of official files (laid
  out like ``<data_dir>/ruot/emt.csv``); None means ``$JAXLIB_PAPERS_DATA_DIR`` or none, and
  files are then taken from the cache or downloaded (see ``core/datasets.py``)."""
  preset: str
  report_dir: pathlib.Path
  data_dir: pathlib.Path | None = None
  seed: int = 0
  part: str | None = None  # one of the check's registered parts, or None: all of them
  name: str = "check"      # the check's name, for progress lines
  _data: dict = dataclasses.field(default_factory=dict, init=False, repr=False)
  _start: float = dataclasses.field(default_factory=time.perf_counter, init=False,
                                    repr=False)

  def progress(self, message: str) -> None:
    """Prints one progress line ``[<name>] <message> (<seconds since the start> s)``: a
    check that trains for minutes says where it is."""
    print(f"[{self.name}] {message} ({time.perf_counter() - self._start:.0f} s)", flush=True)

  def runs(self, part: str) -> bool:
    """Whether this run includes ``part`` of a check registered with ``parts``."""
    return self.part is None or self.part == part

  def __post_init__(self):
    config_lib.check_preset(self.preset)
    self.report_dir = pathlib.Path(self.report_dir)
    self.report_dir.mkdir(parents=True, exist_ok=True)
    if self.data_dir is not None:
      self.data_dir = pathlib.Path(self.data_dir)

  def data_file(self, relative: str, *,
                fallback: str = "using generated data instead") -> pathlib.Path | None:
    """The official file ``relative`` (a ``datasets.REGISTRY`` name, e.g. "ruot/emt.csv"):
    ``data_dir`` first, then the cache, then a checked download. None when it cannot be
    fetched (offline): one line says so and what the caller does instead (``fallback``;
    by default it falls back to generated data). A local file with the wrong sha256 raises
    ``datasets.DataIntegrityError``."""
    if relative not in self._data:
      try:
        path, origin = datasets.locate(relative, self.data_dir)
        self._data[relative] = (path, f"{origin}: {relative}")
      except datasets.DataUnavailable as e:
        print(f"[data] not available, {fallback}: {e}", flush=True)
        self._data[relative] = (None, f"generated (offline: {relative})")
    return self._data[relative][0]

  def data_label(self, relative: str) -> str:
    """The report's data column for ``relative``: "shared: <file>" (``data_dir``), "fetched:
    <file>" (cache or download, sha256 checked) or "generated (offline: <file>)"."""
    self.data_file(relative)
    return self._data[relative][1]


Check = Callable[[Context], list[Claim]]
REGISTRY: dict[str, Check] = {}
# A check's independent parts (``register(parts=...)``): ``launch.reproduce --jobs=N`` runs
# each as its own unit "<check>/<part>", so one long check does not end up alone on a core.
PARTS: dict[str, tuple[str, ...]] = {}
# Measured seconds of each unit ("<check>" or "<check>/<part>") at the ``cpu`` preset, on one
# core (two units at once on 2 cores, each pinned to its own): ``launch.reproduce --jobs=N``
# starts the longest first so the last one does not run alone.
CPU_SECONDS: dict[str, float] = {}
# Unit ("<check>" or "<check>/<part>") -> {preset: extra XLA flags for it} (register).
XLA_FLAGS: dict[str, dict[str, str]] = {}
# For a unit whose cpu run is mostly XLA:CPU compilation of many small programs: the classic
# elemental emitters and LLVM -O1 compile ~1.6x faster and, at these sizes, run as fast
# (measured side by side, 2026-12-02: linear_rl 92 -> 57 s, aerca 83 -> 72 s; ocm and
# identifiability, which are arithmetic-bound, ran slower with them, so they keep XLA's
# defaults). CPU only: the `full` preset on an accelerator keeps XLA's defaults. And LLVM code
# generation in one part instead of a split for parallel threads, which a check process
# pinned to one core runs in turn: ~12% less compile time at -O1 (four smoke programs of ocm
# and identifiability, 4 alternated rounds on one core: faster in each; parameters after
# training bitwise the same). At XLA's default -O2 it bought nothing, so only here.
COMPILE_BOUND_CPU_FLAGS = {
    "cpu": "--xla_cpu_use_fusion_emitters=false --xla_backend_optimization_level=1 "
           "--xla_cpu_parallel_codegen_split_count=1"}


def register(name: str, *, cpu_seconds: float | dict[str, float] | None = None,
             parts: tuple[str, ...] = (),
             xla_flags: dict[str, str | dict[str, str]] | None = None
             ) -> Callable[[Check], Check]:
  """Decorator: ``@register("fsbm", cpu_seconds=300) def check(ctx): ...``.

  Args:
    name: the check's name (``--only=<name>``).
    cpu_seconds: how long the check took at the ``cpu`` preset when last measured (a
      scheduling hint only; checks without one are started after those with one); with
      ``parts``, one figure per part. Today's hints are the seconds of one main job (fresh
      clone, 2 checks at a time on a 2-core machine, 2026-12-03), so the longest-first
      order is that run's.
    parts: names of independent parts of the check (``--only=<name>/<part>`` runs one; the
      check runs those for which ``ctx.runs(part)`` is true and returns their claims in a
      fixed order). Empty: the check is one unit.
    xla_flags: ``{unit: flags}`` (unit: a part's name, or ``name`` itself), extra XLA flags
      measured to speed that unit up, at the ``cpu`` and ``full`` presets (``flags`` a
      string) or at the presets named (``flags`` a ``{preset: string}`` dict, e.g.
      ``COMPILE_BOUND_CPU_FLAGS``). ``launch.reproduce`` then runs the unit in its own
      process with them appended to ``XLA_FLAGS`` (flags are read once, when a process
      starts its backend).
  """
  parts = tuple(parts)
  if isinstance(cpu_seconds, dict) and set(cpu_seconds) != set(parts):
    raise ValueError(f"cpu_seconds of {name!r} must name each of its parts {parts}, got "
                     f"{sorted(cpu_seconds)}")
  xla_flags = dict(xla_flags or {})
  if set(xla_flags) - set(parts or (name,)):
    raise ValueError(f"xla_flags of {name!r} must name its parts {parts or (name,)}, got "
                     f"{sorted(xla_flags)}")

  def wrap(fn: Check) -> Check:
    REGISTRY[name] = fn
    if parts:
      PARTS[name] = parts
    if isinstance(cpu_seconds, dict):
      CPU_SECONDS.update({f"{name}/{p}": float(s) for p, s in cpu_seconds.items()})
    elif cpu_seconds is not None:
      CPU_SECONDS[name] = float(cpu_seconds)
    XLA_FLAGS.update({(name if unit == name else f"{name}/{unit}"):
                      dict(flags) if isinstance(flags, dict) else {"cpu": flags, "full": flags}
                      for unit, flags in xla_flags.items()})
    return fn
  return wrap


def units(names: list[str]) -> list[str]:
  """The units ``launch.reproduce --jobs`` runs for ``names`` (registered checks, imported):
  a check with parts becomes "<check>/<part>" per part, any other stays itself."""
  out = []
  for name in names:
    check, _, part = name.partition("/")
    out += ([f"{check}/{p}" for p in PARTS[check]] if check in PARTS and not part
            else [name])
  return out


def check_names() -> list[str]:
  """The names of the checks of :func:`check_modules`, in their order, without importing
  them ("core", then each paper's folder name: a paper registers its check under its own
  name, ``tests/test_launchers_and_demos.py`` holds every package to it). ``launch.reproduce``
  rejects an unknown ``--only`` with it before importing every package."""
  return ["core" if m.endswith(".selfcheck") else m.split(".")[1] for m in check_modules()]


def load_all() -> dict[str, Check]:
  """Imports every module of :func:`check_modules`; returns the registry."""
  for module in check_modules():
    importlib.import_module(module)
  return REGISTRY
