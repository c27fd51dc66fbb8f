#!/usr/bin/env python3
"""Source files longer than their limit (issue 50): a non-test Rust file of the crates over
450 lines, or one of flowfs-fs's fs/ (the core's operations) over 350. What counts is the
code before a trailing `#[cfg(test)] mod tests`; test files (`tests/`, `tests.rs`,
`*_tests.rs`) do not count. Prints `LINES LIMIT PATH` for each and exits 1 if there is any."""

from __future__ import annotations

import sys
from pathlib import Path

LIMIT = 450
FS_LIMIT = 350


def is_test(path: Path) -> bool:
    return "tests" in path.parts or path.name == "tests.rs" or path.name.endswith("_tests.rs")


def code_lines(text: str) -> int:
    """Lines before the file's own test module, if it ends with one."""
    lines = text.split("\n")
    for i, line in enumerate(lines):
        if line.strip() == "#[cfg(test)]" and i + 1 < len(lines) and lines[i + 1].startswith("mod tests"):
            return i
    return len(lines) - (1 if text.endswith("\n") else 0)


def limit_of(rel: Path) -> int:
    return FS_LIMIT if rel.parts[:3] == ("flowfs-fs", "src", "fs") else LIMIT


def long_files(root: Path) -> list[tuple[int, int, Path]]:
    found = []
    for path in sorted(root.rglob("src/**/*.rs")):
        rel = path.relative_to(root)
        if is_test(rel):
            continue
        n, limit = code_lines(path.read_text()), limit_of(rel)
        if n > limit:
            found.append((n, limit, rel))
    return found


def main() -> int:
    root = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent.parent / "crates"
    found = long_files(root)
    for n, limit, rel in found:
        print(f"{n} {limit} {rel}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
