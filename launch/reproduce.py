r"""Runs every registered reproduction check and writes a report.

  python -m launch.reproduce                       # all checks, cpu preset
  python -m launch.reproduce --only=core,minimax --preset=smoke

Prints a table (check, claim, paper, ours, holds, seconds) and writes
``<report_dir>/report.md`` (+ ``report.json`` and the checks' PNG plots). The official data
files come from ``jaxlib_papers.core.datasets``: ``--data_dir`` (default
``$JAXLIB_PAPERS_DATA_DIR``) wins, then the cache (``$JAXLIB_PAPERS_DATA``, default
``~/.cache/jaxlib_papers/data``), then a download from the pinned upstream commit, checked by
sha256. A file that cannot be fetched (offline) is named on one line and its check falls back
to generated data; the table's data column says which was used ("shared: <file>",
"fetched: <file>", "generated (offline: <file>)" or "generated").
Exits 0 even when a claim does not hold (that is a result); exits 1 when a check crashes.
``--jobs`` (default: 2 on a machine with 2 or more CPUs) runs that many checks at once, each
in its own process on its own share of the CPUs, their output lines prefixed with the
check's name.
"""

from __future__ import annotations

import concurrent.futures
import functools
import json
import os
import pathlib
import queue
import subprocess
import sys
import time
import traceback

from absl import app, flags

from launch import common

_PRESET = flags.DEFINE_enum("preset", "cpu", ["smoke", "cpu", "full"], "Size of the runs.")
_ONLY = flags.DEFINE_list("only", [], "Checks to run (default: all registered).")
_DATA_DIR = flags.DEFINE_string(
    "data_dir", None, "Local folder of the official data files, laid out like "
    "<data_dir>/ruot/emt.csv (default $JAXLIB_PAPERS_DATA_DIR); missing files are fetched.")
_REPORT_DIR = flags.DEFINE_string("report_dir", "reports/reproduce", "Where to write the report.")
_SEED = flags.DEFINE_integer("seed", 0, "Seed of every check.")
_ROWS_OUT = flags.DEFINE_string(
    "rows_out", None, "Internal (--jobs): write the rows as JSON here instead of a report.")
_JOBS = flags.DEFINE_integer(
    "jobs", 0, "Checks run at once, each in its own process (0: min(2, number of CPUs); 1: "
    "all in this process, one after the other).")
_CPUS = flags.DEFINE_list(
    "cpus", [], "Internal (--jobs): the CPU numbers this check's process may run on (its "
    "share of the parent's; XLA's and OpenBLAS's thread pools size themselves to it).")


def data_summary(data_dir: pathlib.Path | None) -> str:
  """Where data files come from, in one line (for the log and the report)."""
  from jaxlib_papers.core import datasets  # pylint: disable=g-import-not-at-top
  source = ("off" if datasets.offline()
            else datasets.url("<file>") if os.environ.get(datasets.ENV_URL)
            else "pinned upstream commits")
  return (f"local folder {data_dir or 'none'}, cache {datasets.cache_dir()}, "
          f"downloads: {source}")


def _cell(text: str) -> str:
  return str(text).replace("|", "\\|").replace("\n", " ")


def launch_order(names: list[str]) -> list[str]:
  """Longest unit first (each check's or part's measured ``cpu_seconds``; units without one
  last, in the given order), so that the parallel processes stay busy to the end."""
  from jaxlib_papers.core import reproduce  # pylint: disable=g-import-not-at-top
  return sorted(names, key=lambda n: -reproduce.CPU_SECONDS.get(n, -1.0))


def unit_xla_flags(name: str, preset: str) -> list[str]:
  """The registered extra XLA flags of unit ``name`` at ``preset`` (none at ``smoke``, which
  is compile-bound) that this process's ``XLA_FLAGS`` lacks."""
  from jaxlib_papers.core import reproduce  # pylint: disable=g-import-not-at-top
  if preset == "smoke":
    return []
  have = os.environ.get("XLA_FLAGS", "").split()
  return [f for f in reproduce.XLA_FLAGS.get(name, {}).get(preset, "").split()
          if f not in have and _xla_accepts(f)]


