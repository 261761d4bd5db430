"""Sphinx configuration of the documentation site.

Build it (offline; it fails on any warning, an unresolved cross-reference included)::

    .venv/bin/pip install -e ".[docs]"
    .venv/bin/sphinx-build -n -W --keep-going -b html docs docs/_build/html

The API reference is generated on every build from the package (``api_pages.py``: one page per subpackage, one
``automodule`` per module), and the methods table from the registry (``registry_table.py``); neither is committed.
"""

from __future__ import annotations

import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
sys.path.insert(0, str(DOCS / "_ext"))

import lightning_sfl  # noqa: E402

project = "lightning_sfl"
author = "the lightning_sfl developers"
copyright = "2026, the lightning_sfl developers"
release = version = lightning_sfl.__version__

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.mathjax",
    # MathJax from the docs extra instead of a CDN, so that a site built and opened offline shows its equations:
    # sphinx-mathjax-offline ships MathJax 3 (scripts and fonts), points ``mathjax_path`` at ``_static/mathjax`` and
    # copies it there; the browser typesets, and the build needs nothing beyond pip. (sphinxcontrib-katex loads its
    # CSS and fonts from a CDN unless it prerenders, which needs node.)
    "sphinx-mathjax-offline",
    "api_pages",
    "registry_table",
    "resolve_names",
]
source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
root_doc = "index"
# The studies' per-setting tables (``results/<study>/<setting>/results.md``) and the LEAF ceiling's table are data
# files next to the runs, not pages; so is the privacy study's README (its folder's summary: the "Privacy" page,
# ``results/privacy.md``, holds the same text and more); the build folder and the extension code are not pages either.
exclude_patterns = [
    "_build",
    "_ext",
    "results/*/*/**",
    "results/leaf_synthetic/ceiling.md",
    "results/privacy/README.md",
]

myst_enable_extensions = ["dollarmath", "amsmath", "colon_fence", "deflist", "attrs_inline"]
myst_heading_anchors = 3

# Docstrings are Google style (Args:, Returns:, Attributes:); the type hints go to the description.
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_ivar = True
autodoc_member_order = "bysource"
autodoc_typehints = "none"
# An override without a docstring of its own shows none (not Lightning's, whose roles point into its own docs).
autodoc_inherit_docstrings = False
autodoc_default_options: dict[str, bool] = {}

# Nitpicky: every cross-reference must resolve; only other projects' names (no intersphinx: the build is offline).
nitpicky = True
nitpick_ignore_regex = [
    (r"py:.*", r"(torch|lightning|pytorch_lightning|lightning_utilities|numpy|np|wandb|optuna|submitit|sklearn"
     r"|torchvision|scipy|jsonargparse|yaml|PIL|matplotlib)(\..*)?"),
    (r"py:.*", r"(Tensor|nn\.Module|Module|LightningModule|LightningDataModule|Trainer|Callback|LightningCLI"
     r"|DataLoader|Dataset|Optimizer|Generator|ndarray)"),
    (r"py:.*", r"(collections\.abc|typing|dataclasses|pathlib|argparse|enum|abc|os|io|subprocess|threading"
     r"|multiprocessing|concurrent\.futures|queue|json|logging|contextlib|types|functools)\..*"),
    (r"py:class", r"(Path|Callable|Iterable|Iterator|Sequence|Mapping|Any|Enum|IntEnum|ABC|Protocol|NamedTuple)"),
    # a dataclass's generated ``__init__`` carries its annotations as strings (``from __future__ import annotations``)
    (r"py:class", r"'.*"),
]

html_theme = "furo"
html_title = "lightning_sfl"
html_static_path = ["_static"]
html_css_files = ["math.css"]
