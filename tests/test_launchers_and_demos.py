"""End to end through the command line: launch.reproduce, and every Colab demo at smoke size."""

import json
import os
import pathlib
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]
DEMOS = sorted((REPO / "colab").glob("*.py"))
_OPT_LEVEL = "--xla_backend_optimization_level="
# The subprocesses compile at LLVM -O1 (tests/conftest.py). These demos keep it: their smoke
# programs are the ones the offline main-job test's checks compile (the compilation cache is
# keyed by the flags, so they are served from it), and fsbm's steps run long enough that -O0
# doubles it; sae_split's splitter runs 400 solver iterations twice, 24.5 -> 10.7 s at -O1
# (two runs each, one core, 2026-12-04). The other demos are compile-bound and take ~20%
# less at -O0 (identifiability 32 -> 24 s, ocm 34 -> 27 s alone; re-measured 2026-12-04 for
# the nine others: 15-40% less at -O0 each).
_DEMOS_AT_O1 = ("fsbm", "linear_rl", "minimax", "ruot", "sae_split")


def _at_o0(env):
  env["XLA_FLAGS"] = env.get("XLA_FLAGS", "").replace(_OPT_LEVEL + "1", _OPT_LEVEL + "0")
  return env


def _env():
  env = dict(os.environ)
  env.update({"MPLBACKEND": "Agg", "JAXLIB_PAPERS_DEMO_PRESET": "smoke",
              "JAXLIB_PAPERS_CACHE": "none", "PYTHONPATH": str(REPO)})
  # The command-line runs see the machine as a user does (one CPU device), not the 8 fake
  # devices of the in-process tests: 8 fake devices on 2 cores in two concurrent check
  # processes deadlocked XLA:CPU inside a sharded train step (identifiability, once).
  env["XLA_FLAGS"] = " ".join(
      f for f in env.get("XLA_FLAGS", "").split()
      if not f.startswith("--xla_force_host_platform_device_count"))
  return env


def _checks_to_run_offline() -> list[str]:
  """The checks whose offline fallback this file must cover: those that read official data
  files (``ctx.data_file``) and those whose package tests do not run their smoke check
  already (``tests/<paper>/`` never mentions ``reproduce``)."""
  names = ["core"]
  for module in sorted((REPO / "jaxlib_papers").glob("*/reproduce.py")):
    paper = module.parent.name
    reads_data = "ctx.data_file(" in module.read_text()
    own_tests = [t for t in (REPO / "tests" / paper).glob("test_*.py")
                 if "reproduce" in t.read_text()]
    if reads_data or not own_tests:
      names.append(paper)
  return names


def test_reproduce_rejects_unknown_check(tmp_path):
  out = subprocess.run(
      [sys.executable, "-m", "launch.reproduce", "--only=nosuchpaper", "--preset=smoke",
       f"--report_dir={tmp_path}"],
      cwd=REPO, env=_env(), capture_output=True, text=True, timeout=120)
  assert out.returncode != 0
  assert "unknown check(s) ['nosuchpaper']" in out.stderr


def test_reproduce_rejects_unknown_part(tmp_path):
  from launch import reproduce as launcher  # pylint: disable=g-import-not-at-top
  with pytest.raises(ValueError, match=r"--only=fsbm/nosuch: check 'fsbm' has parts"):
    launcher.run("smoke", ["fsbm/nosuch"], report_dir=tmp_path, jobs=1)


@pytest.mark.parametrize("demo", DEMOS, ids=[d.stem for d in DEMOS])
def test_colab_demo_runs_at_smoke_size_and_notebook_is_paired(demo, tmp_path):
  import jupytext  # pylint: disable=g-import-not-at-top
  notebook = demo.with_suffix(".ipynb")
  assert notebook.exists(), f"{notebook.name} missing: run jupytext --to ipynb {demo}"
  py_cells = [c.source for c in jupytext.read(demo).cells]
  nb_cells = [c.source for c in jupytext.read(notebook).cells]
  assert py_cells == nb_cells, f"{notebook.name} is out of sync with {demo.name}"
  env = _env() if demo.stem in _DEMOS_AT_O1 else _at_o0(_env())
  out = subprocess.run([sys.executable, str(demo)], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=600)
  assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]


@pytest.mark.parametrize("demo", DEMOS, ids=[d.stem for d in DEMOS])
def test_colab_notebook_installs_the_suite_and_has_outputs(demo):
  # Opens in Colab: the first code cell installs the package where it is not importable,
  # and GitHub readers see the figures of a smoke-size run without running anything.
  notebook = json.loads(demo.with_suffix(".ipynb").read_text())
  code = [c for c in notebook["cells"] if c["cell_type"] == "code"]
  first = "".join(code[0]["source"])
  assert 'importlib.util.find_spec("jaxlib_papers") is None' in first, first
  assert "pip" in first and "install" in first, first
  outputs = [o for c in code for o in c.get("outputs", [])]
  images = [o for o in outputs if "image/png" in o.get("data", {})]
  assert images, f"{demo.with_suffix('.ipynb').name} has no figure outputs: run it (README)"
  assert not [o for o in outputs if o.get("output_type") == "error"]


