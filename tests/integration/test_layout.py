"""The shape of the code (issue 50): no import circle between the modules of a crate
(scripts/import_circles.py), no function over 80 lines (scripts/long_functions.py), no source
file over 450 lines, 350 in flowfs-fs's fs/ (scripts/long_files.py), each checked on the
repository and on code made to break it."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "import_circles.py"
LONG = Path(__file__).resolve().parents[2] / "scripts" / "long_functions.py"
FILES = Path(__file__).resolve().parents[2] / "scripts" / "long_files.py"


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


def test_no_source_file_over_its_limit_in_crates():
    r = subprocess.run([sys.executable, str(FILES)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, f"files over their limit (lines, limit, path):\n{r.stdout}{r.stderr}"


def test_the_file_checker_counts_code_before_its_tests_and_holds_fs_to_350(tmp_path):
    fs, cache = tmp_path / "flowfs-fs" / "src" / "fs", tmp_path / "flowfs-fs" / "src" / "cache"
    fs.mkdir(parents=True)
    cache.mkdir(parents=True)
    (fs / "ops.rs").write_text("fn a() {}\n" * 351)
    (cache / "mod.rs").write_text("fn a() {}\n" * 400 + "#[cfg(test)]\nmod tests {\n" + "fn t() {}\n" * 200 + "}\n")
    (cache / "tests.rs").write_text("fn t() {}\n" * 900)
    r = subprocess.run([sys.executable, str(FILES), str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1
    assert r.stdout.split("\n")[:-1] == ["351 350 flowfs-fs/src/fs/ops.rs"], r.stdout
