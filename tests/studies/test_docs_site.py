"""The documentation site and the README as a front page: the API reference covers every public name, the README's
methods table every registered method, CI runs the README's test command, and no dated measurement sits in the README
or in a docstring (measured numbers live on the results and benchmarks pages, each with its command).

The site says what its sources say, offline: no page loads anything from the internet and every equation is typeset
by the MathJax it ships; every table row keeps its cells; no role is left as text (the API index's summaries
included, each entry with one); the sidebar lists each page once; and no ``--help`` text shows Sphinx markup."""

from __future__ import annotations

import functools
import html
import importlib.util
import json
import posixpath
import re
import time
from html.parser import HTMLParser
from types import SimpleNamespace

import pytest
from _helpers import REPO
from conftest import SITE_BUILD, SITE_BUILD_LOG, _tests_the_site

import lightning_sfl
from lightning_sfl.algorithms.registry import FAMILIES, methods

DOCS = REPO / "docs"
#: The site's build: a session that runs ``tests/studies`` builds it first, in the background (``conftest.py``).
INVENTORY = DOCS / "_build" / "html" / "objects.inv"
#: The longest the site's tests wait for the build (seconds).
BUILD_TIMEOUT = 900
_CONFIG: list = []


@pytest.fixture(scope="module", autouse=True)
def _session_config(request):
    _CONFIG[:] = [request.config]


@functools.cache
def site_built() -> bool:
    """Whether the site is built: in a session that builds it, once its build has ended, failing on a warning or an
    error of the build (nitpicky, warnings are errors); else whether an earlier build is there."""
    if not (_CONFIG and _tests_the_site(_CONFIG[0])):
        return INVENTORY.exists()
    deadline = time.monotonic() + BUILD_TIMEOUT
    while not SITE_BUILD_LOG.exists():
        assert time.monotonic() < deadline, f"the site's build took more than {BUILD_TIMEOUT} s"
        time.sleep(0.5)
    code, _, output = SITE_BUILD_LOG.read_text().partition("\n")
    said = [line for line in output.splitlines() if re.search(r"\b(WARNING|ERROR|CRITICAL)\b", line)]
    assert code == "0" and not said, f"sphinx-build {' '.join(SITE_BUILD[2:])} exited with {code}:\n{output[-6000:]}"
    return True


def test_the_site_builds_without_a_warning():
    """Nitpicky (every cross-reference resolves), warnings are errors: what ``sphinx-build -n -W`` checks."""
    if not (_CONFIG and _tests_the_site(_CONFIG[0])):
        pytest.skip("the site is built by a session that runs tests/studies")
    assert site_built() and INVENTORY.exists()


