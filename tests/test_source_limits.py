"""The limits that keep every method package readable, checked over the source with ``ast``.

From ``jaxlib_papers/core/README.md`` ("Limits"): in a method package no function spans more
than 60 lines (a factory's nested closures count in its span) or takes more than 8
parameters; no settings NamedTuple is unpacked by position; no ``kernel.py`` calls
``jax.jit``; and no module of the suite imports in a cycle.
"""

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1] / "jaxlib_papers"
PACKAGES = sorted(p.name for p in ROOT.iterdir()
                  if p.is_dir() and p.name != "core" and (p / "__init__.py").exists())
MAX_LINES = 60
MAX_PARAMS = 8

# Over a limit today, each named with its measure: the list only shrinks (a function
# brought under the limit must leave it, and nothing may join it). Empty when issue 32 is
# done.
KNOWN_OVER = {
}


def _modules(package: str, root: pathlib.Path):
  for path in sorted((root / package).rglob("*.py")):
    yield path, ast.parse(path.read_text(), filename=str(path))


def _functions(tree):
  """(qualified name, node) of every function, nested ones included."""
  def walk(node, prefix):
    for child in ast.iter_child_nodes(node):
      if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
        name = f"{prefix}{child.name}"
        yield name, child
        yield from walk(child, name + ".")
      elif isinstance(child, ast.ClassDef):
        yield from walk(child, f"{prefix}{child.name}.")
      else:
        yield from walk(child, prefix)
  yield from walk(tree, "")


def _num_params(fn) -> int:
  args = fn.args
  names = [a.arg for a in args.posonlyargs + args.args + args.kwonlyargs]
  names = [n for n in names if n not in ("self", "cls")]
  return len(names) + (args.vararg is not None) + (args.kwarg is not None)


def violations(package: str, root: pathlib.Path = ROOT) -> dict[str, str]:
  """``{"<file>:<function>": "<measure>"}`` of every limit the package breaks."""
  found = {}
  for path, tree in _modules(package, root):
    rel = path.relative_to(root).as_posix()
    for name, fn in _functions(tree):
      lines, params = fn.end_lineno - fn.lineno + 1, _num_params(fn)
      measures = ([f"{lines} lines"] if lines > MAX_LINES else []) + (
          [f"{params} parameters"] if params > MAX_PARAMS else [])
      if measures:
        found[f"{rel}:{name}"] = ", ".join(measures)
    for node in ast.walk(tree):
      if (isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Tuple)
          and _is_settings(node.value)):
        found[f"{rel}:line {node.lineno}"] = "settings unpacked by position"
      if path.name == "kernel.py" and _is_jit(node):
        found[f"{rel}:line {node.lineno}"] = "jax.jit in kernel.py"
  return found


def _is_settings(value) -> bool:
  name = (value.id if isinstance(value, ast.Name)
          else value.attr if isinstance(value, ast.Attribute) else "")
  return name == "settings" or name.endswith("_settings")


def _is_jit(node) -> bool:
  return (isinstance(node, ast.Attribute) and node.attr == "jit"
          and isinstance(node.value, ast.Name) and node.value.id == "jax")


@pytest.mark.parametrize("package", PACKAGES)
def test_method_package_keeps_the_limits(package):
  found = violations(package)
  known = {k: v for k, v in KNOWN_OVER.items() if k.startswith(f"{package}/")}
  new = {k: v for k, v in found.items() if k not in known}
  assert not new, f"{package} breaks the limits of core/README.md: {new}"
  fixed = sorted(set(known) - set(found))
  assert not fixed, f"now within the limits, remove from KNOWN_OVER: {fixed}"


def _module_name(path: pathlib.Path) -> str:
  return ".".join(path.relative_to(ROOT.parent).with_suffix("").parts).removesuffix(
      ".__init__")


def test_no_import_cycle_between_modules():
  # ``from pkg import sub`` depends on the module ``pkg.sub`` (its package is already being
  # imported when a module of the package runs), ``from pkg.mod import name`` on ``pkg.mod``.
  modules = {_module_name(p) for p in ROOT.rglob("*.py")}
  graph = {}
  for path in ROOT.rglob("*.py"):
    module = _module_name(path)
    deps = set()
    for node in ast.walk(ast.parse(path.read_text())):
      if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
        subs = {f"{node.module}.{a.name}" for a in node.names} & modules
        deps |= subs or {node.module}
      elif isinstance(node, ast.Import):
        deps.update(a.name for a in node.names)
    ancestors = {module.rsplit(".", i)[0] for i in range(1, module.count(".") + 1)}
    graph[module] = {d for d in deps if d in modules and d != module and d not in ancestors}
  cycle = find_cycle(graph)
  assert cycle is None, f"import cycle: {' -> '.join(cycle)}"


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
  """A cycle of ``graph`` (``{node: successors}``) as a path, or None."""
  state = {}

  def visit(node, trail):
    if state.get(node) == "done":
      return None
    if state.get(node) == "open":
      return trail[trail.index(node):] + [node]
    state[node] = "open"
    for nxt in sorted(graph.get(node, ())):
      found = visit(nxt, trail + [node])
      if found:
        return found
    state[node] = "done"
    return None

  for node in sorted(graph):
    found = visit(node, [])
    if found:
      return found
  return None


def test_the_checker_finds_what_it_forbids(tmp_path):
  assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
  assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None
  package = tmp_path / "toy"
  package.mkdir()
  (package / "__init__.py").write_text("")
  body = "\n".join(f"  x{i} = {i}" for i in range(61))
  (package / "kernel.py").write_text(
      "import jax\n"
      f"def long():\n{body}\n"
      "def wide(a, b, c, d, e, f, g, h, i):\n  return jax.jit(a)\n"
      "def unpack(settings):\n  lr, steps = settings\n  return lr\n")
  found = violations("toy", tmp_path)
  assert found["toy/kernel.py:long"] == "62 lines"
  assert found["toy/kernel.py:wide"] == "9 parameters"
  assert found["toy/kernel.py:line 67"] == "settings unpacked by position"
  assert found["toy/kernel.py:line 65"] == "jax.jit in kernel.py"