def use_unit_xla_flags(name: str, preset: str = "cpu") -> list[str]:
  """Appends to this process's ``XLA_FLAGS`` the flags unit ``name`` (``"ocm"``,
  ``"fsbm/stunnel"``) runs with in the reproduction, so that a benchmark times our code as
  the main job runs it; returns them. Call it before jax starts its backend (the first array
  operation), which reads ``XLA_FLAGS`` once; after that it raises instead of silently
  timing XLA's defaults."""
  import importlib  # pylint: disable=g-import-not-at-top

  from jax._src import xla_bridge  # pylint: disable=g-import-not-at-top
  importlib.import_module(f"jaxlib_papers.{name.partition('/')[0]}.reproduce")  # registers
  extra = unit_xla_flags(name, preset)
  if extra and xla_bridge.backends_are_initialized():
    raise RuntimeError(f"use_unit_xla_flags({name!r}): jax's backend has already started, so "
                       f"the flags {extra} would not apply; call it before any jax operation")
  if extra:
    os.environ["XLA_FLAGS"] = " ".join([os.environ.get("XLA_FLAGS", "")] + extra).strip()
  return extra


def benchmark_xla_flags(name: str, mode: str) -> list[str]:
  """A benchmark's ``--xla_flags``: ``"reproduce"`` times ours with unit ``name``'s
  reproduction flags (``use_unit_xla_flags``), ``"default"`` with XLA's own; prints one line
  saying which, returns the flags added."""
  if mode not in ("reproduce", "default"):
    raise ValueError(f"--xla_flags must be 'reproduce' or 'default', got {mode!r}")
  extra = use_unit_xla_flags(name) if mode == "reproduce" else []
  print(f"ours: XLA flags {' '.join(extra) or '(XLA defaults)'}, as "
        + (f"the reproduction runs {name}" if mode == "reproduce"
           else "asked (--xla_flags=default)"), flush=True)
  return extra


def benchmark_cpu_devices(count: int) -> int:
  """A benchmark's ``--devices``: exposes ``count`` CPU devices (XLA's
  ``--xla_force_host_platform_device_count``, one per core is the useful setting), so that
  its sharded rows can split the batch over the cores as the package's train loops split it
  over every device. Call it before jax starts its backend; it raises otherwise, and when
  the backend is not a CPU. Returns ``count``."""
  from jax._src import xla_bridge  # pylint: disable=g-import-not-at-top
  if int(count) < 1:
    raise ValueError(f"--devices must be >= 1; got {count}")
  if count == 1:
    return 1
  if xla_bridge.backends_are_initialized():
    raise RuntimeError("benchmark_cpu_devices: jax's backend has already started; call it "
                       "before any jax operation")
  flag = f"--xla_force_host_platform_device_count={int(count)}"
  os.environ["XLA_FLAGS"] = " ".join([os.environ.get("XLA_FLAGS", ""), flag]).strip()
  import jax  # pylint: disable=g-import-not-at-top
  if jax.default_backend() != "cpu" or len(jax.devices()) != int(count):
    raise RuntimeError(f"--devices={count}: the backend is {jax.default_backend()} with "
                       f"{len(jax.devices())} devices; the flag applies to CPU hosts only")
  print(f"ours, sharded rows: {count} CPU devices ({flag}; this process may use "
        f"{len(os.sched_getaffinity(0))} cores)", flush=True)
  return int(count)


@functools.lru_cache(maxsize=None)
def _xla_accepts(flag: str) -> bool:
  """Whether the installed jaxlib starts with ``flag`` (an unknown XLA flag aborts the
  process; experimental flags come and go between releases): a unit whose flag is not
  accepted runs with XLA's defaults, and the log says so."""
  probe = subprocess.run([sys.executable, "-c", "import jax; jax.devices()"],
                         env={**os.environ, "XLA_FLAGS": flag, "JAX_PLATFORMS": "cpu"},
                         capture_output=True, timeout=300, check=False)
  if probe.returncode != 0:
    print(f"[reproduce] this jaxlib does not accept the XLA flag {flag}; running without it",
          flush=True)
  return probe.returncode == 0


