"""Every runnable block of the tutorials (``docs/tutorials/*.md``) runs, top to bottom, as a reader would run it.

The rule, page by page, in the page's order:

- A ```` ```bash ```` block is commands: every line that is not blank or a comment is one (a trailing backslash
  continues it) and must exit 0. ``lightning-sfl ...`` runs through the console script's entry point
  (:func:`lightning_sfl.cli.main`) in one warm Python process, its words expanded by bash first (quotes, globs,
  ``NAME=value`` prefixes: the command line a shell would run); a ``fit`` with ``--trainer.strategy ddp...`` starts
  processes of its own and so runs as the console script itself; any other command runs in bash.
- A ```` ```python ```` block is executed in that warm process (one namespace per page, like a notebook), with the
  page's folder importable, as for a script there.
- A block with a ``:caption:`` that names a file (a MyST ``{code-block}``) is that file: it is written into the
  page's folder, where the commands after it find it.
- A ```` ```text ```` block right after a run block is what that block prints: each of its lines must appear in
  the output, in order, with the same words and numbers: a whole number (a count, a round) as it is, a decimal to
  within :data:`TOLERANCE` (0.02, or 2 % of a number above 1: another CPU's float kernels may differ in the last bits
  over a few rounds; on the machine that wrote the page they agree exactly). ``…`` stands for what differs from run to
  run or from version to version (a configuration's hash, a W&B run's id, a date), or, alone on a line, for lines
  left out. A ```` ```text ```` block anywhere else is not output (a folder's layout):
  ``<!-- not output: <what it is> -->`` right before it says so.
- A bash or python block right after ``<!-- not run: <reason> -->`` is not run (a GPU, a SLURM cluster, a W&B
  account or network): its ``lightning-sfl`` lines must parse with that subcommand's own parser (``fit``,
  ``validate``, ``test``: ``--print_config``), its ``wandb`` lines with W&B's own command line (click), the files
  its other commands name must be files of the page, and a python block must compile.

Each page runs in a folder of its own under ``tmp_path`` (links to the repository's ``configs/`` and ``sweeps/``:
the pages write commands from the repository's root), with W&B offline. The one change to what a page says is
:data:`SHORTER`; what a page shows after a fit it shortens, up to the next fit run as written, is left unchecked there
(what it shows is the output of the page as written) and checked under ``-m extended``, which runs those pages as
written. A page that the toctree of ``docs/tutorials/index.md`` does not list, a page of which no bash or python
block is run, a ``not run`` mark without a reason or without its block, and a text block that is neither output nor
marked fail too.
"""

from __future__ import annotations

import json
import os
import re
import select
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TUTORIALS = REPO / "docs" / "tutorials"
PAGES = sorted(TUTORIALS.glob("*.md"))
BIN = Path(sys.executable).parent

#: Appended to every ``lightning-sfl fit`` that is run and names no ``--trainer.max_epochs`` itself (the pages show the
#: configs' own round counts, e.g. the main job's 100 rounds; everything else on a page is run as written).
SHORTER = ("--trainer.max_epochs=2",)
#: How far a decimal the page shows may be from the one the run prints: ``TOLERANCE`` up to 1 (accuracies, SSIM),
#: ``TOLERANCE`` times the number above it (percentages, seconds, MB, dB).
TOLERANCE = 0.02
#: Options after which a command only prints (help, the resolved config): nothing to shorten.
ONLY_PARSE = ("-h", "--help", "--model.help", "--print_config")
#: Commands a not-run block may name besides ``lightning-sfl`` and ``wandb`` (checked: ``bash -n``, and every file
#: argument is a file of the page).
EXTERNAL = {"sbatch": "SLURM's job submission"}
#: Seconds one command or python block may take.
BLOCK_TIMEOUT = 600