def _api_pages():
    spec = importlib.util.spec_from_file_location("api_pages", DOCS / "_ext" / "api_pages.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_api_reference_documents_every_public_name():
    """Every name of ``lightning_sfl.__all__`` is listed on the API index and documented in a module the reference
    renders (where it is defined); with a built site, its objects inventory holds each one."""
    api = _api_pages()
    rendered = {module for part in api.PARTS for module in api.modules_of(part)}
    index = api.index_page()
    names = lightning_sfl.__all__
    assert len(names) >= 60 and {"SCALA", "FederatedDataModule", "WirelessCell", "SFLCLI"} <= set(names)
    for name in names:
        target = api.documented_at(name)
        assert f"`{name} <{target}>`" in index, name
        assert target.rsplit(".", 1)[0] in rendered or target.rsplit(".", 2)[0] in rendered, (name, target)
    if site_built():
        from sphinx.util.inventory import InventoryFile

        with INVENTORY.open("rb") as f:
            inventory = InventoryFile.load(f, "", posixpath.join)
        documented = {name for entries in inventory.values() for name in entries}
        missing = [name for name in names if api.documented_at(name) not in documented]
        assert not missing, missing


def test_the_readme_is_a_front_page():
    readme = (REPO / "README.md").read_text()
    assert len(readme.splitlines()) < 250
    table = readme.split("## Methods", 1)[1].split("\n## ", 1)[0]
    listed = set(re.findall(r"`([a-z0-9_]+)`", table))
    assert set(methods()) <= listed, sorted(set(methods()) - listed)
    for family in FAMILIES:  # every family's row links to its methods page, and the page exists
        assert f"(docs/methods/{family}.md)" in table and (DOCS / "methods" / f"{family}.md").exists(), family
    for link in re.findall(r"\]\(((?:docs|configs)/[^)#]+)", readme):  # every local link of the README resolves
        assert (REPO / link).exists(), link


def test_ci_runs_the_readmes_test_command():
    """CI's command is the README's, and its pytest runs ``tests/studies`` (which builds the site: lint, the
    documentation build and the tests in one command)."""
    readme = (REPO / "README.md").read_text()
    ci = (REPO / ".ci" / "run").read_text()
    command = next(line for line in ci.splitlines() if line.startswith("python3 -m venv"))
    assert f"```bash\n{command}\n```" in readme
    assert "ruff check" in command and "pytest" in command
    pytest_args = command.split("pytest", 1)[1].split()
    assert not [a for a in pytest_args if not a.startswith("-") and a not in ("auto", "worksteal")], pytest_args
    testpaths = [REPO / p for p in _CONFIG[0].getini("testpaths")]  # what a pytest without paths runs
    assert _tests_the_site(SimpleNamespace(args=testpaths)) and "-W" in SITE_BUILD and "-n" in SITE_BUILD
    quick = SimpleNamespace(args=[REPO / "tests" / "unit", REPO / "tests" / "integration"])  # the quick command's
    one = SimpleNamespace(args=[f"{REPO}/tests/studies/test_docs_site.py::test_x"])
    assert not _tests_the_site(quick) and _tests_the_site(one)


DATE = re.compile(r"\b20\d\d-\d\d-\d\d\b")


@pytest.mark.parametrize("where", ["README.md", "lightning_sfl", "callbacks"])
def test_no_dated_measurement_outside_the_results_and_benchmark_pages(where):
    path = REPO / where
    files = [path] if path.is_file() else sorted(path.rglob("*.py"))
    dated = [f"{f.relative_to(REPO)}:{i}" for f in files for i, line in enumerate(f.read_text().splitlines(), 1)
             if DATE.search(line)]  # fmt: skip
    assert not dated, dated


def test_every_benchmark_page_says_its_machine_date_and_command():
    pages = sorted((DOCS / "benchmarks").glob("*.md"))
    assert {p.stem for p in pages} >= {"framework", "client-scaling", "vs-flower", "studies", "gpu"}
    for page in pages:
        if page.stem == "index":
            continue
        text = page.read_text()
        assert DATE.search(text.split("\n\n", 2)[1]), f"{page.name}: the date under the title"
        assert re.search(r"(CPU|GPU|H200)", text.split("\n\n", 2)[1]), f"{page.name}: the machine"
        assert "```bash" in text or "(`python benchmarks/" in text, f"{page.name}: the command"


def test_every_file_the_docs_name_exists():
    """Every ``tests/…``, ``benchmarks/…`` or ``docs/…`` file that the README, the pages, the docstrings or the study
    scripts name is there (files move: the tests by kind, the results into pages)."""
    sources = [REPO / "README.md", REPO / "sweeps" / "README.md", REPO / "benchmarks" / "README.md"]
    sources += [p for p in DOCS.rglob("*.md") if "_build" not in p.parts and "api" not in p.relative_to(DOCS).parts[:1]]
    sources += [*DOCS.rglob("*.sh"), *DOCS.glob("results/*.py")]
    sources += [*(REPO / "lightning_sfl").rglob("*.py"), *(REPO / "callbacks").rglob("*.py")]
    sources += [*(REPO / "benchmarks").rglob("*.py")]
    pattern = r"((?:tests|benchmarks|docs)/[A-Za-z0-9_./-]+\.(?:py|md|sh|json|png|txt))\b"
    named = re.compile(r"(?<!\]\()(?<![\w/.-])" + pattern)  # not a Markdown link (Sphinx checks those) nor a tail
    missing = sorted({f"{path}  ({src.relative_to(REPO)})" for src in sources for path in named.findall(src.read_text())
                      if not (REPO / path).exists()})  # fmt: skip
    assert not missing, missing


# ------------------------------------------------------------------------------------------ the built site
SITE = DOCS / "_build" / "html"
#: Elements whose text is code or a script, not prose (a role or a ``$`` there is what the code says).
CODE = {"code", "pre", "kbd", "samp", "script", "style"}
VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}
#: A script or stylesheet from elsewhere: an address with a scheme or a protocol-relative one (``//cdn…``).
REMOTE = re.compile(r"^(?:[a-z][a-z0-9+.-]*:)?//", re.I)
#: TeX left as text: ``$…$``, ``$$``, ``\(``, ``\)``, ``\[``, ``\]`` or a TeX command.
RAW_TEX = re.compile(r"\$\$|\\[()[\]]|\$[^$\s][^$]*\$|\\(?:frac|sum|prod|mathbf|mathcal|mathbb|lvert|rvert|left|right"
                     r"|cdot|alpha|beta|eta|tau|nabla|log|exp)\b")  # fmt: skip
