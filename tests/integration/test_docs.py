"""The docs name what exists (issue 50): every test SEMANTICS.md cites as the proof of a
promise is a test in the repository, and every source file and type ARCHITECTURE.md names is
there. No mount, no server: a renamed test or a moved type fails here, not in a reader's
hands."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# Names ARCHITECTURE.md gives that are not this repository's: fuser's errno for what a file
# system does not implement and its example, prometheus-client's metric family, the manifest.
EXTERNAL = {"ENOSYS", "simple.rs", "Family", "Cargo"}
CRATES = ROOT / "crates"
INTEGRATION = ROOT / "tests" / "integration"


def _rust_fns(files) -> set[str]:
    names = set()
    for f in files:
        names.update(re.findall(r"\bfn\s+([a-z_][a-z0-9_]*)", f.read_text()))
    return names


def _cited_tests() -> list[tuple[str, str, str]]:
    """(where, path, name) of every test SEMANTICS.md cites inside `(tests: ...)`."""
    text = (ROOT / "docs" / "SEMANTICS.md").read_text()
    out = []
    for group in re.findall(r"\(tests: (.*?)\)(?:[ .;,]|$)", text, re.S | re.M):
        for m in re.finditer(r"(test_[a-z0-9_]+\.py)::(test_[a-z0-9_]+)", group):
            out.append(("py", m.group(1), m.group(2)))
        for m in re.finditer(r"\b(flowfs(?:-[a-z]+)?) (src|tests/[a-z_]+) ([a-z0-9_:]+)", group):
            out.append((m.group(1), m.group(2), m.group(3)))
    return out


def test_every_test_semantics_cites_exists():
    cited = _cited_tests()
    assert len(cited) > 300, f"only {len(cited)} citations found: has the format changed?"
    py = {f.name: set(re.findall(r"^def (test_[a-z0-9_]+)", f.read_text(), re.M))
          for f in INTEGRATION.glob("test_*.py")}
    rust: dict[tuple[str, str], set[str]] = {}
    missing = []
    for where, path, name in cited:
        if where == "py":
            ok = name in py.get(path, set())
        else:
            key = (where, path)
            if key not in rust:
                rust[key] = _rust_fns((CRATES / where / path).rglob("*.rs"))
            ok = name.split("::")[-1] in rust[key]
        if not ok:
            missing.append(f"{where} {path} {name}")
    assert not missing, "SEMANTICS.md cites tests that do not exist:\n" + "\n".join(sorted(set(missing)))


def test_every_file_and_name_architecture_gives_exists():
    """Every source file ARCHITECTURE.md names is there, and every type, field, method or
    constant it names in backquotes (`DiskCache`, `CacheEntry::lock_fetch`, `SMALL`) is a
    word of the code (Rust, or the Python of the tests and benchmarks)."""
    text = (ROOT / "docs" / "ARCHITECTURE.md").read_text()
    files = [p for p in ROOT.glob("**/*") if p.suffix in (".rs", ".py") and "target" not in p.parts
             and ".git" not in p.parts]
    paths = {str(p.relative_to(ROOT)) for p in files}
    words = set()
    for p in files:
        words.update(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", p.read_text(errors="replace")))
    missing = []
    for path in set(re.findall(r"\b((?:[a-z_][a-z0-9_.-]*/)*[a-z_0-9]+\.(?:rs|py))\b", text)):
        if path not in EXTERNAL and not any(r == path or r.endswith("/" + path) for r in paths):
            missing.append(f"file {path}")
    for ty, fn in set(re.findall(r"`([A-Z][A-Za-z0-9_]+)(?:::([a-z_][a-z0-9_]*))?", text)):
        for w in (ty, fn):
            if w and w not in words and w not in EXTERNAL:
                missing.append(f"name {ty}::{fn}" if fn else f"name {ty}")
    assert len(paths) > 100 and len(re.findall(r"\.rs\b", text)) > 50, "has the format changed?"
    assert not missing, "ARCHITECTURE.md names what is not in the code:\n" + "\n".join(sorted(missing))
