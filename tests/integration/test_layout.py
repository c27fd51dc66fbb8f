"""The shape of the code (issue 50): no import circle between the modules of a crate
(scripts/import_circles.py), and no function over 80 lines (scripts/long_functions.py), each
checked on the repository and on code made to break it."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "import_circles.py"
LONG = Path(__file__).resolve().parents[2] / "scripts" / "long_functions.py"


def _checker():
    spec = importlib.util.spec_from_file_location("import_circles", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_no_import_circle_in_crates():
    r = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, f"import circles:\n{r.stdout}{r.stderr}"


def test_the_checker_finds_a_circle_and_lets_a_module_use_its_parent(tmp_path):
    src = tmp_path / "src"
    (src / "cache").mkdir(parents=True)
    (src / "lib.rs").write_text("mod cache;\nmod error;\npub use error::FsError;\n")
    (src / "error.rs").write_text("use crate::cache::CacheError;\npub enum FsError { C(CacheError) }\n")
    (src / "cache" / "mod.rs").write_text("mod error;\nmod fetch;\npub use error::CacheError;\npub const CHUNK: u64 = 1;\n")
    (src / "cache" / "error.rs").write_text("pub enum CacheError {}\n")
    (src / "cache" / "fetch.rs").write_text("use super::CHUNK;\nuse crate::FsError;\nfn f(_: FsError) {}\n")
    c = _checker()
    found = c.circles(c.edges(c.modules(src)))
    assert found == [], "fetch uses its parent's CHUNK and the crate's error: no circle yet"
    (src / "cache" / "error.rs").write_text("use crate::error::FsError;\npub enum CacheError { F(Box<FsError>) }\n")
    found = c.circles(c.edges(c.modules(src)))
    assert found == [[("cache", "error"), ("error",)]], found


def test_no_function_over_80_lines_in_crates():
    r = subprocess.run([sys.executable, str(LONG)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, f"functions over 80 lines:\n{r.stdout}{r.stderr}"


def test_the_length_checker_counts_bodies_not_declarations():
    spec = importlib.util.spec_from_file_location("long_functions", LONG)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    body = ["    let x = 1; // {"] * 81
    lines = ["trait T {", "    fn declared(", "        &self,", "    ) -> u8;", "}",
             "pub async fn long() {", *body, "}", "fn short() -> u8 {", "    1", "}"]
    found = {name: n for _, n, name in mod.functions(lines)}
    assert found == {"long": 83, "short": 3}, found
