"""The docs name what exists (issue 50): every test SEMANTICS.md's appendix cites as the proof
of a promise is a test in the repository, every `[Tn]` reference in its text has an entry in
that appendix and every entry is referred to, and every source file and type ARCHITECTURE.md
names is there. No mount, no server: a renamed test or a moved type fails here, not in a
reader's hands."""

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


APPENDIX = "## Appendix: the tests behind each promise"


def _semantics() -> tuple[str, dict[int, str]]:
    """SEMANTICS.md's text before its appendix, and the appendix's entries: the number of
    `- **Tn** *what it is about*: tests...` and the rest of its line."""
    text = (ROOT / "docs" / "SEMANTICS.md").read_text()
    assert text.count(APPENDIX) == 1, f"SEMANTICS.md has no single '{APPENDIX}'"
    body, appendix = text.split(APPENDIX)
    entries: dict[int, str] = {}
    for n, rest in re.findall(r"^- \*\*T(\d+)\*\* (.*)$", appendix, re.M):
        assert int(n) not in entries, f"T{n} has two entries in the appendix"
        entries[int(n)] = rest
    return body, entries


def _cited_tests() -> list[tuple[str, str, str]]:
    """(where, path, name) of every test the appendix of SEMANTICS.md cites; name is "" for a
    whole test file or test target (`test_xattrs.py`, `flowfs-archive tests/views.rs`)."""
    out = []
    for entry in _semantics()[1].values():
        for m in re.finditer(r"\b(test_[a-z0-9_]+\.py)(?:::(test_[a-z0-9_]+))?", entry):
            out.append(("py", m.group(1), m.group(2) or ""))
        for m in re.finditer(r"\b(flowfs(?:-[a-z]+)?) (src|tests/[a-z_]+(?:\.rs)?)(?: ([a-z0-9_:]+))?",
                             entry):
            out.append((m.group(1), m.group(2), m.group(3) or ""))
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
            ok = path in py and (not name or name in py[path])
        else:
            key = (where, path)
            where_path = CRATES / where / path
            if key not in rust:
                files = [where_path] if where_path.is_file() else where_path.rglob("*.rs")
                rust[key] = _rust_fns(files)
            ok = where_path.exists() and (not name or name.split("::")[-1] in rust[key])
        if not ok:
            missing.append(f"{where} {path} {name}".rstrip())
    assert not missing, "SEMANTICS.md cites tests that do not exist:\n" + "\n".join(sorted(set(missing)))


def test_every_reference_in_semantics_has_its_entry_and_every_entry_is_referred_to():
    """The text says `[T12]` where the appendix lists the tests of a promise: each reference
    has its entry, each entry is referred to from the text, and no test list is left inline."""
    body, entries = _semantics()
    refs = {int(n) for n in re.findall(r"\[T(\d+)\]", body)}
    assert len(entries) > 150 and refs, "has the format changed?"
    assert not refs - entries.keys(), f"references without an entry: {sorted(refs - entries.keys())}"
    assert not entries.keys() - refs, f"entries no text refers to: {sorted(entries.keys() - refs)}"
    empty = [n for n, rest in entries.items() if not re.search(r"::|\.py|\.rs|untested| tests/", rest)]
    assert not empty, f"entries that name no test and say nothing untested: {empty}"
    assert "(tests:" not in body, "a test list is inline in the text: move it to the appendix"


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