def test_method_launcher_with_config_override(tmp_path):
  out = subprocess.run(
      [sys.executable, "-m", "launch.minimax",
       "--config=jaxlib_papers/minimax/configs/default.py:smoke",
       "--config.problem.kind=fairness", f"--workdir={tmp_path}"],
      cwd=REPO, env=_env(), capture_output=True, text=True, timeout=300)
  assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
  results = json.loads((tmp_path / "results.json").read_text())
  assert "fairness" in json.dumps(results)


def test_launcher_rejects_unknown_preset(tmp_path):
  out = subprocess.run(
      [sys.executable, "-m", "launch.minimax",
       "--config=jaxlib_papers/minimax/configs/default.py:huge", f"--workdir={tmp_path}"],
      cwd=REPO, env=_env(), capture_output=True, text=True, timeout=120)
  assert out.returncode != 0
  assert "unknown preset 'huge'" in out.stderr


def test_parallel_checks_start_longest_first():
  from jaxlib_papers.core import reproduce  # pylint: disable=g-import-not-at-top
  from launch import reproduce as launcher  # pylint: disable=g-import-not-at-top
  registry = reproduce.load_all()
  units = reproduce.units(list(registry))
  assert "fsbm/opinion" in units and "fsbm" not in units  # a check with parts is split
  assert reproduce.units(["fsbm/vneck", "core"]) == ["fsbm/vneck", "core"]
  order = launcher.launch_order(units)
  assert sorted(order) == sorted(units)
  known = [n for n in order if n in reproduce.CPU_SECONDS]
  assert [reproduce.CPU_SECONDS[n] for n in known] == sorted(
      (reproduce.CPU_SECONDS[n] for n in known), reverse=True)
  assert order[:len(known)] == known  # checks without a measured time come last


def test_report_keeps_a_claim_that_could_not_run_apart_from_held_and_missed(tmp_path):
  """A claim a check could not run (measured data, offline) keeps its row with the reason;
  the totals count it neither as held nor as missed."""
  from jaxlib_papers.core import reproduce  # pylint: disable=g-import-not-at-top
  from launch import reproduce as launcher  # pylint: disable=g-import-not-at-top
  claims = [reproduce.Claim("a <= 1", "1", "0.5", True, why="budget: unused when held"),
            reproduce.Claim("b <= 1", "1", "2.0", False),
            reproduce.Claim("d <= 1", "1", "3.0", False, why="budget: holds at 2x steps"),
            reproduce.Claim.not_run("c <= 1", "1", "file x offline", "none (offline: x)")]
  assert reproduce.tally([c.holds for c in claims]) == "1/3 claims hold, 1 not run"
  assert reproduce.tally([True, False]) == "1/2 claims hold"
  rows = [{"check": "k", **c.__dict__, "seconds": None} for c in claims]
  launcher._write_report(rows, tmp_path, "cpu", "test")  # pylint: disable=protected-access
  table = (tmp_path / "report.md").read_text().splitlines()
  cells = [line.split(" | ")[4] for line in table if line.startswith("| k |")]
  # A missed claim's row says why beside NO when its check says; a held one never does.
  assert cells == ["yes", "NO", "NO: budget: holds at 2x steps", "not run"]
  assert "| not run: file x offline | not run | none (offline: x) |" in "\n".join(table)
  assert "All checks: 1/3 claims hold, 1 not run." in table
  assert [r["holds"] for r in json.loads((tmp_path / "report.json").read_text())] == [
      True, False, False, None]


def test_units_with_registered_xla_flags_get_them_in_their_own_process(monkeypatch):
  """A unit's registered XLA flags apply at cpu / full (not smoke), once: a process that
  already has them runs the unit itself; a flag naming no part is rejected."""
  from jaxlib_papers.core import reproduce  # pylint: disable=g-import-not-at-top
  from launch import reproduce as launcher  # pylint: disable=g-import-not-at-top
  reproduce.load_all()
  monkeypatch.setattr(launcher, "_xla_accepts", lambda flag: True)
  flag = reproduce.XLA_FLAGS["fsbm/stunnel"]["cpu"]
  monkeypatch.setenv("XLA_FLAGS", "--xla_backend_optimization_level=1")
  assert launcher.unit_xla_flags("fsbm/stunnel", "cpu") == [flag]
  assert launcher.unit_xla_flags("fsbm/stunnel", "full") == [flag]
  assert launcher.unit_xla_flags("fsbm/stunnel", "smoke") == []
  # CPU-only flags (a dict by preset): none at full.
  monkeypatch.setenv("XLA_FLAGS", "")
  assert launcher.unit_xla_flags("linear_rl", "cpu") == (
      reproduce.COMPILE_BOUND_CPU_FLAGS["cpu"].split())
  assert launcher.unit_xla_flags("linear_rl", "full") == []
  monkeypatch.setenv("XLA_FLAGS", "--xla_backend_optimization_level=1")
  assert launcher.unit_xla_flags("fsbm/opinion", "cpu") == []
  monkeypatch.setenv("XLA_FLAGS", f"--xla_backend_optimization_level=1 {flag}")
  assert launcher.unit_xla_flags("fsbm/stunnel", "cpu") == []
  monkeypatch.setattr(launcher, "_xla_accepts", lambda flag: False)  # an older jaxlib
  monkeypatch.setenv("XLA_FLAGS", "")
  assert launcher.unit_xla_flags("fsbm/stunnel", "cpu") == []
  with pytest.raises(ValueError, match="xla_flags"):
    reproduce.register("no_such_check", parts=("a",), xla_flags={"b": flag})


