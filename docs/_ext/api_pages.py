"""Writes the API reference pages (``docs/api/``) from the package on every build, before the sources are read.

``api/index.md`` lists every name of ``lightning_sfl.__all__`` with its one-line summary and a link to where it is
documented; ``api/<part>.md`` holds one ``automodule`` per module of that part of the package (its subpackage, or
the top-level modules), so that every cross-reference of a docstring has a target. The pages are not committed.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from pathlib import Path

import lightning_sfl
from lightning_sfl.help_text import plain

#: Part of the package -> its page's title. ``modules``: the top-level modules (the CLI, run folders, errors, …).
PARTS: dict[str, str] = {
    "algorithms": "Methods and their registry (lightning_sfl.algorithms)",
    "runtime": "The runtime: shapes, banks, iterations, state (lightning_sfl.runtime)",
    "losses": "Losses (lightning_sfl.losses)",
    "callbacks": "Callbacks (lightning_sfl.callbacks)",
    "data": "Data (lightning_sfl.data)",
    "loop": "The multi-client loop (lightning_sfl.loop)",
    "models": "Models and cut points (lightning_sfl.models)",
    "system": "System models (lightning_sfl.system)",
    "defences": "Defences (lightning_sfl.defences)",
    "compression": "Compressors of the crossings (lightning_sfl.compression)",
    "privacy": "Attacks and privacy metrics (lightning_sfl.privacy)",
    "compare": "Comparisons (lightning_sfl.compare)",
    "sweep": "Sweeps (lightning_sfl.sweep)",
    "trials": "Trial pools (lightning_sfl.trials)",
    "wandb": "Weights & Biases (lightning_sfl.wandb)",
    "process": "Processes (lightning_sfl.process)",
    "modules": "Command line, run folders and errors (top-level modules)",
}


#: autodoc's options for every module: what it defines (not what its ``__all__`` re-exports), with or without a
#: docstring (a name without one is still a name the reference lists and a docstring may link to).
OPTIONS = "".join(f"   :{flag}:\n" for flag in ("members", "undoc-members", "ignore-module-all", "show-inheritance"))


def modules_of(part: str) -> list[str]:
    """The importable modules of one part (``__main__`` modules left out: importing one runs it)."""
    if part == "modules":
        found = [f"lightning_sfl.{m.name}" for m in pkgutil.iter_modules(lightning_sfl.__path__) if not m.ispkg]
        return ["lightning_sfl", *sorted(found)]
    package = importlib.import_module(f"lightning_sfl.{part}")
    inside = pkgutil.walk_packages(package.__path__, f"{package.__name__}.")
    return [package.__name__, *sorted(m.name for m in inside if not m.name.endswith("__main__"))]


def documented_at(name: str) -> str:
    """Where ``lightning_sfl.<name>`` is documented: its defining module and qualified name (a constant: the
    module that exports it)."""
    value = getattr(lightning_sfl, name)
    if inspect.isclass(value) or inspect.isfunction(value):
        return f"{value.__module__}.{value.__qualname__}"
    return f"{lightning_sfl._EXPORTS[name]}.{name}"


def summary(name: str) -> str:
    """The first paragraph of what documents ``name`` (a class's or a function's docstring; a constant's ``#:``
    comment), as one line of Markdown: Sphinx's roles and literals become code (``plain``: a role has no meaning in a
    Markdown table cell), ``|`` is escaped (it would end the cell)."""
    value = getattr(lightning_sfl, name)
    if inspect.isclass(value) or inspect.isfunction(value):
        doc = inspect.getdoc(value) or ""
    else:
        from sphinx.pycode import ModuleAnalyzer

        found = ModuleAnalyzer.for_module(lightning_sfl._EXPORTS[name]).find_attr_docs().get(("", name), [])
        doc = "\n".join(line for line in found if not line.startswith(":meta "))
    line = doc.strip().split("\n\n")[0].replace("\n", " ")
    return plain(line, code="`").replace("|", "\\|")


def index_page() -> str:
    rows = []
    for name in lightning_sfl.__all__:
        target = documented_at(name)
        role = "class" if inspect.isclass(getattr(lightning_sfl, name)) else "obj"
        rows.append(f"| {{py:{role}}}`{name} <{target}>` | {summary(name)} |")
    parts = "\n".join(f"{part}" for part in PARTS)
    return f"""# API reference

Every name ``lightning_sfl`` exports (``from lightning_sfl import NAME``; loaded on first use), with where it is
documented. The pages after the table document every module of the package, part by part.

| name | what it is |
|---|---|
{chr(10).join(rows)}

```{{toctree}}
:maxdepth: 1

{parts}
```
"""


def part_page(part: str) -> str:
    # rST directives (in eval-rst blocks): MyST's own directive syntax drops autodoc's flag options (``:members:``).
    blocks = "\n".join(
        f"```{{eval-rst}}\n.. automodule:: {module}\n{OPTIONS}```\n"
        for module in modules_of(part)
    )
    return f"# {PARTS[part]}\n\n{blocks}"


def write_pages(app) -> None:
    folder = Path(app.srcdir) / "api"
    folder.mkdir(exist_ok=True)
    pages = {"index": index_page(), **{part: part_page(part) for part in PARTS}}
    for stem, text in pages.items():
        path = folder / f"{stem}.md"
        if not path.exists() or path.read_text() != text:  # unchanged pages keep their time: no rebuild
            path.write_text(text)


def setup(app):
    app.connect("builder-inited", write_pages)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