NOT_RUN = re.compile(r"<!--\s*not run:\s*(?P<reason>.*?)\s*-->", re.S)
NOT_OUTPUT = re.compile(r"<!--\s*not output:\s*(?P<what>.*?)\s*-->", re.S)
FENCE = re.compile(r"^(?P<indent> *)(?P<fence>`{3,}|~{3,})(?P<info>[^`\n]*)$")


# ------------------------------------------------------------------------------------------ reading the pages
@dataclass
class Block:
    """One fenced block of a page."""

    page: Path
    line: int  # 1-based line of the opening fence
    lang: str  # "bash", "python", "text", ... (a ``{code-block}``'s argument)
    body: str
    caption: str | None = None  # a ``{code-block}``'s ``:caption:``
    not_run: str | None = None  # the reason of a ``<!-- not run: ... -->`` right before it
    not_output: str | None = None  # what a text block is, from a ``<!-- not output: ... -->`` right before it
    after_run: bool = False  # right after a bash or python block (only blank lines between)

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(REPO)}:{self.line}"

    @property
    def is_file(self) -> bool:
        return self.caption is not None and re.fullmatch(r"[\w.-]+", self.caption) is not None

    @property
    def runnable(self) -> bool:
        return self.lang in ("bash", "python") and not self.is_file


def read_blocks(page: Path) -> list[Block]:
    """The fenced blocks of ``page``, in order (MyST fences of backticks or tildes; a ``{code-block}`` directive's
    options ``:caption:`` and others are read off its first lines)."""
    lines = page.read_text().splitlines()
    blocks: list[Block] = []
    i, last_end, last_runnable = 0, -1, False
    while i < len(lines):
        match = FENCE.match(lines[i])
        if not match:
            i += 1
            continue
        fence, indent, info = match["fence"], len(match["indent"]), match["info"].strip()
        end = i + 1
        while end < len(lines) and not re.fullmatch(rf" {{0,{indent + 3}}}{fence[0]}{{{len(fence)},}}\s*", lines[end]):
            end += 1
        body = [line[indent:] for line in lines[i + 1 : end]]
        lang, caption = info, None
        directive = re.fullmatch(r"\{(code-block|code|sourcecode)\}\s*(\S*)", info)
        if directive:
            lang = directive[2]
            while body and body[0].startswith(":"):
                option, _, value = body.pop(0)[1:].partition(":")
                if option.strip() == "caption":
                    caption = value.strip()
        before = "\n".join(lines[last_end + 1 : i])
        right_before = not before[before.rfind("-->") + 3 :].strip()
        marks, others = NOT_RUN.findall(before), NOT_OUTPUT.findall(before)
        not_run = marks[-1] if marks and right_before else None
        not_output = others[-1] if others and right_before else None
        between_blank = not before.strip()
        block = Block(page, i + 1, lang, "\n".join(body) + "\n", caption, not_run, not_output,
                      between_blank and last_runnable)  # fmt: skip
        blocks.append(block)
        last_runnable = block.runnable and block.not_run is None
        last_end, i = end, end + 1
    return blocks


def command_lines(body: str) -> list[str]:
    """The commands of a bash block: lines joined over trailing backslashes, without blank and comment lines (a
    comment after a command stays: bash drops it)."""
    joined = re.sub(r"\\\n\s*", " ", body)
    return [line.strip() for line in joined.splitlines() if line.strip() and not line.strip().startswith("#")]


def toctree_entries(index: Path) -> list[str]:
    """The documents the ``{toctree}`` directives of ``index`` list (options and blank lines skipped)."""
    entries = []
    for block in read_blocks(index):
        if block.lang == "{toctree}":
            entries += [ln.strip() for ln in block.body.splitlines() if ln.strip() and not ln.strip().startswith(":")]
    return entries