#: A role or a literal that Sphinx or MyST did not render (``CODE_MARK`` stands for an inline code element).
CODE_MARK = "\0"
RAW_ROLE = re.compile(r":[a-z]+(?::[a-z]+)?:[`\0]|\{(?:doc|ref|eq|numref|term|download|math|py:[a-z]+)\}[`\0]|``")


class _Page(HTMLParser):
    """One built page: its scripts' and stylesheets' addresses; its text, each piece with whether it lies in a math
    element (MathJax's ``span``/``div`` of class ``math``) or in code; the sidebar's links (address, title)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[tuple[str, set[str]]] = []
        self.loads: list[str] = []
        self.text: list[tuple[str, bool, bool]] = []
        self.sidebar: list[list[str]] = []

    def _inside(self, what: str) -> bool:
        return any(what in classes for _, classes in self.stack)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "script" and attrs.get("src"):
            self.loads.append(attrs["src"])
        if tag == "link" and "stylesheet" in (attrs.get("rel") or "") and attrs.get("href"):
            self.loads.append(attrs["href"])
        if tag in VOID:
            return
        classes = set((attrs.get("class") or "").split())
        if tag == "code" and not self._inside("pre"):
            self.text.append((CODE_MARK, self._inside("math"), False))
        if tag == "a" and self._inside("sidebar-tree"):
            self.sidebar.append([attrs.get("href", ""), ""])
        self.stack.append((tag, classes | ({tag} if tag in CODE else set()) | {f"<{tag}>"}))

    def handle_endtag(self, tag):
        if tag in VOID:
            return
        for i in range(len(self.stack) - 1, -1, -1):
            if f"<{tag}>" in self.stack[i][1]:
                del self.stack[i:]
                break

    def handle_data(self, data):
        in_code = any(self._inside(tag) for tag in CODE)
        self.text.append((data, self._inside("math"), in_code))
        if self._inside("<a>") and self._inside("sidebar-tree") and self.sidebar:
            self.sidebar[-1][1] += data

    def prose(self) -> str:
        """The page's text outside code and math, an inline code element as ``CODE_MARK``."""
        return "".join(text for text, in_math, in_code in self.text if not in_math and not in_code)


@functools.cache
def built_pages() -> dict[str, _Page]:
    """Every page of the latest build (the documents its search index lists, and the indices), parsed once; skips
    when the site is not built (a session that runs ``tests/studies`` builds it)."""
    index = SITE / "searchindex.js"
    if not site_built() or not index.exists():
        pytest.skip("the site is not built (pytest tests/studies builds it)")
    docnames = json.loads(re.search(r'"docnames":(\[[^\]]*\])', index.read_text())[1])
    pages = {}
    for name in [*docnames, "genindex", "search", "py-modindex"]:
        path = SITE / f"{name}.html"
        if path.exists():
            page = _Page()
            page.feed(path.read_text())
            pages[name] = page
    assert len(pages) >= 60, sorted(pages)
    return pages


def test_the_site_loads_nothing_from_the_internet_and_its_equations_are_typeset_offline():
    """Every page's scripts and stylesheets are the site's own files; a page with equations loads MathJax from
    ``_static/mathjax`` (``sphinx-mathjax-offline``), whose script is there; no TeX delimiter or command is left as
    text outside a math element (a ``$`` or a backslash in code is the code's)."""
    pages = built_pages()
    remote = {name: [src for src in page.loads if REMOTE.match(src)] for name, page in pages.items()}
    assert not {name: srcs for name, srcs in remote.items() if srcs}, remote
    with_math = [name for name, page in pages.items() if any(in_math for _, in_math, _ in page.text)]
    assert len(with_math) >= 7 and {"methods/split", "methods/fl", "methods/async", "methods/semi"} <= set(with_math)
    for name in with_math:
        mathjax = [src.split("?")[0] for src in pages[name].loads if "mathjax" in src]
        assert any(src.endswith("_static/mathjax/tex-chtml.js") for src in mathjax), (name, mathjax)
        missing = [src for src in mathjax if not (SITE / name).parent.joinpath(src).resolve().is_file()]
        assert not missing, (name, missing)
    raw = {name: RAW_TEX.findall(page.prose()) for name, page in pages.items()}
    assert not {name: found for name, found in raw.items() if found}, raw