def _run_in_subprocesses(names: list[str], jobs: int, preset: str, data_dir, report_dir,
                         seed: int) -> tuple[list[dict], list[str]]:
  """Each check in its own ``launch.reproduce --only=<check> --jobs=1`` process, ``jobs``
  at a time, each on its own share of the CPUs (``core.affinity``: two unpinned jax
  processes on 2 cores spin against each other, 2.4x slower); their output lines
  are forwarded with the check's name; rows come back through
  ``report_dir/<check>/rows.json``; plots land where a serial run puts them."""
  from jaxlib_papers.core import affinity  # pylint: disable=g-import-not-at-top
  free_shares: queue.Queue = queue.Queue()
  for share in affinity.shares(affinity.available(), min(jobs, len(names))):
    free_shares.put(share)

  def one(name: str) -> tuple[list[dict], bool]:
    share = free_shares.get()  # a worker thread holds one share while its check runs
    try:
      return run_one(name, share)
    finally:
      free_shares.put(share)

  def run_one(name: str, share: list[int]) -> tuple[list[dict], bool]:
    check, _, part = name.partition("/")
    rows_out = report_dir / check / (f"rows_{part}.json" if part else "rows.json")
    rows_out.unlink(missing_ok=True)
    args = [sys.executable, "-m", "launch.reproduce", f"--only={name}", f"--preset={preset}",
            f"--seed={seed}", "--jobs=1", f"--report_dir={report_dir}",
            f"--rows_out={rows_out}", f"--cpus={','.join(map(str, share))}"]
    if data_dir is not None:
      args.append(f"--data_dir={data_dir}")
    env = dict(os.environ)
    extra = unit_xla_flags(name, preset)
    if extra:
      env["XLA_FLAGS"] = " ".join([env.get("XLA_FLAGS", "")] + extra).strip()
      print(f"[{name}] [reproduce] with XLA flags {' '.join(extra)}", flush=True)
    start = time.perf_counter()
    with subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          cwd=pathlib.Path(__file__).resolve().parents[1], env=env) as proc:
      for line in proc.stdout:
        print(f"[{name}] {line}", end="", flush=True)
    if rows_out.is_file():
      rows = json.loads(rows_out.read_text())
      rows_out.unlink()
      return rows, proc.returncode != 0
    return [{"check": check, "claim": f"{name}: process exited with {proc.returncode} (see log)",
             "paper": "-", "ours": "-", "holds": False, "data": "-",
             "seconds": time.perf_counter() - start}], True

  order = launch_order(names)  # the report keeps the given order
  with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
    done = dict(zip(order, pool.map(one, order)))
  results = [done[name] for name in names]
  rows = [row for check_rows, _ in results for row in check_rows]
  return rows, [name for name, (_, crashed) in zip(names, results) if crashed]


class _CompileClock:
  """Seconds jax spent tracing, lowering and compiling (``jax.monitoring`` events), so each
  check's line says how much of its time was compile rather than run."""

  EVENTS = ("/jax/core/compile/jaxpr_trace_duration",
            "/jax/core/compile/jaxpr_to_mlir_module_duration",
            "/jax/core/compile/backend_compile_duration")

  def __init__(self):
    import jax  # pylint: disable=g-import-not-at-top
    self.seconds = 0.0
    jax.monitoring.register_event_duration_secs_listener(self._on_event)

  def _on_event(self, event: str, duration: float, **_) -> None:
    if event in self.EVENTS:
      self.seconds += duration

  def close(self) -> None:
    import jax  # pylint: disable=g-import-not-at-top
    jax.monitoring.unregister_event_duration_listener(self._on_event)


def check_arguments(only: list[str] | None, jobs: int) -> list[str]:
  """The checks to run (``only``, or all; "<check>/<part>" names one part of a check); a
  ValueError naming the argument when ``only`` names no registered check or ``jobs`` < 0.
  Cheap: no package is imported (a part's name is checked once its package is)."""
  from jaxlib_papers.core import reproduce  # pylint: disable=g-import-not-at-top
  known = reproduce.check_names()
  names = list(only) if only else known
  unknown = [n for n in names if n.partition("/")[0] not in known]
  if unknown:
    raise ValueError(f"unknown check(s) {unknown}: registered are {sorted(known)}")
  if jobs < 0:
    raise ValueError(f"--jobs must be >= 0; got {jobs}")
  return names