# ------------------------------------------------------------------------------------------ the warm process
_SERVER = textwrap.dedent(
    r"""
    import json, os, resource, sys, time, traceback, warnings
    from lightning_sfl.cli import main

    requests = os.fdopen(os.dup(0), "r")
    replies = os.fdopen(os.dup(1), "w")
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
    sys.path[:] = [p for p in sys.path if p not in ("", os.getcwd())]  # as for the console script: the working
    namespaces = {}                                                       # folder is not importable


    def cpu():
        own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


    def wandb_parses(argv):
        import click
        from wandb.cli.cli import cli

        group, ctx = cli, cli.make_context("wandb", list(argv))
        while isinstance(group, click.Group):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)
                tokens = [*getattr(ctx, "protected_args", []), *ctx.args]
            if not tokens:
                break
            name, group, rest = group.resolve_command(ctx, tokens)
            ctx = group.make_context(name, rest, parent=ctx)


    def parses(argv):
        if argv[0] == "wandb":
            return wandb_parses(argv[1:])
        sub, args = argv[1], argv[2:]
        if sub in ("fit", "validate", "test"):
            main([sub, *args, "--print_config"])  # the LightningCLI's own parser; exits 0 after printing the config
        elif sub == "compare":
            from lightning_sfl.compare.options import parse_args

            parse_args(args)
        elif sub == "sweep":
            from lightning_sfl.sweep.run import build_parser, read_sweep

            read_sweep(build_parser().parse_args(args[: args.index("--")] if "--" in args else args).sweep)
        elif sub == "attack":
            from lightning_sfl.attack import check_args, parse_args

            check_args(parse_args(args))
        else:
            main(argv[1:])


    for line in requests:
        request = json.loads(line)
        os.chdir(request["cwd"])
        saved_env, saved_path = dict(os.environ), list(sys.path)
        os.environ.update(request["env"])
        sys.path[:0] = request["path"]
        start, cpu0 = time.perf_counter(), cpu()
        with open(request["out"], "w") as out:
            sys.stdout.flush(); sys.stderr.flush()
            saved = os.dup(1), os.dup(2)
            os.dup2(out.fileno(), 1); os.dup2(out.fileno(), 2)
            try:
                if request["kind"] == "cli":
                    try:
                        main(request["argv"])
                    finally:  # as the process's exit would: its W&B runs finish before the next command reads them
                        from lightning_sfl.wandb import process as wandb_process

                        wandb_process.finish_all(0 if sys.exc_info()[0] is None else 1)
                        wandb_process.reap(block=True)
                elif request["kind"] == "parse":
                    parses(request["argv"])
                else:
                    namespace = namespaces.setdefault(request["page"], {"__name__": "__main__"})
                    exec(compile(request["code"], request["name"], "exec"), namespace)
                code = 0
            except SystemExit as exc:
                code = 0 if exc.code is None else exc.code if isinstance(exc.code, int) else 1
            except BaseException:
                code = None
                traceback.print_exc()
            sys.stdout.flush(); sys.stderr.flush()
            os.dup2(saved[0], 1); os.dup2(saved[1], 2)
            os.close(saved[0]); os.close(saved[1])
        os.environ.clear(); os.environ.update(saved_env)
        sys.path[:] = saved_path
        replies.write(json.dumps({"code": code, "seconds": time.perf_counter() - start, "cpu": cpu() - cpu0}) + "\n")
        replies.flush()
    """
)