def test_no_role_or_literal_is_left_as_text_on_a_page():
    """Sphinx's and MyST's markup is rendered everywhere, the API index's summaries included: no ``:class:``, ``:mod:``,
    ``{doc}``, ``{ref}``, … before a backquote or a code element, and no unparsed ````literal```` in prose."""
    pages = built_pages()
    found = {}
    for name, page in pages.items():
        prose = page.prose()
        hits = [prose[max(0, m.start() - 40) : m.end() + 40].replace(CODE_MARK, "`") for m in RAW_ROLE.finditer(prose)]
        if hits:
            found[name] = hits
    assert not found, found


def test_the_sidebar_lists_each_page_once():
    """The navigation (the same on every page): no page twice, no two entries with the same title."""
    sidebar = built_pages()["index"].sidebar
    assert len(sidebar) >= 40, sidebar
    hrefs = [href for href, _ in sidebar]
    titles = [" ".join(title.split()) for _, title in sidebar]
    assert len(set(hrefs)) == len(hrefs), sorted(h for h in hrefs if hrefs.count(h) > 1)
    assert len(set(titles)) == len(titles), sorted(t for t in titles if titles.count(t) > 1)


def test_the_api_pages_show_no_unreadable_value():
    """A constant's value is shown where it reads as what it is: not ``ALGORITHMS`` (the registry's classes, in an order
    the repr would sort), nor any value made of functions' reprs or longer than a screen (``:meta hide-value:`` in its
    ``#:`` comment; the comment says what it holds)."""
    built_pages()
    shown = {}
    for path in sorted((SITE / "api").glob("*.html")):
        text = path.read_text()
        for name, signature in re.findall(r'<dt class="sig sig-object py" id="([^"]+)">(.*?)</dt>', text, re.S):
            value = html.unescape(re.sub(r"<[^>]+>", "", signature)).partition(" = ")[2].rstrip("¶")
            if value:
                shown[name] = value
    assert len(shown) >= 20 and "lightning_sfl.algorithms.ALGORITHMS" not in shown
    unreadable = {name: value[:80] for name, value in shown.items() if "<function" in value or len(value) > 1000}
    assert not unreadable, unreadable


# ------------------------------------------------------------------------------------------ the pages' sources
FENCE = re.compile(r"^\s*(`{3,}|~{3,})")
DELIMITER_ROW = re.compile(r"^\s*\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?\s*$")


def table_cells(row: str) -> list[str]:
    """A Markdown table row's cells as GitHub's and MyST's tables split them: at every ``|`` not escaped as ``\\|``
    (a ``|`` in code or math ends the cell too), the outer pipes dropped.

    >>> table_cells("| `none` | the `\\\\|D_k\\\\|`-weighted mean | nothing |")
    ['`none`', 'the `\\\\|D_k\\\\|`-weighted mean', 'nothing']
    >>> len(table_cells("| `none` | the `|D_k|`-weighted mean | nothing |"))
    5
    """
    row = row.strip()
    row = row[1:] if row.startswith("|") else row
    row = row[:-1] if row.endswith("|") and not row.endswith("\\|") else row
    return [cell.strip() for cell in re.split(r"(?<!\\)\|", row)]


def tables(text: str) -> list[list[tuple[int, str]]]:
    """Every table of a Markdown text outside fenced blocks: its rows (line number, text), the header first."""
    lines, found, fenced, i = text.splitlines(), [], None, 0
    while i < len(lines):
        fence = FENCE.match(lines[i])
        if fence and (fenced is None or fence[1][0] == fenced[0] and len(fence[1]) >= len(fenced)):
            fenced = fence[1] if fenced is None else None
        elif fenced is None and "|" in lines[i] and i + 1 < len(lines) and DELIMITER_ROW.match(lines[i + 1]):
            end = i + 2
            while end < len(lines) and lines[end].strip() and "|" in lines[end]:
                end += 1
            found.append([(i + 1, lines[i]), *((j + 1, lines[j]) for j in range(i + 2, end))])
            i = end
            continue
        i += 1
    return found