def test_benchmarks_get_a_units_flags_only_before_jax_starts(monkeypatch):
  """``use_unit_xla_flags`` (the benchmarks time ours with the reproduction's flags) refuses
  once jax's backend has started, since the flags would silently not apply."""
  import jax  # pylint: disable=g-import-not-at-top

  from launch import reproduce as launcher  # pylint: disable=g-import-not-at-top
  jax.devices()  # the backend has started
  monkeypatch.setattr(launcher, "_xla_accepts", lambda flag: True)
  monkeypatch.setenv("XLA_FLAGS", "")
  assert launcher.use_unit_xla_flags("fsbm/stunnel", "smoke") == []  # smoke: no flags
  with pytest.raises(RuntimeError, match="already started"):
    launcher.use_unit_xla_flags("fsbm/stunnel", "cpu")
  assert os.environ["XLA_FLAGS"] == ""


def test_benchmark_cpu_devices_only_before_jax_starts(monkeypatch):
  """``benchmark_cpu_devices`` (a benchmark's ``--devices``) refuses once the backend has
  started, leaving XLA_FLAGS as it was, accepts 1 as a no-op, rejects < 1; in a fresh
  process it exposes the devices asked for."""
  import jax  # pylint: disable=g-import-not-at-top

  from launch import reproduce as launcher  # pylint: disable=g-import-not-at-top
  jax.devices()
  monkeypatch.setenv("XLA_FLAGS", "")
  assert launcher.benchmark_cpu_devices(1) == 1
  with pytest.raises(ValueError, match="--devices"):
    launcher.benchmark_cpu_devices(0)
  with pytest.raises(RuntimeError, match="already started"):
    launcher.benchmark_cpu_devices(2)
  assert os.environ["XLA_FLAGS"] == ""
  env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
  code = ("import jaxlib_papers, jax\nfrom launch import reproduce as r\n"
          "r.benchmark_cpu_devices(3)\nprint('DEVICES', len(jax.devices()))")
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO,
                       env={**env, "PYTHONPATH": str(REPO)}, timeout=120, check=True)
  assert "DEVICES 3" in out.stdout, out.stderr[-1000:]


def test_every_check_is_registered():
  from jaxlib_papers.core import reproduce  # pylint: disable=g-import-not-at-top
  papers = {p.parent.name for p in (REPO / "jaxlib_papers").glob("*/reproduce.py")}
  assert set(reproduce.load_all()) == {"core"} | papers
  # launch.reproduce validates --only by these names before importing the packages
  names = reproduce.check_names()
  assert len(names) == len(set(names)) and set(names) == set(reproduce.load_all())


def test_every_check_runs_on_generated_data_without_a_data_folder(tmp_path):
  # The main job must work offline on a machine with no data files: each check falls back
  # to data the suite generates itself, and says so in the report. (Checks that read no
  # data file and run their smoke check in their own tests are not run twice.) Most checks
  # run in one process (--jobs=1: on this worker's one core, one process per check only
  # adds start-ups and compiles: 139 s against 220 s); two run as the main job does, in
  # parallel processes (--jobs=2), so that path is covered too.
  env = {k: v for k, v in _env().items() if k != "JAXLIB_PAPERS_DATA_DIR"}
  env.update(JAXLIB_PAPERS_DATA=str(tmp_path / "empty_cache"), JAXLIB_PAPERS_DATA_OFFLINE="1")
  names = _checks_to_run_offline()
  assert {"core", "fsbm", "ruot", "minimax"} <= set(names), names
  parallel = ["core", "minimax"]
  rows, stdout = [], ""
  for group, jobs in (([n for n in names if n not in parallel], 1), (parallel, 2)):
    report = tmp_path / f"report_jobs{jobs}"
    out = subprocess.run(
        [sys.executable, "-m", "launch.reproduce", "--preset=smoke",
         f"--only={','.join(group)}", f"--jobs={jobs}", f"--report_dir={report}"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    rows += json.loads((report / "report.json").read_text())
    stdout += out.stdout
  assert {r["check"] for r in rows} == set(names)
  assert all(r["data"].startswith("generated") for r in rows), [r["data"] for r in rows]
  # The report itself: core's three closed-form claims hold at any size.
  core_rows = [r for r in rows if r["check"] == "core"]
  assert len(core_rows) == 3 and all(r["holds"] for r in core_rows), core_rows
  assert "| core |" in (tmp_path / "report_jobs2" / "report.md").read_text()
  assert "fetched" not in stdout and "not available, using generated data" in stdout
