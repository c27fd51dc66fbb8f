#!/usr/bin/env python3
"""Functions longer than a limit (default 80 lines, issue 50) in the crates' non-test Rust
sources: from the `fn` line to its closing brace. Prints `LINES PATH:LINE NAME` for each and
exits 1 if there is any. A declaration without a body (a trait's) is not a function here."""

from __future__ import annotations

import re
import sys
from pathlib import Path

FN = re.compile(r"^\s*(pub(\([^)]*\))? )?(const )?(async )?(unsafe )?fn (\w+)")


def is_test(path: Path) -> bool:
    return "tests" in path.parts or path.name == "tests.rs"


def functions(lines: list[str]):
    """(first line index, length, name) of every function with a body."""
    i = 0
    while i < len(lines):
        m = FN.match(lines[i])
        if not m:
            i += 1
            continue
        depth, opened, j = 0, False, i
        while j < len(lines):
            code = lines[j].split("//")[0]
            if not opened and code.rstrip().endswith(";"):
                break  # a declaration
            depth += code.count("{") - code.count("}")
            opened = opened or "{" in code
            if opened and depth <= 0:
                yield i, j - i + 1, m.group(6)
                break
            j += 1
        i += 1 if not opened else 1


def main() -> int:
    limit = int(sys.argv[1]) if len(sys.argv) > 1 else 80
    root = Path(__file__).resolve().parent.parent / "crates"
    long = []
    for path in sorted(root.rglob("src/**/*.rs")):
        if is_test(path.relative_to(root)):
            continue
        lines = path.read_text().split("\n")
        for start, n, name in functions(lines):
            if n > limit:
                long.append((n, f"{path.relative_to(root.parent)}:{start + 1}", name))
    for n, where, name in sorted(long, reverse=True):
        print(f"{n} {where} {name}")
    return 1 if long else 0


if __name__ == "__main__":
    sys.exit(main())
