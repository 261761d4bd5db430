"""A cache of jsonargparse's subclass search, which the CLI's parse repeats for every short class name it resolves.

jsonargparse resolves a short name (``--model.compression+=TopK``, a config's ``class_path: SCALA``) by listing every
subclass of the option's type, recursively (``get_all_subclass_paths``); for an option typed ``nn.Module`` (the
model's ``arch``) that walks torch's thousands of modules, about 50 times in one ``fit`` parse (a second of the
parse's two). The list changes only when classes are defined, that is (for classes a class path can name) when a
module is imported: the cache is keyed by the type, the search's flags and the number of imported modules, so a parse
that imports a class path's module (``torchvision.models.ResNet``) searches again after it.
"""

from __future__ import annotations

import sys

__all__ = ["cache_subclass_searches"]


def cache_subclass_searches() -> None:
    """Wrap jsonargparse's subclass search in the cache (once; a jsonargparse without it is left as it is)."""
    from jsonargparse import _typehints

    search = getattr(_typehints, "get_all_subclass_paths", None)
    if search is None or getattr(search, "cached", False):
        return
    found: dict[tuple, list[str]] = {}

    def cached(cls, include_abstract: bool = False, closed_types: bool = True) -> list[str]:
        try:
            key = (cls, include_abstract, closed_types, len(sys.modules))
            hash(key)
        except TypeError:  # an unhashable type hint: searched every time
            return search(cls, include_abstract, closed_types)
        if key not in found:
            found[key] = search(cls, include_abstract, closed_types)
        return list(found[key])

    cached.cached = True
    _typehints.get_all_subclass_paths = cached