class WarmProcess:
    """A Python process that imports the CLI once and runs requests (a command line, a parse, a python block) one
    after another, each in its folder with its output in a file of its own."""

    def __init__(self, env: dict[str, str], cwd: Path) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", _SERVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True, env=env, cwd=cwd)  # fmt: skip

    def run(self, timeout: float = BLOCK_TIMEOUT, **request) -> dict:
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        reply = self.proc.stdout.readline() if ready else ""
        if not reply:
            self.proc.kill()
            raise AssertionError(f"the warm process gave no answer in {timeout} s (exit code {self.proc.poll()})")
        return json.loads(reply)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def page_env() -> dict[str, str]:
    """This process's environment, W&B offline, the environment's console scripts first on ``PATH``."""
    env = {**os.environ, "WANDB_MODE": "offline", "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    env.pop("PYTHONPATH", None)  # what a page's commands import is what they say (PYTHONPATH=. ...)
    return env


@pytest.fixture(scope="module")
def warm(tmp_path_factory):
    process = WarmProcess(page_env(), tmp_path_factory.mktemp("warm"))
    yield process
    process.close()


# ------------------------------------------------------------------------------------------ running a page
ASSIGNMENT = r"[A-Za-z_]\w*=\S*"


@dataclass
class PageRun:
    """Runs a page's blocks in its folder; keeps, per command, its exit code and cost (:attr:`log`)."""

    folder: Path
    warm: WarmProcess
    shorter: tuple[str, ...] = SHORTER  # () : the page as written
    log: list[str] = field(default_factory=list)
    seconds: float = 0.0
    shortened: bool = False  # the latest fit ran shorter than the page says
    unchecked: list[str] = field(default_factory=list)  # the text blocks shown after a shortened fit

    def expand(self, line: str) -> tuple[dict[str, str], list[str]]:
        """``NAME=value ... PROGRAM ARGS`` as bash expands it in the page's folder (quotes, globs, variables; a
        trailing comment dropped): the environment it sets and the argument list, the program first."""
        match = re.fullmatch(rf"((?:{ASSIGNMENT}\s+)*)(.*)", line)
        script = f"printf '%s\\0' {match[1]} __COMMAND__ {match[2]}"
        proc = subprocess.run(["bash", "-c", script], cwd=self.folder, capture_output=True, text=True)
        assert proc.returncode == 0, f"bash cannot expand `{line}`: {proc.stderr}"
        words = proc.stdout.split("\0")[:-1]
        cut = words.index("__COMMAND__")
        return dict(w.split("=", 1) for w in words[:cut]), words[cut + 1 :]

    def record(self, what: str, code, seconds: float, cpu: float | None, out: str) -> tuple[int | None, str]:
        self.seconds += seconds
        cost = f"{seconds:.1f} s" + ("" if cpu is None else f", {cpu:.1f} s CPU in the warm process")
        self.log.append(f"[exit {code}; {cost}] {what}")
        return code, out

    def in_warm(self, what: str, kind: str, env: dict[str, str] | None = None, **request) -> tuple[int | None, str]:
        out = self.folder.parent / f"out.{len(self.log)}.txt"  # beside the folder: no command finds it there
        python_path = [str((self.folder / p).resolve()) for p in (env or {}).get("PYTHONPATH", "").split(":") if p]
        request.setdefault("path", python_path)
        reply = self.warm.run(kind=kind, cwd=str(self.folder), out=str(out), env=env or {}, **request)
        return self.record(what, reply["code"], reply["seconds"], reply["cpu"], out.read_text())

    def in_shell(self, what: str, argv: list[str], env: dict[str, str] | None = None) -> tuple[int | None, str]:
        start = time.perf_counter()
        env = {**page_env(), **(env or {})}
        proc = subprocess.run(argv, cwd=self.folder, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, timeout=BLOCK_TIMEOUT)  # fmt: skip
        return self.record(what, proc.returncode, time.perf_counter() - start, None, proc.stdout)

    # ---------------------------------------------------------------- the blocks
    def run_bash(self, block: Block) -> str:
        """Every command of ``block``, in order; each must exit 0. Returns what they printed."""
        printed = []
        for line in command_lines(block.body):
            assert not re.match(r"(cd|export|source|\.)\s", line), f"{block.where}: `{line}` would change nothing"
            if not re.match(rf"(?:{ASSIGNMENT}\s+)*lightning-sfl(\s|$)", line):
                code, out = self.in_shell(line, ["bash", "-c", line])
            else:
                assert not re.search(r"[|;&<>`]|\$\(", line), f"{block.where}: one plain command a line: `{line}`"
                env, argv = self.expand(line)
                args = argv[1:]
                if args[:1] == ["fit"] and not any(a.startswith(ONLY_PARSE) for a in args):
                    self.shortened = bool(self.shorter) and not any(a.startswith("--trainer.max_epochs") for a in args)
                    args += list(self.shorter) if self.shortened else []
                if re.search(r"--trainer\.strategy[= ]ddp", " ".join(args)):  # starts processes: the console script
                    code, out = self.in_shell(line, [str(BIN / "lightning-sfl"), *args], env)
                else:
                    code, out = self.in_warm(line, "cli", env, argv=args)
            printed.append(out)
            assert code == 0, f"{block.where}: `{line}` exited with {code}:\n{out[-4000:]}"
        return "".join(printed)

    def run_python(self, block: Block) -> str:
        code, out = self.in_warm(f"python block at {block.where}", "python", code=block.body, name=block.where,
                                 page=str(self.folder), path=[str(self.folder)])  # fmt: skip
        assert code == 0, f"{block.where}: the python block failed:\n{out[-4000:]}"
        return out

    def parse_bash(self, block: Block) -> None:
        """A not-run block: each command parses with its own command line's parser (see the module docstring)."""
        for line in command_lines(block.body):
            env, argv = self.expand(line)
            if argv[0] in ("lightning-sfl", "wandb"):
                code, out = self.in_warm(f"(parsed) {line}", "parse", env, argv=argv)
            else:
                assert argv[0] in EXTERNAL, f"{block.where}: `{argv[0]}` is not a command this test knows how to check"
                files = [w for w in argv[1:] if not w.startswith("-")]
                missing = [f for f in files if not (self.folder / f).is_file()]
                assert not missing, f"{block.where}: `{line}` names {missing}, which are not files of the page"
                code, out = self.in_shell(f"(bash -n) {line}", ["bash", "-n", *files])
            assert code == 0, f"{block.where}: `{line}` does not parse:\n{out[-3000:]}"

    def write_file(self, block: Block) -> None:
        """A file of the page; a shell script's ``lightning-sfl`` commands must parse."""
        (self.folder / block.caption).write_text(block.body)
        if block.lang == "bash":
            for line in command_lines(block.body):
                found = re.search(r"lightning-sfl\s.*", line)
                if found:
                    self.parse_bash(Block(block.page, block.line, "bash", found[0] + "\n"))


#: A number of a shown line: not part of a name (``s2``, ``quantity2``, ``dirichlet0.1`` and ``1x8x8`` are words).
NUMBER = re.compile(r"(?<![\w.])[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?(?![\w.]*\w)")


def shown_line(want: str) -> tuple[re.Pattern, list[str]]:
    """A shown line as a pattern of a printed line (``…``: any text; a whole number as it is; a decimal: any
    number, captured) and its decimals, in order.

    >>> pattern, decimals = shown_line("final test accuracy: 0.9611 after 100 rounds (run …)")
    >>> pattern.fullmatch("final test accuracy: 0.9583 after 100 rounds (run 3f2a)")[1], decimals
    ('0.9583', ['0.9611'])
    >>> pattern.fullmatch("final test accuracy: 0.9611 after 2 rounds (run 3f2a)") is None
    True
    >>> pattern = shown_line("mu >= 0. (type: float)")[0]
    >>> bool(pattern.fullmatch("mu >= 0. (type: float)")), bool(pattern.fullmatch("mu >= 0.5 (type: float)"))
    (True, False)
    """
    regex, decimals = [], []
    for i, part in enumerate(want.split("…")):
        regex.append(".*?" if i else "")
        at = 0
        for number in NUMBER.finditer(part):
            regex.append(re.escape(part[at : number.start()]))
            if re.fullmatch(r"[-+]?\d+", number[0]):
                regex.append(re.escape(number[0]) + r"(?!\.?\d)")
            else:
                regex.append(r"([-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)")
                decimals.append(number[0])
            at = number.end()
        regex.append(re.escape(part[at:]))
    return re.compile("".join(regex)), decimals


def agrees(shown: str, printed: str) -> bool:
    """``printed`` is ``shown`` to within :data:`TOLERANCE` (absolute up to 1, relative above).

    >>> agrees("0.9611", "0.9583"), agrees("0.9611", "0.9"), agrees("85.21", "86.3"), agrees("85.21", "88.0")
    (True, False, True, False)
    """
    return abs(float(printed) - float(shown)) <= TOLERANCE * max(1.0, abs(float(shown))) + 1e-12


def expected_output(shown: str, printed: str, where: str) -> None:
    """Each non-blank line of ``shown`` matches a whole line of ``printed``, in order (:func:`shown_line`), and its
    decimals agree with the printed ones (:func:`agrees`)."""
    lines = [line.strip() for line in printed.splitlines()]
    at = 0
    for want in (w.strip() for w in shown.splitlines() if w.strip()):
        pattern, decimals = shown_line(want)
        found = next((i for i in range(at, len(lines)) if pattern.fullmatch(lines[i])), None)
        assert found is not None, f"{where}: the output shown has {want!r}, which the commands above it did not " \
            f"print (in this order):\n{printed[-3000:]}"  # fmt: skip
        got = pattern.fullmatch(lines[found]).groups()
        off = [(s, g) for s, g in zip(decimals, got) if not agrees(s, g)]
        assert not off, f"{where}: the output shown has {want!r}; the commands above it printed {lines[found]!r} " \
            f"(shown, printed: {off}; tolerance {TOLERANCE})"  # fmt: skip
        at = found + 1


def run_page(page: Path, folder: Path, warm: WarmProcess, shorter: tuple[str, ...] = SHORTER) -> PageRun:
    folder.mkdir(parents=True)
    for shared in ("configs", "sweeps"):
        (folder / shared).symlink_to(REPO / shared, target_is_directory=True)
    run = PageRun(folder, warm, shorter)
    printed = ""
    for block in read_blocks(page):
        if block.is_file:
            run.write_file(block)
        elif block.lang == "bash" and block.not_run is None:
            printed = run.run_bash(block)
        elif block.lang == "python" and block.not_run is None:
            printed = run.run_python(block)
        elif block.lang == "bash":
            run.parse_bash(block)
        elif block.lang == "python":
            compile(block.body, block.where, "exec")
        elif block.lang == "text" and block.after_run and run.shortened:
            run.unchecked.append(block.where)
        elif block.lang == "text" and block.after_run:
            expected_output(block.body, printed, block.where)
    return run


def shortened_fits(page: Path) -> list[str]:
    """The fits of ``page`` that :data:`SHORTER` shortens (run, and naming no ``--trainer.max_epochs``)."""
    return [line for block in read_blocks(page) if block.lang == "bash" and block.not_run is None
            for line in command_lines(block.body) if re.match(rf"(?:{ASSIGNMENT}\s+)*lightning-sfl\s+fit\s", line)
            and not any(word.startswith((*ONLY_PARSE, "--trainer.max_epochs")) for word in line.split())]  # fmt: skip


# ------------------------------------------------------------------------------------------ the tests
def test_the_toctree_lists_every_page_and_only_pages():
    listed = toctree_entries(TUTORIALS / "index.md")
    pages = sorted(p.stem for p in PAGES if p.name != "index.md")
    assert pages and sorted(listed) == pages, f"the toctree of tutorials/index.md lists {listed}; the pages: {pages}"


@pytest.mark.parametrize("page", PAGES, ids=[p.stem for p in PAGES])
def test_every_page_runs_a_block_and_every_mark_says_why(page):
    blocks = read_blocks(page)
    assert any(b.runnable and b.not_run is None for b in blocks), f"{page.name}: no bash or python block is run"
    marked = [b for b in blocks if b.not_run is not None]
    assert len(NOT_RUN.findall(page.read_text())) == len(marked), f"{page.name}: a `not run` mark right before no block"
    for block in marked:
        assert block.runnable, f"{block.where}: a `not run` mark on a {block.lang} block (bash or python only)"
        assert len(block.not_run.split()) >= 2, f"{block.where}: a `not run` mark says why, in words"
    odd = [b.where for b in blocks if b.lang in ("sh", "shell", "console", "zsh", "py", "python3", "pycon")]
    assert not odd, f"{odd}: write commands as bash, code as python and what they print as text"
    said = [b for b in blocks if b.not_output is not None]
    assert len(NOT_OUTPUT.findall(page.read_text())) == len(said), f"{page.name}: a `not output` mark before no block"
    for block in said:
        assert block.lang == "text" and not block.after_run, f"{block.where}: a `not output` mark on output or code"
        assert len(block.not_output.split()) >= 2, f"{block.where}: a `not output` mark says what the block is"
    unsaid = [b.where for b in blocks if b.lang == "text" and not b.after_run and b.not_output is None]
    assert not unsaid, f"{unsaid}: a text block right after no run block is checked against nothing: put it right " \
        "after the block whose output it is, or mark it <!-- not output: what it is -->"  # fmt: skip


#: Pages whose runs are left out of CI (``pytest -m extended`` runs them, as written) to keep it within 15 minutes on
#: two cores, with what checks the same in CI: ddp-and-slurm ~45 s (two DDP processes and a submitit job; test_ddp's
#: SCALA case), privacy ~40 s (test_attack, test_fsha, test_splitguard), asynchronous ~80 s as written (GAS's 100
#: rounds; test_gas, test_fedbuff), sweeps ~35 s (test_sweeps, test_sweep_offline, test_trial_status),
#: semi-supervised ~22 s (test_semi_sfl, test_semi_baselines, the registry-driven tests of the semi family).
EXTENDED = ("ddp-and-slurm", "privacy", "asynchronous", "sweeps", "semi-supervised")


@pytest.mark.parametrize(
    "page",
    [pytest.param(p, marks=pytest.mark.extended) if p.stem in EXTENDED else p for p in PAGES],
    ids=[p.stem for p in PAGES],
)
def test_every_runnable_block_runs(page, warm, tmp_path):
    """Every page runs and prints what it shows (an extended page as written; in CI, the output shown after a fit
    :data:`SHORTER` shortens is left to the test below)."""
    run = run_page(page, tmp_path / "work", warm, () if page.stem in EXTENDED else SHORTER)
    unchecked = f"\nleft to -m extended (after a shortened fit): {run.unchecked}" if run.unchecked else ""
    print(f"{page.name}: {run.seconds:.1f} s\n" + "\n".join(run.log) + unchecked)


#: The pages run in CI whose fits :data:`SHORTER` shortens: first-run (the main job's 100 rounds, ~35 s more on two
#: cores).
AS_WRITTEN = [p for p in PAGES if p.stem not in EXTENDED and shortened_fits(p)]


@pytest.mark.extended  # first-run ~60 s on two cores; in CI: the page with its first fit at 2 rounds (above)
@pytest.mark.parametrize("page", AS_WRITTEN, ids=[p.stem for p in AS_WRITTEN])
def test_a_page_cut_short_in_ci_prints_what_it_shows_as_written(page, warm, tmp_path):
    """The output a page shows after a fit that CI shortens is the output of the page as written (the numbers
    to within :data:`TOLERANCE`): the main job's final accuracy after its 100 rounds, the checkpoint it evaluates."""
    assert [p.stem for p in AS_WRITTEN] == ["first-run"], AS_WRITTEN  # a new one: say its cost above
    run = run_page(page, tmp_path / "work", warm, shorter=())
    assert not run.unchecked
    print(f"{page.name} as written: {run.seconds:.1f} s\n" + "\n".join(run.log))