def markdown_sources() -> dict[str, str]:
    """The README, every Markdown page of ``docs/`` (the studies' data files included: GitHub shows them) and the
    tables the build writes (the API index, the methods table)."""
    sources = {"README.md": (REPO / "README.md").read_text()}
    for path in sorted(DOCS.rglob("*.md")):
        parts = path.relative_to(DOCS).parts
        if parts[0] not in ("_build", "api") and "runs" not in parts:
            sources[str(path.relative_to(REPO))] = path.read_text()
    sources["docs/api/index.md (api_pages.py)"] = _api_pages().index_page()
    spec = importlib.util.spec_from_file_location("registry_table", DOCS / "_ext" / "registry_table.py")
    registry_table = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(registry_table)
    sources["the methods table (registry_table.py)"] = "\n".join(registry_table.table_lines())
    return sources


def test_every_table_row_has_as_many_cells_as_its_header():
    """A ``|`` inside a cell (``|D_k|`` in text, code or math) must be escaped (``\\|``, or ``\\lvert D_k\\rvert`` in
    math): unescaped, it ends the cell, and the table drops the row's last cells (``tail_aggregation: none``'s row
    once said the server knows "D_k")."""
    sources = markdown_sources()
    assert len(sources) >= 60 and sum(len(tables(text)) for text in sources.values()) >= 100
    wrong = [f"{source}:{line}: {len(table_cells(row))} cells, its header {len(table_cells(rows[0][1]))}: {row[:100]}"
             for source, text in sources.items() for rows in tables(text)
             for line, row in rows if len(table_cells(row)) != len(table_cells(rows[0][1]))]  # fmt: skip
    assert not wrong, wrong


def test_every_api_index_entry_has_a_plain_one_line_description():
    """Each name of the API index has a summary (a constant's from its ``#:`` comment), one line, without a role:
    a Markdown table cell does not render reST's ``:class:`X```."""
    api = _api_pages()
    for name in lightning_sfl.__all__:
        summary = api.summary(name)
        assert summary and "\n" not in summary, name
        assert not RAW_ROLE.search(summary), (name, summary)


# ------------------------------------------------------------------------------------------ the command line's help
#: Sphinx markup in a help text: a role (``:class:`X```, ``{doc}`X```) or a literal's double backquotes.
HELP_MARKUP = re.compile(r":[a-z]+(?::[a-z]+)?:`|\{(?:doc|ref|eq|numref|term|download|math|py:[a-z]+)\}`|``")
#: Methods whose ``--model.help`` runs in CI, one of each family with the most options (every method's:
#: ``-m extended``, ~15 s more on two cores).
HELP_METHODS = ("scala", "fedadam", "gas", "semi_sfl", "fsha")


def model_helps(methods) -> list[list[str]]:
    from lightning_sfl.algorithms.registry import methods as registered

    return [["fit", "--model.help", registered()[name].__name__] for name in methods]


def check_help_texts(commands: list[list[str]], folder) -> None:
    from cli_in_one_process import run_in_one_process

    runs = run_in_one_process([(folder, command) for command in commands])
    marked = {}
    for command, run in zip(commands, runs):
        assert run.code == 0 and len(run.stdout.splitlines()) >= 5, (command, run.code, run.stderr[-2000:])
        lines = [line.strip() for line in run.stdout.splitlines() if HELP_MARKUP.search(line)]
        if lines:
            marked[" ".join(command)] = lines[:5]
    assert not marked, marked


def test_no_help_text_shows_sphinx_markup(tmp_path):
    """``--help`` texts are written from docstrings (jsonargparse's option descriptions and class groups, argparse's
    descriptions): each comes through :func:`lightning_sfl.help_text.plain`, so no role or ````literal```` reaches
    the terminal (before, ``fit --help`` had 213 such lines). The console script's own, each subcommand's
    (``lightning_sfl.cli.COMMANDS``), the system models' (``--clock.help``) and some methods' (:data:`HELP_METHODS`),
    in one process (~15 s on two cores)."""
    from lightning_sfl.cli import COMMANDS

    commands = [["--help"], *([name, "--help"] for name in COMMANDS)]
    commands += [["fit", "--clock.help", name] for name in ("WirelessCell", "EdgeDevices")]
    check_help_texts(commands + model_helps(HELP_METHODS), tmp_path)


@pytest.mark.extended  # ~15 s more on two cores; in CI: the test above, with one method of each family
def test_no_methods_help_text_shows_sphinx_markup(tmp_path):
    from lightning_sfl.algorithms.registry import methods

    check_help_texts(model_helps(name for name in methods() if name not in HELP_METHODS), tmp_path)
