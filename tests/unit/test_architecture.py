"""The structure the architecture promises (docs/architecture.md), checked on the source: no package of
``lightning_sfl`` imports another in a circle (an import inside a function counts), no method or data-module code
reaches through the trainer for another part or reads the trainer but through :mod:`lightning_sfl.trainer_view`,
the clients' gradients ``G_k`` are taken in one place, and the benchmarks do not edit ``sys.path``."""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

from _helpers import REPO

PACKAGE = REPO / "lightning_sfl"


def _unit(path: Path) -> str:
    """The package (or top-level module) of ``lightning_sfl`` a source file belongs to; ``callbacks/`` is
    ``lightning_sfl.callbacks``."""
    rel = path.relative_to(REPO)
    if rel.parts[0] == "callbacks":
        return "callbacks"
    return rel.parts[1] if len(rel.parts) > 2 else rel.stem


def _imported_unit(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] != "lightning_sfl" or len(parts) == 1:
        return None
    return parts[1].removesuffix(".py")


def import_graph() -> dict[str, dict[str, list[str]]]:
    """Unit -> unit it imports -> where (``file:line``), every ``import`` statement of the package counted (also inside
    functions and ``if TYPE_CHECKING``); the root ``lightning_sfl/__init__.py`` (lazy exports) is left out."""
    graph: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    files = [*PACKAGE.rglob("*.py"), *(REPO / "callbacks").rglob("*.py")]
    for path in files:
        if path == PACKAGE / "__init__.py":
            continue
        source = _unit(path)
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                modules = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                modules = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            else:
                continue
            for module in modules:
                target = _imported_unit(module)
                if target is not None and target != source:
                    graph[source][target].append(f"{path.relative_to(REPO)}:{node.lineno}")
    return graph


def cycles(graph: dict[str, dict[str, list[str]]]) -> list[list[str]]:
    """The strongly connected components with more than one unit (Tarjan).

    >>> cycles({"a": {"b": []}, "b": {"a": []}, "c": {"a": []}})
    [['a', 'b']]
    """
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in list(graph):
        if v not in index:
            visit(v)
    return found


def test_no_package_imports_another_in_a_circle():
    graph = import_graph()
    assert {"algorithms", "loop", "data", "system", "callbacks"} <= set(graph)  # the graph was read
    found = cycles(graph)
    detail = {tuple(c): {s: {t: w for t, w in graph[s].items() if t in c} for s in c} for c in found}
    assert not found, detail


#: The folders of the methods' side of the package: the methods, their runtime, the data, the defences.
METHOD_SIDE = ("lightning_sfl/algorithms", "lightning_sfl/runtime", "lightning_sfl/data", "lightning_sfl/defences")