def run(preset: str = "cpu", only: list[str] | None = None, data_dir=None,
        report_dir="reports/reproduce", seed: int = 0, jobs: int = 1,
        rows_out: str | None = None) -> list[dict]:
  """Runs the checks; returns one row per claim (also written to the report).

  ``jobs > 1`` runs that many checks (or parts of checks) at once, each in its own process
  pinned to its own share of the CPUs (``core.affinity``).
  """
  from jaxlib_papers.core import reproduce  # pylint: disable=g-import-not-at-top
  names = check_arguments(only, jobs)
  registry = reproduce.load_all()
  for name in names:
    check, _, part = name.partition("/")
    if part and part not in reproduce.PARTS.get(check, ()):
      raise ValueError(f"--only={name}: check {check!r} has parts "
                       f"{list(reproduce.PARTS.get(check, ()))}, not {part!r}")
  jobs = jobs or min(2, os.cpu_count() or 1)
  from jaxlib_papers.core import datasets  # pylint: disable=g-import-not-at-top
  data_dir = datasets.local_dir(data_dir)  # --data_dir or $JAXLIB_PAPERS_DATA_DIR, checked
  report_dir = pathlib.Path(report_dir)
  rows, failed = [], []
  clock = _CompileClock() if names else None
  units = reproduce.units(names) if jobs > 1 else names
  # A unit with registered XLA flags runs in its own process, started with them.
  flagged = any(unit_xla_flags(u, preset) for u in reproduce.units(names))
  if flagged:
    units = reproduce.units(names)
  print(f"[reproduce] preset={preset} checks={names} jobs={min(jobs, len(units))}", flush=True)
  print(f"[reproduce] data: {data_summary(data_dir)}", flush=True)
  if (len(units) > 1 and jobs > 1) or flagged:
    rows, failed = _run_in_subprocesses(units, jobs, preset, data_dir, report_dir, seed)
    names = []
  for name in names:
    check, _, part = name.partition("/")
    ctx = reproduce.Context(preset=preset, report_dir=report_dir / check,
                            data_dir=data_dir, seed=seed, part=part or None, name=check)
    start, compile_start = time.perf_counter(), clock.seconds
    print(f"[reproduce] running {name} ...", flush=True)
    try:
      claims = registry[check](ctx)
    except Exception:  # pylint: disable=broad-except
      traceback.print_exc()
      failed.append(name)
      rows.append({"check": check, "claim": f"{name} crashed (see log)", "paper": "-",
                   "ours": "-", "holds": False, "data": "-",
                   "seconds": time.perf_counter() - start})
      continue
    seconds = time.perf_counter() - start
    for i, claim in enumerate(claims):
      row = {"check": check, **claim.__dict__, "seconds": seconds if i == 0 else None}
      row["holds"] = None if row["holds"] is None else bool(row["holds"])
      rows.append(row)
    print(f"[reproduce] {name}: {reproduce.tally([c.holds for c in claims])} "
          f"({seconds:.1f} s, of which {clock.seconds - compile_start:.1f} s tracing and "
          "compiling)", flush=True)
  if clock is not None:
    clock.close()
  if rows_out:  # a check run on behalf of a parallel parent: rows only
    pathlib.Path(rows_out).parent.mkdir(parents=True, exist_ok=True)
    pathlib.Path(rows_out).write_text(json.dumps(rows))
  else:
    _write_report(rows, report_dir, preset, data_summary(data_dir))
  if failed:
    raise RuntimeError(f"checks crashed: {failed}")
  return rows


_HOLDS = {True: "yes", False: "NO", None: "not run"}


def _holds_cell(row: dict) -> str:
  """"yes", "not run", "NO", or "NO: <why>" for a missed claim whose check says why."""
  why = row.get("why") or ""
  return f"NO: {why}" if row["holds"] is False and why else _HOLDS[row["holds"]]


def _write_report(rows, report_dir: pathlib.Path, preset, data: str) -> None:
  """``report.md`` (the claims table, a line of totals, the plots) and ``report.json``."""
  from jaxlib_papers.core import reproduce  # pylint: disable=g-import-not-at-top
  report_dir.mkdir(parents=True, exist_ok=True)
  header = "| check | claim | paper | ours | holds | data | seconds |"
  lines = [f"# Reproduction report (preset `{preset}`)", "",
           f"Data: {data}", "",
           header, "|---|---|---|---|---|---|---|"]
  for r in rows:
    secs = "" if r["seconds"] is None else f"{r['seconds']:.1f}"
    lines.append(f"| {r['check']} | {_cell(r['claim'])} | {_cell(r['paper'])} | "
                 f"{_cell(r['ours'])} | {_cell(_holds_cell(r))} | {_cell(r['data'])} "
                 f"| {secs} |")
  total = reproduce.tally([r["holds"] for r in rows])
  lines += ["", f"All checks: {total}."]
  plots = sorted(report_dir.rglob("*.png"))
  if plots:
    lines += ["", "## Plots", ""]
    lines += [f"![{p.stem}]({p.relative_to(report_dir)})" for p in plots]
  (report_dir / "report.md").write_text("\n".join(lines) + "\n")
  (report_dir / "report.json").write_text(json.dumps(rows, indent=1))
  print("\n".join(lines[4:]), flush=True)
  print(f"[reproduce] all checks: {total}", flush=True)
  print(f"[reproduce] report written to {report_dir / 'report.md'}", flush=True)


def main(argv):
  del argv
  from jaxlib_papers.core import affinity  # pylint: disable=g-import-not-at-top
  affinity.pin(_CPUS.value)  # first: before numpy / jax size their thread pools
  try:
    check_arguments(_ONLY.value, _JOBS.value)  # a typo fails in a second, before set-up
    common.setup()
    run(_PRESET.value, _ONLY.value, _DATA_DIR.value, _REPORT_DIR.value, _SEED.value,
        _JOBS.value, _ROWS_OUT.value)
  except (RuntimeError, ValueError) as e:
    print(f"[reproduce] {e}", file=sys.stderr)
    sys.exit(1)


if __name__ == "__main__":
  app.run(main)
