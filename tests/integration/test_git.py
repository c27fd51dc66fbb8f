"""Issue 13's end-to-end check: a git repository on the mount (many small files written,
renamed and fsynced, a pack written by gc, mmap reads) is consistent on the mount and again
after a remount with an empty cache, when every byte comes from the bucket."""

from __future__ import annotations

import shutil
import subprocess

import pytest

COMMITS = 30


def _git(repo, *args: str) -> str:
    r = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, timeout=300,
                       stdin=subprocess.DEVNULL, check=False)
    assert r.returncode == 0, f"git {' '.join(args)}: exit {r.returncode}: {r.stderr[-2000:]}"
    return r.stdout


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_a_git_repository_survives_gc_fsck_and_a_remount(mount, bucket, work_dir, monkeypatch):
    # Every FUSE error in the log attached to a failure: a rename of git's config.lock
    # once failed with ENOENT in CI (an upload that began during the previous rename went
    # to config.lock, and its stray delete removed the next config.lock; see below).
    monkeypatch.setenv("FLOWFS_LOG", "info,flowfs_fs::fuse=debug")
    m = mount(bucket, cache_dir=work_dir / "cache0")
    repo = m.path / "repo"
    _git(m.path, "init", "-q", "repo")
    _git(repo, "config", "user.email", "t@example.org")
    _git(repo, "config", "user.name", "flowfs test")
    for i in range(COMMITS):
        (repo / f"f{i % 7}.bin").write_bytes(bytes((i * 31 + j) % 251 for j in range(i * 7919)))
        with open(repo / "log.txt", "a") as f:
            f.write(f"line {i}\n")
        _git(repo, "add", "-A")
        _git(repo, "commit", "-q", "-m", f"commit {i}")
    _git(repo, "gc", "-q", "--aggressive")
    _git(repo, "fsck", "--full", "--strict")
    head = _git(repo, "rev-parse", "HEAD").strip()
    r = m.unmount()
    assert r.returncode == 0, r.stderr

    m2 = mount(bucket, cache_dir=work_dir / "cache1")
    repo2 = m2.path / "repo"
    _git(repo2, "fsck", "--full", "--strict")
    assert _git(repo2, "rev-parse", "HEAD").strip() == head
    assert len(_git(repo2, "log", "--oneline").splitlines()) == COMMITS
    assert _git(repo2, "status", "--porcelain") == "", "the work tree differs from HEAD"


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_git_config_lock_dance_loses_no_setting(mount, bucket, work_dir, monkeypatch):
    """`git config` takes config.lock (O_EXCL), writes it and renames it over config, one
    round per setting, back to back. CI met one round whose rename failed with ENOENT: an
    upload that started during the previous rename went to the old name. 150 rounds; every
    setting is there on the mount and again after a remount with an empty cache."""
    monkeypatch.setenv("FLOWFS_LOG", "info,flowfs_fs::fuse=debug")
    rounds = 150
    m = mount(bucket, cache_dir=work_dir / "cache0")
    _git(m.path, "init", "-q", "repo")
    repo = m.path / "repo"
    for i in range(rounds):
        _git(repo, "config", f"flowfs.k{i}", f"v{i}")
    want = {f"flowfs.k{i}=v{i}" for i in range(rounds)}
    got = {line for line in _git(repo, "config", "--list", "--local").splitlines() if line.startswith("flowfs.")}
    assert got == want
    assert not (repo / ".git" / "config.lock").exists()
    r = m.unmount()
    assert r.returncode == 0, r.stderr

    m2 = mount(bucket, cache_dir=work_dir / "cache1")
    repo2 = m2.path / "repo"
    got2 = {line for line in _git(repo2, "config", "--list", "--local").splitlines() if line.startswith("flowfs.")}
    assert got2 == want
    assert not (repo2 / ".git" / "config.lock").exists(), "a stray config.lock object was left in the bucket"