def module_graph() -> dict[str, dict[str, list[str]]]:
    """Module -> module it imports -> where (``file:line``), every ``import`` statement counted (inside functions and
    ``if TYPE_CHECKING`` too); ``from package import name`` is an import of ``package.name`` where that is a module, of
    ``package`` otherwise (``callbacks/`` is ``lightning_sfl.callbacks``)."""
    files = {p: PACKAGE.parent for p in PACKAGE.rglob("*.py")}
    files.update({p: None for p in (REPO / "callbacks").rglob("*.py")})
    modules: dict[str, Path] = {}
    for path, root in files.items():
        parts = list(path.relative_to(REPO if root is None else root).with_suffix("").parts)
        parts = ["lightning_sfl", *parts] if root is None else parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path

    def known(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for module, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets = [known(a.name) for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                targets = [known(f"{node.module}.{a.name}") for a in node.names]
            else:
                continue
            for target in targets:
                if target is not None and target != module:
                    graph[module][target].append(f"{path.relative_to(REPO)}:{node.lineno}")
    return graph


def test_no_module_imports_another_in_a_circle():
    """Finer than packages: no two modules of the package import each other, directly or through others (a package's
    ``__init__`` counts as a module: a defence's module does not import the package that imports it)."""
    graph = module_graph()
    assert {"lightning_sfl.runtime.shape", "lightning_sfl.algorithms.base"} <= set(graph)  # the graph was read
    found = cycles(graph)
    detail = {tuple(c): {s: {t: w for t, w in graph[s].items() if t in c} for s in c} for c in found}
    assert not found, detail


def test_algorithms_holds_the_methods_and_their_registry_only():
    """Every module of ``lightning_sfl.algorithms`` but the registry defines a method (a ``SplitFedAlgorithm``); the
    runtime they run on is :mod:`lightning_sfl.runtime`."""
    import importlib
    import inspect

    from lightning_sfl.algorithms.base import SplitFedAlgorithm

    without = []
    for path in sorted((PACKAGE / "algorithms").glob("*.py")):
        if path.stem in ("__init__", "registry"):
            continue
        module = importlib.import_module(f"lightning_sfl.algorithms.{path.stem}")
        defined = [c for _, c in inspect.getmembers(module, inspect.isclass) if c.__module__ == module.__name__]
        if not any(issubclass(c, SplitFedAlgorithm) for c in defined):
            without.append(path.name)
    assert not without, without


#: The topology a method declares (``has_server_half``, ``server_copies``, ``supports_tail``) and what it makes
#: (``server_bank``, ``tail``): branched on in the runtime only, which decides through the method's shape
#: (``lightning_sfl/runtime/shape.py``). The system model's ``ClientCosts.tail`` is its own field: the costs of a tail
#: it is handed (0 without one).
TOPOLOGY = {"has_server_half", "server_copies", "supports_tail", "server_bank", "tail"}


def topology_branches(source: str) -> list[int]:
    r"""The lines of ``source`` whose condition (``if``, ``while``, a conditional expression, ``and``/``or``, a
    comprehension's ``if``, ``assert``) reads one of :data:`TOPOLOGY` as an attribute.

    >>> topology_branches("if m.tail is None:\n    pass\nx = m.tail.net\ny = 1 if cls.has_server_half else 2")
    [1, 4]
    """
    lines = set()
    for node in ast.walk(ast.parse(source)):
        tests = []
        if isinstance(node, ast.If | ast.While | ast.IfExp | ast.Assert):
            tests = [node.test]
        elif isinstance(node, ast.BoolOp):
            tests = node.values
        elif isinstance(node, ast.comprehension):
            tests = node.ifs
        for test in tests:
            if any(isinstance(n, ast.Attribute) and n.attr in TOPOLOGY for n in ast.walk(test)):
                lines.add(test.lineno)
    return sorted(lines)


def test_the_topology_is_branched_on_in_the_runtime_only():
    outside = [
        p
        for p in [*PACKAGE.rglob("*.py"), *(REPO / "callbacks").rglob("*.py")]
        if "runtime" not in p.relative_to(PACKAGE.parent).parts and p != PACKAGE / "system" / "timing.py"
    ]
    hits = [f"{p.relative_to(REPO)}:{line}" for p in outside for line in topology_branches(p.read_text())]
    assert not hits, hits
    assert topology_branches((PACKAGE / "runtime" / "shape.py").read_text())  # (the test reads what it should)


def _sources(*folders: str) -> list[Path]:
    return [p for f in folders for p in (REPO / f).rglob("*.py")]


def test_methods_and_the_data_module_never_reach_through_the_trainer():
    pattern = re.compile(r"trainer\.(datamodule|callbacks|lightning_module)\b")
    hits = [
        f"{p.relative_to(REPO)}:{i}"
        for p in _sources(*METHOD_SIDE)
        for i, line in enumerate(p.read_text().splitlines(), 1)
        if pattern.search(line)
    ]
    assert not hits, hits


def trainer_reads(source: str) -> list[int]:
    r"""The lines of ``source`` that read an attribute of a trainer: ``trainer.x``, ``self.trainer.x``,
    ``self._trainer.x``, ``self.dm.trainer.x`` (passing the trainer on, ``f(self.trainer)``, reads nothing).

    >>> trainer_reads("a = self.trainer.max_epochs\nb = view.run_length(self.trainer)\nc = trainer.world_size")
    [1, 3]
    """
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute):
            inner = node.value
            name = inner.id if isinstance(inner, ast.Name) else inner.attr if isinstance(inner, ast.Attribute) else None
            if name in ("trainer", "_trainer"):
                lines.append(node.lineno)
    return sorted(set(lines))


def test_methods_and_the_data_module_read_the_trainer_only_through_its_view():
    """What a method, a defence or the data module knows of its run (stage, run length, device, process group,
    precision, the W&B run) comes from :mod:`lightning_sfl.trainer_view`, the one module that reads a trainer."""
    hits = [
        f"{p.relative_to(REPO)}:{line}"
        for p in _sources(*METHOD_SIDE)
        for line in trainer_reads(p.read_text())
    ]
    assert not hits, hits


def test_the_clients_gradients_are_taken_in_one_place():
    """``autograd.grad`` in the methods' split iteration only (``iteration.py``, and its U-shaped form,
    ``u_shape.py``); of the defences, only the inversion regulariser's update of the clients' own simulated decoders
    (SCALA-PE's) takes one."""
    methods_and_runtime = _sources("lightning_sfl/algorithms", "lightning_sfl/runtime")
    files = {p.name for p in methods_and_runtime if "autograd.grad(" in p.read_text()}
    assert files == {"iteration.py", "u_shape.py"}, files
    files = {p.name for p in _sources("lightning_sfl/defences") if "autograd.grad(" in p.read_text()}
    assert files == {"inversion.py"}, files


def test_every_package_is_in_the_distribution():
    """A package folder missing from ``pyproject.toml``'s list would be left out of a (non-editable) install."""
    import tomllib

    listed = set(tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {".".join(p.parent.relative_to(REPO).parts) for p in PACKAGE.rglob("__init__.py")}
    found |= {"lightning_sfl.callbacks"}  # callbacks/ at the top level (package-dir)
    assert found == listed, found ^ listed


def test_benchmarks_do_not_edit_sys_path():
    pattern = re.compile(r"sys\.path\.(insert|append|extend)|sys\.path\s*[+]?=")
    hits = [p.name for p in _sources("benchmarks") if pattern.search(p.read_text())]
    assert not hits, hits


DOC = REPO / "docs" / "architecture.md"


def test_the_architecture_doc_names_files_that_exist():
    """Every ``file.py`` the doc names is a file of the repository (a path from the root, the package or
    ``tests/``; a bare name: a file of that name somewhere in the package, the tests or the benchmarks)."""
    names = set(re.findall(r"`([\w/]+\.py)`", DOC.read_text()))
    everywhere = {p.name for p in _sources("lightning_sfl", "callbacks", "tests", "benchmarks")}
    missing = [
        n
        for n in sorted(names)
        if not ((REPO / n).is_file() or (PACKAGE / n).is_file() or ("/" not in n and n in everywhere))
    ]
    assert names and not missing, missing


def test_the_architecture_docs_hooks_are_the_base_methods_hooks():
    """The table of hooks names methods of a split method (:class:`SplitMethod`: its own and the base's; the hook
    column: ``name(`` of each row), and the base's public names are those of every method, not a split method's."""
    from lightning import LightningModule

    from lightning_sfl.algorithms.base import SplitFedAlgorithm
    from lightning_sfl.algorithms.split_method import SplitMethod

    public = {n for n in dir(SplitFedAlgorithm) if not n.startswith("_")} - set(dir(LightningModule))
    assert len(public) < 45 and not public & {"client_forward", "server_loss", "send_activations", "split_losses"}

    lines = [line.replace("\\|", "") for line in DOC.read_text().splitlines()]  # (an escaped | inside a cell)
    rows = [line.split("|") for line in lines if line.startswith("| ") and line.count("|") == 6]
    hooks = {h for row in rows if row[3].strip() != "hook" for h in re.findall(r"`(\w+)[(`]", row[3])}
    missing = sorted(h for h in hooks if not callable(getattr(SplitMethod, h, None)))
    assert len(hooks) >= 20 and not missing, (sorted(hooks), missing)


def test_the_worked_example_of_a_method_runs_as_written():
    """The architecture page's "Adding a method" block, executed as it is (``register`` recording instead of adding to
    the library's registry), trains a round on digits; its loss is SCALA's with the labels smoothed."""
    import torch
    from _helpers import quiet_trainer, small_digits

    import lightning_sfl.algorithms as algorithms

    block = re.search(r"## Adding a method.*?```python\n(.*?)```", DOC.read_text(), re.S).group(1)
    registered = {}

    def register(name, **kwargs):
        def keep(cls):
            registered[name] = (cls, kwargs)
            return cls

        return keep

    original = algorithms.register
    algorithms.register = register
    try:
        namespace: dict = {"__name__": "worked_example"}
        exec(compile(block, "docs/architecture.md", "exec"), namespace)
    finally:
        algorithms.register = original
    cls, options = registered["scala_ls"]
    assert options == {"family": "split"} and issubclass(cls, algorithms.SCALA)
    torch.manual_seed(0)
    model = cls(local_iters=1, lr=0.05, missing_class_floor=1e-12, smoothing=0.2)
    quiet_trainer(1).fit(model, small_digits())
    logits, labels = torch.zeros(2, 10), torch.tensor([0, 1])
    assert float(model.cross_entropy(logits, labels, reduction="mean")) == float(torch.log(torch.tensor(10.0)))
    logits[:, 0] = 5.0  # a confident row: smoothing raises its loss above the plain one
    smoothed = model.cross_entropy(logits, labels)
    assert smoothed[0] > torch.nn.functional.cross_entropy(logits, labels, reduction="none")[0]
