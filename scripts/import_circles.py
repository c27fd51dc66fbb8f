#!/usr/bin/env python3
"""Import circles between the modules of each crate under crates/ (issue 50): prints each
circle and exits 1 if there is one.

A module's file imports another when it names it in a `use` or a `crate::`/`super::` path
(through the parent's `pub use` re-exports, to the file that defines the item). A module's
use of its own ancestors (the shared types and constants of the tree it belongs to) is not
an import here, nor is a parent's `pub use` of its children, nor test code (`#[cfg(test)]
mod tests` at a file's end, and files whose name ends in `tests.rs`).

    python3 scripts/import_circles.py
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

CRATES = Path(__file__).resolve().parents[1] / "crates"
Module = tuple[str, ...]


def modules(src: Path) -> dict[Module, str]:
    """Each module of a crate (its path under the crate root) and its code, tests left out."""
    out = {}
    for f in src.rglob("*.rs"):
        if f.name.endswith("tests.rs"):
            continue
        parts = list(f.relative_to(src).with_suffix("").parts)
        if parts[-1] in ("mod", "lib", "main"):
            parts = parts[:-1]
        text = f.read_text()
        cut = text.find("#[cfg(test)]\nmod tests")
        out[tuple(parts)] = text if cut < 0 else text[:cut]
    return out


def expand(tree: str) -> list[str]:
    """The paths of one `use` tree: `a::{b, c::{d, e}}` -> a::b, a::c::d, a::c::e."""
    tree = re.sub(r"\s+", "", re.sub(r"\s+as\s+", "@", tree))
    if "{" not in tree:
        return [p for p in tree.split(",") if p]
    i = tree.index("{")
    depth, j = 0, i
    for j in range(i, len(tree)):
        depth += {"{": 1, "}": -1}.get(tree[j], 0)
        if depth == 0:
            break
    parts, depth, cur = [], 0, ""
    for ch in tree[i + 1:j]:
        depth += {"{": 1, "}": -1}.get(ch, 0)
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    return [p for part in parts if part for p in expand(tree[:i] + part)]


def reexports(mods: dict[Module, str]) -> dict[tuple[Module, str], Module]:
    """(module, name) -> the child module a `pub use child::name` of that module names."""
    out = {}
    for m, text in mods.items():
        for u in re.finditer(r"\bpub(?:\([a-z]+\))?\s+use\s+([^;]+);", text):
            for path in expand(u.group(1)):
                segs = [s for s in path.split("::") if s != "self"]
                if len(segs) >= 2 and m + (segs[0],) in mods:
                    # `pub use child::Item as Name` exports Name.
                    out[(m, segs[-1].split("@")[-1])] = m + tuple(segs[:-1])
    return out


def target(path: str, here: Module, mods, rex) -> Module | None:
    """The module whose file defines what `path`, named in `here`, names."""
    segs = path.split("@")[0].split("::")
    cur: Module = here
    if segs[0] == "crate":
        cur, segs = (), segs[1:]
    elif segs[0] == "super":
        while segs and segs[0] == "super":
            cur, segs = cur[:-1], segs[1:]
    elif segs[0] == "self":
        segs = segs[1:]
    elif here + (segs[0],) not in mods:
        return None  # another crate, or std
    for s in segs:
        if cur + (s,) in mods:
            cur = cur + (s,)
        elif (cur, s) in rex:
            cur = rex[(cur, s)]
        else:
            break
    return cur


def edges(mods: dict[Module, str]) -> dict[Module, set[Module]]:
    rex = reexports(mods)
    out: dict[Module, set[Module]] = {m: set() for m in mods}
    for m, text in mods.items():
        paths = [p for u in re.finditer(r"(?<![a-z)] )\buse\s+([^;]+);", text) for p in expand(u.group(1))]
        paths += re.findall(r"\b((?:crate|super)(?:::[A-Za-z_][A-Za-z0-9_]*)+)", text)
        for p in paths:
            t = target(p, m, mods, rex)
            if t is not None and t != m and t in mods and m[:len(t)] != t:
                out[m].add(t)
    return out


def circles(graph: dict[Module, set[Module]]) -> list[list[Module]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[Module, int] = {}
    low: dict[Module, int] = {}
    stack: list[Module] = []
    on: set[Module] = set()
    found = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    found.append(sorted(comp))
    return found


def main() -> int:
    bad = 0
    for crate in sorted(p for p in CRATES.iterdir() if (p / "src").is_dir()):
        for c in circles(edges(modules(crate / "src"))):
            bad += 1
            print(f"{crate.name}: " + " <-> ".join("/".join(m) or "lib" for m in c))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
