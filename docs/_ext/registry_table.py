"""The ``registry-table`` directive: the table of every registered method, written from the registry at build time.

In a Markdown page::

    ```{registry-table}
    ```

One row per registered name (in the registry's order: family, then name): the ``--model`` name, the class (linked
to its API entry), the family (linked to its methods page, ``methods/<family>``), the first sentence of the class's
docstring (the paper and what the method does) and the committed configs that run it (``configs/*/<name>.yaml``).
"""

from __future__ import annotations

import inspect
from pathlib import Path

from docutils import nodes
from docutils.statemachine import StringList
from sphinx.util.docutils import SphinxDirective

REPO = Path(__file__).resolve().parents[2]


def first_sentence(cls: type) -> str:
    """The docstring's first paragraph up to its first full stop followed by a space (or the whole paragraph)."""
    paragraph = (inspect.getdoc(cls) or "").split("\n\n")[0].replace("\n", " ")
    end = paragraph.find(". ")
    return (paragraph if end < 0 else paragraph[: end + 1]).replace("|", "\\|")


def table_lines() -> list[str]:
    from lightning_sfl.algorithms.registry import REGISTRY, methods

    lines = ["| `--model` | class | family | what it is | configs |", "|---|---|---|---|---|"]
    for name, cls in methods().items():
        family = REGISTRY[name].family
        configs = sorted(REPO.glob(f"configs/*/{name}.yaml"))
        shown = ", ".join(f"`{p.relative_to(REPO)}`" for p in configs) or "—"
        target = f"{cls.__module__}.{cls.__qualname__}"
        lines.append(
            f"| `{name}` | {{py:class}}`{cls.__name__} <{target}>` | [{family}](/methods/{family}.md) "
            f"| {first_sentence(cls)} | {shown} |"
        )
    return lines


class RegistryTable(SphinxDirective):
    has_content = False

    def run(self):
        container = nodes.container()
        self.state.nested_parse(StringList(table_lines(), source="registry"), self.content_offset, container)
        return container.children


def setup(app):
    app.add_directive("registry-table", RegistryTable)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
