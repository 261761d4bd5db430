"""Docstrings as a terminal shows them: the help texts of the command line are written from docstrings (the options'
descriptions, a class's summary), whose Sphinx markup (``:class:`~a.b.C```, ````x````) would otherwise reach
``--help`` as it is written.

:func:`plain` turns the markup into text; :class:`PlainHelp` gives an ``argparse`` (or jsonargparse) help formatter
that applies it to every description and option help. The API index of the
documentation uses :func:`plain` too, for its one-line summaries (``code="`"``: names as Markdown code). Nothing here
imports more than ``argparse`` and ``re``.
"""

from __future__ import annotations

import argparse
import re

#: A cross-reference role, reST's (``:class:`X```, ``:py:meth:`X```) or MyST's (``{doc}`X```, ``{py:func}`X```).
ROLE = re.compile(r"(?<![\w`]):(?:[a-z]+:)?[a-z]+:`(?P<rst>[^`]+)`|\{(?:[a-z]+:)?[a-z-]+\}`(?P<myst>[^`]+)`")
#: A reST inline literal, ````x````.
LITERAL = re.compile(r"``(?P<text>[^`]+?)``")
#: A reST hyperlink, ```text <https://…>`_`` (or ``__``).
LINK = re.compile(r"`(?P<text>[^`<]+?)\s*<(?P<url>[^`>]+)>`__?")
#: A reST reference by name, ```text`_``.
NAMED = re.compile(r"`(?P<text>[^`<]+)`__?(?!\w)")


def role_text(body: str) -> str:
    """What Sphinx shows for a role's content: an explicit title, else the target (``~``: its last part; ``!`` and
    leading dots dropped).

    >>> role_text("~lightning_sfl.algorithms.scala.SCALA"), role_text("the loop <lightning_sfl.loop>")
    ('SCALA', 'the loop')
    >>> role_text(".describe"), role_text("!FedOpt"), role_text("lightning_sfl.loop.Federation")
    ('describe', 'FedOpt', 'lightning_sfl.loop.Federation')
    """
    titled = re.fullmatch(r"(?s)(?P<title>.*\S)\s*<[^<>]+>", body)
    if titled:
        return titled["title"]
    body = body.lstrip("!")
    if body.startswith("~"):
        return body[1:].rsplit(".", 1)[-1]
    return body.lstrip(".")


def plain(text: str, code: str = "") -> str:
    """``text`` without Sphinx markup: roles as the text Sphinx shows (:func:`role_text`), literals without their
    double backquotes, hyperlinks as their text and address. ``code`` is put around names and literals (``"`"``:
    Markdown code; ``""``: plain text, for a terminal).

    >>> plain("LightningCLI with the algorithm as a subclass of :class:`SplitFedAlgorithm`.")
    'LightningCLI with the algorithm as a subclass of SplitFedAlgorithm.'
    >>> plain("see :class:`~lightning_sfl.algorithms.fedopt.FedOpt` and ``--model.lr``; {doc}`the guide <guide/runs>`")
    'see FedOpt and --model.lr; the guide'
    >>> plain("normalises each update (:func:`fednova_average`)", code="`")
    'normalises each update (`fednova_average`)'
    >>> plain("Default: ``'32-true'``. See `Lightning's docs <https://lightning.ai/docs>`_.")
    "Default: '32-true'. See Lightning's docs (https://lightning.ai/docs)."
    >>> plain(":math:`|D_k|`-weighted, a ``max_epochs\\n= 1000`` default, ${args} kept")
    '|D_k|-weighted, a max_epochs\\n= 1000 default, ${args} kept'
    """
    text = ROLE.sub(lambda m: code + role_text(m["rst"] or m["myst"]) + code, text)
    text = LITERAL.sub(lambda m: code + m["text"] + code, text)
    if code:
        text = LINK.sub(lambda m: f"[{m['text']}]({m['url']})", text)
    else:
        text = LINK.sub(lambda m: f"{m['text']} ({m['url']})", text)
    return NAMED.sub(lambda m: m["text"], text)


#: How many of the known subclasses an option's help names (an ``nn.Module`` option has hundreds: torch's layers).
SUBCLASSES_SHOWN = 6


def short_subclass_lists(text: str) -> str:
    """``text`` with jsonargparse's ``known subclasses: ...`` list cut to :data:`SUBCLASSES_SHOWN` names and a count.

    >>> short_subclass_lists("(type: M, known subclasses: " + ", ".join(f"a.C{i}" for i in range(9)) + ")")
    '(type: M, known subclasses: a.C0, a.C1, a.C2, a.C3, a.C4, a.C5, … (9 in all; any subclass by its class path))'
    """
    match = re.search(r", known subclasses: ([^()]*)\)$", text)
    if match is None:
        return text
    names = match[1].split(", ")
    if len(names) <= SUBCLASSES_SHOWN:
        return text
    shown = ", ".join(names[:SUBCLASSES_SHOWN])
    return f"{text[: match.start(1)]}{shown}, … ({len(names)} in all; any subclass by its class path))"


class PlainHelp:
    """A help-formatter mixin (before an ``argparse`` formatter, jsonargparse's included, in the bases) whose headings
    (a class's group: its docstring's first line), descriptions and option helps are :func:`plain` text, before they
    are wrapped. Its classes are defined once, at module level, so a parser holding one pickles (``ddp_spawn``)."""

    def start_section(self, heading: str | None) -> None:
        super().start_section(heading if heading is None else plain(heading))

    def _expand_help(self, action: argparse.Action) -> str:
        return short_subclass_lists(plain(super()._expand_help(action)))

    def _format_text(self, text: str) -> str:
        return super()._format_text(plain(text))


class PlainHelpFormatter(PlainHelp, argparse.HelpFormatter):
    """``argparse``'s help formatter, with :class:`PlainHelp`'s text."""
