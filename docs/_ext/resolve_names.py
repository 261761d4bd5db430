"""Resolves the package's cross-references that Sphinx's Python domain cannot on its own, so that the docstrings can
keep the names a reader uses.

- a public path through a re-export (``lightning_sfl.loop.Federation``, documented where it is defined,
  ``lightning_sfl.loop.federation.Federation``): the name is imported and its defining module and qualified name
  looked up;
- a method named inside a class's docstring that the class inherits: where Python's lookup finds it (the MRO);
- a short name (``StackedBank``, ``WirelessCell.round_seconds``) used outside its own module: the one documented
  object whose full name ends with it. A short name that fits several objects stays unresolved (and fails the
  nitpicky build): the docstring must say which.

Attribute comments (``#: …``) are sentences here: napoleon would read a colon in them as "type: description"
(``#: Adam steps per phase (the authors: 1000)``), so they are given back to autodoc as written.
"""

from __future__ import annotations

import importlib
import inspect

from sphinx.util import logging

LOG = logging.getLogger(__name__)
_AS_WRITTEN: dict[tuple[str, str], list[str]] = {}


def locate(target: str):
    """The object a dotted path names (through the longest importable module prefix), or ``None``."""
    parts = target.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            value = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for name in parts[cut:]:
            value = getattr(value, name, None)
            if value is None:
                return None
        return value
    return None


def canonical(target: str) -> str | None:
    """Where the object ``target`` names is documented (its module and qualified name), when that differs."""
    if not target.startswith("lightning_sfl."):
        return None
    value = locate(target)
    value = getattr(value, "__func__", value)
    if value is None or not (inspect.isclass(value) or inspect.isfunction(value) or inspect.ismodule(value)):
        return None
    name = value.__name__ if inspect.ismodule(value) else f"{value.__module__}.{value.__qualname__}"
    return name if name != target else None


def through_bases(objects, module: str | None, cls: str | None, target: str) -> str | None:
    """A method or attribute named from inside a class's docstring (``client_regulariser`` in ``FedAvg``'s): where
    Python's own lookup finds it, the first class of the MRO that documents it."""
    owner = locate(f"{module}.{cls}") if module and cls else None
    for base in getattr(owner, "__mro__", ()):
        name = f"{base.__module__}.{base.__qualname__}.{target}"
        if name in objects:
            return name
    return None


def resolve(app, env, node, contnode):
    if node.get("refdomain") != "py":
        return None
    domain = env.get_domain("py")
    target = node["reftarget"].lstrip("~.")
    found = canonical(target)
    if found is None:
        found = through_bases(domain.objects, node.get("py:module"), node.get("py:class"), target)
    if found is None:
        ending = "." + target
        matches = [name for name in domain.objects if name.endswith(ending) and name.startswith("lightning_sfl")]
        found = matches[0] if len(matches) == 1 else None
    if found is None:
        return None
    return domain.resolve_xref(env, node["refdoc"], app.builder, "obj", found, node, contnode)


def keep_attribute_text(app, what, name, obj, options, lines):
    if what in {"attribute", "data", "property"}:
        _AS_WRITTEN[what, name] = list(lines)


def restore_attribute_text(app, what, name, obj, options, lines):
    if (what, name) in _AS_WRITTEN:
        lines[:] = _AS_WRITTEN.pop((what, name))


def setup(app):
    app.connect("missing-reference", resolve)
    app.connect("autodoc-process-docstring", keep_attribute_text, priority=100)  # before napoleon (500)
    app.connect("autodoc-process-docstring", restore_attribute_text, priority=900)  # after it
    return {"parallel_read_safe": True, "parallel_write_safe": True}
