"""PNG figures with matplotlib, headless (Agg), written atomically: the one place both halves make pictures."""
from __future__ import annotations

import os
from pathlib import Path


def new_figure(title: str, width: float = 7.0, height: float = 4.0):
    """A figure and its axes, titled, with a light grid."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(width, height), dpi=100)
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    return fig, ax


def save_png(fig, path: Path) -> Path:
    """Writes `fig` to `path` (a temporary file renamed into place) and closes it."""
    import matplotlib.pyplot as plt

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    fig.tight_layout()
    fig.savefig(tmp, format="png")
    plt.close(fig)
    os.replace(tmp, path)
    return path
