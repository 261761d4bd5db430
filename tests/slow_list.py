"""Writes ``tests/slow.txt`` from the durations pytest prints: every test whose setup, call and teardown took
``--seconds`` or more (default 1.5) on the machine that ran it.

Run (the whole CI selection, on two cores, so the list matches what CI runs)::

    .venv/bin/python -m pytest -q -n auto --dist worksteal --durations=0 > durations.log
    .venv/bin/python tests/slow_list.py durations.log > tests/slow.txt

then add the tests that are new since (a test missing from the list runs in the quick command).

``conftest.py`` marks the tests listed there ``slow``; the quick command leaves them out (README, "Run the tests").
"""

from __future__ import annotations

import argparse
import collections
import re

DURATION = re.compile(r"([\d.]+)s (call|setup|teardown)\s+(\S+)")


def slow_tests(lines, seconds: float) -> list[str]:
    """The node ids whose phases add up to ``seconds`` or more, in pytest's ``--durations`` lines; `` setup`` follows
    those whose setup alone took that long (a fixture built once for several tests: ``conftest.py`` marks the tests
    sharing it too).

    >>> slow_tests(["2.50s call     tests/a.py::t", "0.10s setup    tests/a.py::u", "2.5s setup tests/a.py::v"], 2)
    ['tests/a.py::t', 'tests/a.py::v setup']
    """
    total: collections.Counter[str] = collections.Counter()
    setup: collections.Counter[str] = collections.Counter()
    for line in lines:
        found = DURATION.match(line.strip())
        if found:
            total[found.group(3)] += float(found.group(1))
            setup[found.group(3)] += float(found.group(1)) if found.group(2) == "setup" else 0.0
    slow = [node for node, spent in total.items() if spent >= seconds]
    return sorted(node + (" setup" if setup[node] >= seconds else "") for node in slow)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("durations", help="a file holding pytest's --durations=0 output")
    parser.add_argument("--seconds", type=float, default=1.5, help="a test this slow or slower is listed (default 1.5)")
    args = parser.parse_args()
    with open(args.durations) as lines:
        found = slow_tests(lines, args.seconds)
    print(f"# Tests marked slow (conftest.py), left out of the quick command: each took {args.seconds:g} s or more on")
    print("# two cores; ' setup': its setup alone did. Written by tests/slow_list.py from pytest's --durations=0.")
    print("\n".join(found))


if __name__ == "__main__":
    main()
