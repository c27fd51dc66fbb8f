"""Admission to the node cache (issue 48, `--cache-admit`, docs/CONFIGURATION.md): under
`reuse`, the default, an object read once through the mount is served from the download buffers and
nothing of it is written to the cache directory; its second open on the node (here by a
second mount on the same cache directory) fetches it again and keeps it; the third is read
from the disk without a GET; objects up to 1 MiB read once leave no cache files at all, and
kept, they are records of a segment file (`objects/small/`), not a file pair each. Counted
by a proxy, by `flowfs cache stats` and in the cache directory."""

from __future__ import annotations

from helpers import payload, put_many
from seaweed import clean_env
from test_cache_cli import stats


def _read_all(m, files: dict[str, bytes]) -> None:
    for k, v in files.items():
        assert (m / k).read_bytes() == v, k


def test_reuse_keeps_what_is_opened_twice_and_nothing_read_once(mount, s3, bucket, proxy, work_dir):
    files = {f"in/f{i:02d}": payload(300_000 + i, f"admit-{i}") for i in range(20)}
    total = sum(map(len, files.values()))
    put_many(s3, bucket, files)
    cache = work_dir / "cache"
    env = clean_env(mount.env(proxy.endpoint))
    fetched, entries, segments = [], [], []
    for _ in range(3):
        m = mount(bucket, proxy=proxy, cache_dir=cache)  # the default: reuse
        proxy.reset()
        _read_all(m, files)
        fetched.append(proxy.get_bytes)
        assert m.unmount().returncode == 0
        fetched.append(stats(cache, env)["bytes"])
        entries.append(len([p for p in (cache / "objects").iterdir() if p.suffix in (".map", ".bytes")]))
        small = cache / "objects" / "small"
        segments.append(len([p for p in small.iterdir() if p.name != "index"]))
    once, on_disk_once, twice, on_disk_twice, thrice, _ = fetched
    assert entries[0] == 0, f"read once, {entries[0]} cache files made"
    assert entries == [0, 0, 0], f"cache files per object: {entries}"
    assert segments[0] == 0 and segments[1] == segments[2] == 1, f"segments: {segments}"
    assert total <= once <= 1.1 * total, f"first read fetched {once} of {total} bytes"
    assert on_disk_once <= 0.05 * total, f"read once, {on_disk_once} bytes written of {total}"
    assert total <= twice <= 1.1 * total, f"second open fetched {twice}"
    assert on_disk_twice >= total, f"opened twice, only {on_disk_twice} of {total} bytes kept"
    assert thrice == 0, f"the third read fetched {thrice} bytes"
