"""Figures without a global backend: the one place the suite makes matplotlib figures.

:func:`new_figure` builds a ``matplotlib.figure.Figure`` directly, so nothing here calls
``matplotlib.use`` or touches pyplot's state: a reproduction check saves the figure with
:func:`save` (Agg canvas, no display needed), and a notebook shows the very same object
(``display(fig)``, or as a cell's last value) with whatever backend it runs. Each paper's
plotting functions return a Figure, and the checks and the Colab demos call the same ones.
"""

from __future__ import annotations

import io
import pathlib
from typing import Any

from matplotlib.figure import Figure


def new_figure(nrows: int = 1, ncols: int = 1, *, size: tuple[float, float] = (5.0, 3.5),
               squeeze: bool = True, **subplot_kw: Any) -> tuple[Figure, Any]:
  """A ``Figure`` of ``nrows x ncols`` axes, ``size`` inches per panel (width, height).

  Returns:
    ``(figure, axes)``: ``axes`` as ``Figure.subplots`` gives them (one Axes, a 1-D or a
    2-D array; always 2-D with ``squeeze=False``).
  """
  if nrows < 1 or ncols < 1:
    raise ValueError(f"nrows and ncols must be >= 1; got {nrows}, {ncols}")
  fig = Figure(figsize=(size[0] * ncols, size[1] * nrows), layout="tight")
  axes = fig.subplots(nrows, ncols, squeeze=squeeze, subplot_kw=subplot_kw or None)
  return fig, axes


def save(fig: Figure, path: str | pathlib.Path, *, dpi: int = 90) -> pathlib.Path:
  """Writes ``fig`` as PNG to ``path`` (folders created); returns the path."""
  path = pathlib.Path(path)
  path.parent.mkdir(parents=True, exist_ok=True)
  fig.savefig(path, dpi=dpi)
  return path


def show(fig: Figure, *, dpi: int = 80) -> None:
  """Displays ``fig`` in a notebook as a PNG; outside one (plain ``python``), does nothing.

  The Colab demos call it on the Figures the reproduction checks save, so a demo runs the
  same under plain ``python`` (as the tests run it) and in a notebook, whatever backend
  pyplot would have picked.
  """
  try:
    from IPython import get_ipython  # pylint: disable=g-import-not-at-top
    from IPython.display import Image, display  # pylint: disable=g-import-not-at-top
  except ImportError:
    return
  if get_ipython() is None:
    return
  buffer = io.BytesIO()
  fig.savefig(buffer, format="png", dpi=dpi)
  display(Image(data=buffer.getvalue(), format="png"))
