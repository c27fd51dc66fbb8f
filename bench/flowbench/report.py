"""Ratios to s5cmd, the summary table (Markdown), the chart, and docs/BENCHMARKS.md."""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import subprocess
from pathlib import Path

from . import util

BASELINE = "s5cmd"
# workloads s5cmd cannot take part in, and the tool their ratios are taken to instead
OTHER_BASELINES = {"B7": "local"}
# the figures compared with s5cmd; "bytes" is down + up
RATIO_FIELDS = ["wall_s", "tool_cpu_s", "server_cpu_s", "peak_rss_mib", "requests", "bytes"]
MiB = 1 << 20


def baseline_of(workload: str) -> str:
    """The tool whose figures the × columns divide by (`B7@20ms` is B7 at 20 ms latency)."""
    return OTHER_BASELINES.get(workload.split("@")[0], BASELINE)


def label(rec: dict) -> str:
    return rec["workload"] + (f" {rec['variant']}" if rec.get("variant") else "")


def _val(rec: dict, f: str):
    if f == "bytes":
        if rec.get("bytes_down") is None and rec.get("bytes_up") is None:
            return None
        return (rec.get("bytes_down") or 0) + (rec.get("bytes_up") or 0)
    return rec.get(f)


def add_ratios(records: list[dict]) -> None:
    """rec["vs_s5cmd"][field] = value / s5cmd's value for the same workload, variant and run
    (for B7: / the local-disk run's value)."""
    base = {}
    for r in records:
        if r["tool"] == baseline_of(r["workload"]) and not r.get("error"):
            base[(r["workload"], r.get("variant", ""), r["run"])] = r
    for r in records:
        b = base.get((r["workload"], r.get("variant", ""), r["run"]))
        ratios = {}
        if b is not None and not r.get("error"):
            for f in RATIO_FIELDS:
                v, bv = _val(r, f), _val(b, f)
                if v is not None and bv:
                    ratios[f] = round(v / bv, 3)
        r["vs_s5cmd"] = ratios


def summarize(records: list[dict], tool_order: list[str]) -> list[dict]:
    """One row per (workload, variant, tool): medians and min-max over the runs."""
    groups: dict[tuple, list[dict]] = {}
    for r in records:
        groups.setdefault((r["workload"], r.get("variant", ""), r["tool"]), []).append(r)
    order = {t: i for i, t in enumerate(tool_order)}
    vorder = {"": 0, "cold": 0, "warm": 1}
    rows = []
    for (w, v, t), rs in sorted(groups.items(), key=lambda kv: (kv[0][0], vorder.get(kv[0][1], 2),
                                                                 order.get(kv[0][2], 99))):
        ok = [r for r in rs if not r.get("error")]
        row = {"workload": w, "variant": v, "label": label(rs[0]), "tool": t, "runs": len(rs), "ok_runs": len(ok),
               "verified": bool(ok) and all(r.get("verified") for r in ok) and len(ok) == len(rs),
               "skipped": any(r.get("skipped") for r in rs),
               "errors": sorted({r["error"] for r in rs if r.get("error")}),
               "notes": sorted({r["notes"] for r in ok if r.get("notes")})}
        for f in ["wall_s", "tool_cpu_s", "client_cpu_s", "server_cpu_s", "proxy_cpu_s", "peak_rss_mib",
                  "cache_written", "requests", "bytes_down", "bytes_up", "mount_s", "write_s"]:
            xs = [r.get(f) for r in ok if r.get(f) is not None]
            row[f] = util.median(xs)
            if f == "wall_s" and xs:
                row["wall_min"], row["wall_max"] = min(xs), max(xs)
        for f in RATIO_FIELDS:
            xs = [r["vs_s5cmd"][f] for r in ok if f in r.get("vs_s5cmd", {})]
            row[f"x_{f}"] = util.median(xs)
            if f == "wall_s" and xs:
                row["x_wall_min"], row["x_wall_max"] = min(xs), max(xs)
        by_type: dict[str, list[int]] = {}
        for r in ok:
            for k, n in (r.get("requests_by_type") or {}).items():
                by_type.setdefault(k, []).append(n)
        row["requests_by_type"] = {k: util.median(ns + [0] * (len(ok) - len(ns))) for k, ns in by_type.items()}
        rows.append(row)
    return rows


# ---------------------------------------------------------------------- Markdown


def _num(x, fmt="{:.2f}") -> str:
    return "-" if x is None else fmt.format(x)


def _with_ratio(x, ratio, fmt="{:.2f}") -> str:
    if x is None:
        return "-"
    s = fmt.format(x)
    return s + (f" ({ratio:.2f}×)" if ratio is not None else "")


def _types(d: dict) -> str:
    if not d:
        return "-"
    items = sorted(d.items(), key=lambda kv: -kv[1])
    return ", ".join(f"{k} {v:g}" for k, v in items)


def _mib(n) -> str:
    if n is None:
        return "-"
    if n == 0:
        return "0"
    if n < MiB:
        return f"{n / 1024:.0f} KiB" if n >= 1024 else f"{n} B"
    return f"{n / MiB:.0f} MiB" if n < 10 * (1 << 30) else f"{n / (1 << 30):.1f} GiB"


def not_run(rows: list[dict]) -> dict[str, str]:
    """Tools skipped in every row (not installable here): tool -> reason."""
    out: dict[str, str] = {}
    by_tool: dict[str, list[dict]] = {}
    for r in rows:
        by_tool.setdefault(r["tool"], []).append(r)
    for t, rs in by_tool.items():
        if all(r["skipped"] and not r["ok_runs"] for r in rs):
            out[t] = rs[0]["errors"][0] if rs[0]["errors"] else "skipped"
    return out


def markdown_table(rows: list[dict]) -> str:
    skipped = not_run(rows)
    head = ("| Workload | Tool | Wall s, median (min–max) | × s5cmd | Tool CPU s | Server CPU s | Peak RSS MiB "
            "| Requests | Requests by type | Down / up | Cache written | Verified |")
    lines = [head, "|" + "---|" * 12]
    footnotes: list[str] = []
    for r in rows:
        if r["tool"] in skipped:
            continue
        name = f"**{r['tool']}**" if r["tool"] == "flowfs" else r["tool"]
        if r["errors"] and not r["ok_runs"]:
            err = r["errors"][0]
            footnotes.append(f"{r['label']} / {r['tool']}: {err}")
            lines.append(f"| {r['label']} | {name} | failed [{len(footnotes)}] | | | | | | | | | no |")
            continue
        wall = f"{r['wall_s']:.2f} ({r['wall_min']:.2f}–{r['wall_max']:.2f})"
        xw = "-" if r["x_wall_s"] is None else f"{r['x_wall_s']:.2f}"
        base = r["tool"] == baseline_of(r["workload"])
        traffic = f"{_mib(r['bytes_down'])} / {_mib(r['bytes_up'])}"
        if r["x_bytes"] is not None and not base:
            traffic += f" ({r['x_bytes']:.2f}×)"
        ver = "yes" if r["verified"] else "**no**"
        if r["errors"]:
            footnotes.append(f"{r['label']} / {r['tool']}: {r['runs'] - r['ok_runs']} of {r['runs']} runs failed: "
                             f"{r['errors'][0]}")
            ver += f" [{len(footnotes)}]"
        elif not r["verified"] and r["notes"]:
            footnotes.append(f"{r['label']} / {r['tool']}: verification: {r['notes'][0]}")
            ver += f" [{len(footnotes)}]"
        lines.append(
            f"| {r['label']} | {name} | {wall} | {xw} "
            f"| {_with_ratio(r['tool_cpu_s'], None if base else r['x_tool_cpu_s'])} "
            f"| {_with_ratio(r['server_cpu_s'], None if base else r['x_server_cpu_s'])} "
            f"| {_with_ratio(r['peak_rss_mib'], None if base else r['x_peak_rss_mib'], '{:.0f}')} "
            f"| {_with_ratio(r['requests'], None if base else r['x_requests'], '{:.0f}')} "
            f"| {_types(r['requests_by_type'])} | {traffic} | {_mib(r.get('cache_written'))} | {ver} |")
    out = "\n".join(lines)
    if footnotes:
        out += "\n\n" + "\n".join(f"{i}. {_one_line(t)}" for i, t in enumerate(footnotes, 1))
    if any(r["workload"] in OTHER_BASELINES for r in rows):
        out += "\n\n" + "; ".join(f"{w}: the × column is the ratio to `{t}`, not to s5cmd (which cannot run it)"
                                   for w, t in OTHER_BASELINES.items() if any(r["workload"] == w for r in rows)) + "."
    if skipped:
        out += "\n\nNot run: " + "; ".join(f"{t} ({_one_line(why, 160)})" for t, why in skipped.items()) + "."
    return out


def _one_line(s: str, n: int = 400) -> str:
    s = re.sub(r"\s+", " ", s).strip()
    return s if len(s) <= n else s[: n - 1] + "…"


# ---------------------------------------------------------------------- machine, chart, doc


def machine() -> dict:
    info = {"kernel": platform.release(), "python": platform.python_version()}
    try:
        cpu = open("/proc/cpuinfo").read()
        m = re.search(r"model name\s*:\s*(.+)", cpu)
        info["cpu"] = m.group(1).strip() if m else "?"
        info["cores"] = os.cpu_count()
    except OSError:
        pass
    try:
        info["memory"] = subprocess.run(["free", "-h"], capture_output=True, text=True).stdout.splitlines()[1].split()[1]
    except (OSError, IndexError):
        pass
    try:
        du = shutil.disk_usage("/tmp")
        info["tmp_disk_free_gib"] = round(du.free / (1 << 30))
    except OSError:
        pass
    return info


def chart(rows: list[dict], png: Path, python: str | None, title: str,
          descriptions: dict[str, str] | None = None) -> str | None:
    """Render with matplotlib (Agg) in its own venv; returns an error string or None."""
    if not python:
        return "matplotlib not installed"
    data = png.with_suffix(".chart.json")
    skipped = not_run(rows)
    rows = [r for r in rows if r["tool"] not in skipped]
    data.write_text(json.dumps({"rows": rows, "title": title, "descriptions": descriptions or {}}))
    script = Path(__file__).resolve().parents[1] / "chart.py"
    r = subprocess.run([python, str(script), str(data), str(png)], capture_output=True, text=True, timeout=300)
    data.unlink(missing_ok=True)
    if r.returncode != 0:
        return f"chart failed: {r.stderr.strip()[-800:]}"
    return None


BEGIN, END = "<!-- bench:results:begin -->", "<!-- bench:results:end -->"


def write_doc(doc: Path, section: str) -> None:
    text = doc.read_text() if doc.exists() else "# Benchmarks\n\n"
    block = f"{BEGIN}\n{section.rstrip()}\n{END}"
    if BEGIN in text and END in text:
        pre, rest = text.split(BEGIN, 1)
        _, post = rest.split(END, 1)
        text = pre + block + post
    else:
        text = text.rstrip() + "\n\n## Latest results\n\n" + block + "\n"
    doc.write_text(text)


# ---------------------------------------------------------------------- B11: archives read in place

B11_STEP_ORDER = ["list-cold", "seq-read", "list-cached", "members-100", "cp-r", "cat-tar-x"]
B11_FORMAT_ORDER = ["tar", "tar.gz"]
B11_SPAN = 4 * MiB  # flowfs's gzip restart spacing, of uncompressed output
B11_STEP_TEXT = {
    "list-cold": "first listing, cold: mount (index build) + find",
    "seq-read": "peer: cat of the archive through a bucket mount",
    "list-cached": "find, index kept (remount on the cache dir)",
    "members-100": "100 random members read, cold data, index kept",
    "cp-r": "cp -r of every member, cold data, index kept",
    "cat-tar-x": "peer: cat of the archive through a bucket mount | tar -x",
}


def is_b11(rec: dict) -> bool:
    return rec["workload"].split("@")[0] == "B11"


def _b11_split(rec: dict) -> tuple[str, str]:
    fmt, _, step = (rec.get("variant") or "").rpartition(" ")
    return fmt, step


def b11_targets(records: list[dict]) -> None:
    """rec["b11"] = {"ratio", "target", "met", "figure"} for each B11 step that has a target:

    - list-cold: wall ÷ the sequential read (`seq-read`) of the same archive, same run: ≤ 1.2;
    - list-cached: wall ≤ 0.2 s and no GET (ratio: wall ÷ 0.2 s);
    - members-100: tar: bytes down ÷ the members' bytes ≤ 1.1; tar.gz: the compressed bytes
      fetched, as the tar bytes they carry (× tar size ÷ tar.gz size), ÷ (the members' bytes +
      100 restart spans of 4 MiB) ≤ 1;
    - cp-r: wall ÷ `cat NAME | tar -x` through a bucket mount, same run: ≤ 1.2.

    The peers are flowfs's (a normal mount of the bucket); the same ratios are given for
    ratarmount, whose own targets these are not."""
    peers: dict[tuple, dict] = {}
    for r in records:
        if is_b11(r) and not r.get("error"):
            fmt, step = _b11_split(r)
            if step in ("seq-read", "cat-tar-x"):
                k = (r["workload"], r["run"], fmt, step)
                if k not in peers or r["tool"] == "flowfs":
                    peers[k] = r
    for r in records:
        if not is_b11(r):
            continue
        r["b11"] = {}
        if r.get("error") or r.get("wall_s") is None:
            continue
        fmt, step = _b11_split(r)
        t: dict = {}
        if step == "list-cold":
            p = peers.get((r["workload"], r["run"], fmt, "seq-read"))
            if p and p.get("wall_s"):
                t = {"ratio": r["wall_s"] / p["wall_s"], "target": 1.2, "figure": "× seq-read"}
        elif step == "list-cached":
            gets = r.get("gets") or 0
            t = {"ratio": r["wall_s"] / 0.2, "target": 1.0, "figure": "× 0.2 s", "gets": gets,
                 "met": r["wall_s"] <= 0.2 and gets == 0}
        elif step == "members-100" and r.get("member_bytes"):
            down = r.get("bytes_down") or 0
            if fmt == "tar":
                t = {"ratio": down / r["member_bytes"], "target": 1.1, "figure": "× member bytes"}
            else:
                carried = down * (r.get("tar_bytes") or 0) / (r.get("archive_bytes") or 1)
                bound = r["member_bytes"] + (r.get("members") or 100) * B11_SPAN
                t = {"ratio": carried / bound, "target": 1.0, "figure": "× (members + 100 spans)",
                     "tar_bytes_carried": round(carried), "bound_bytes": bound,
                     "compressed_vs_members": down / r["member_bytes"]}
        elif step == "cp-r":
            p = peers.get((r["workload"], r["run"], fmt, "cat-tar-x"))
            if p and p.get("wall_s"):
                t = {"ratio": r["wall_s"] / p["wall_s"], "target": 1.2, "figure": "× cat|tar -x"}
        if t:
            t["ratio"] = round(t["ratio"], 3)
            t.setdefault("met", t["ratio"] <= t["target"])
            r["b11"] = t


def b11_table(records: list[dict], info: dict | None = None) -> str:
    """The B11 table: per workload (latency), format, step and tool, the medians over the runs of
    wall time, mount time, tool CPU, requests, GETs and bytes down, and the figure against its
    target."""
    recs = [r for r in records if is_b11(r)]
    if not recs:
        return ""
    groups: dict[tuple, list[dict]] = {}
    for r in recs:
        fmt, step = _b11_split(r)
        groups.setdefault((r["workload"], fmt, step, r["tool"]), []).append(r)

    def order(k):
        w, fmt, step, tool = k
        ms = float(w.split("@")[1][:-2]) if "@" in w else 0.0
        return (ms, B11_FORMAT_ORDER.index(fmt) if fmt in B11_FORMAT_ORDER else 9,
                B11_STEP_ORDER.index(step) if step in B11_STEP_ORDER else 9, tool)

    lines = ["### B11: archives read in place", ""]
    if info:
        lines += [f"Data: {info['members']} members, {_mib(info['member_bytes'])}, in a {_mib(info['tar_bytes'])} "
                  f"tar and its {_mib(info['tar_gz_bytes'])} tar.gz ({info['tar_bytes'] / info['tar_gz_bytes']:.2f}×, "
                  f"{info['compressor']}); {info['picks']} random members ({_mib(info['picks_bytes'])}) for "
                  "members-100.", ""]
    lines += ["| Workload | Format | Step | Tool | Wall s, median (min–max) | Mount s | Mount + wall s | Tool CPU s "
              "| Requests | GETs | Down | vs target | Verified |", "|" + "---|" * 13]
    footnotes: list[str] = []
    for k in sorted(groups, key=order):
        w, fmt, step, tool = k
        rs = groups[k]
        ok = [r for r in rs if not r.get("error")]
        name = f"**{tool}**" if tool == "flowfs" else tool
        if not ok:
            footnotes.append(f"{w} {fmt} {step} / {tool}: {rs[0]['error']}")
            lines.append(f"| {w} | {fmt} | {step} | {name} | failed [{len(footnotes)}] | | | | | | | | no |")
            continue

        def med(f, rs=ok):
            return util.median([r.get(f) for r in rs if r.get(f) is not None])

        walls = [r["wall_s"] for r in ok]
        wall = f"{med('wall_s'):.2f} ({min(walls):.2f}–{max(walls):.2f})" if len(ok) > 1 else f"{walls[0]:.2f}"
        req = med("requests")
        by_type: dict[str, list[int]] = {}
        for r in ok:
            for t, n in (r.get("requests_by_type") or {}).items():
                by_type.setdefault(t, []).append(n)
        types = _types({t: util.median(ns + [0] * (len(ok) - len(ns))) for t, ns in by_type.items()})
        reqs = "-" if req is None else f"{req:.0f} ({types})" if req else "0"
        target = "-"
        tg = [r["b11"] for r in ok if r.get("b11")]
        if tg:
            # The targets are on medians: the mark says whether the median meets
            # it, and how many runs did on their own.
            ratio = util.median([t["ratio"] for t in tg])
            met = ratio <= tg[0]["target"]
            runs = f", {sum(t['met'] for t in tg)} of {len(tg)} runs" if len(tg) > 1 else ""
            target = f"{ratio:.2f} {tg[0]['figure']} (≤ {tg[0]['target']:g}) {'✓' if met else '✗'}{runs}"
            if step == "list-cached":
                met = med("wall_s") <= 0.2 and not med("gets")
                target = (f"{med('wall_s'):.3f} s (≤ 0.2 s), {med('gets'):.0f} GETs (0) "
                          f"{'✓' if met else '✗'}{runs}")
            if step == "members-100" and fmt == "tar.gz":
                cvm = util.median([t["compressed_vs_members"] for t in tg])
                target += f"; compressed {cvm:.2f}× member bytes"
        ver = "yes" if all(r.get("verified") for r in ok) and len(ok) == len(rs) else "**no**"
        if len(ok) < len(rs):
            footnotes.append(f"{w} {fmt} {step} / {tool}: {len(rs) - len(ok)} of {len(rs)} runs failed: "
                             f"{next(r['error'] for r in rs if r.get('error'))}")
            ver += f" [{len(footnotes)}]"
        elif ver != "yes":
            bad = next((r["notes"] for r in ok if not r.get("verified")), "")
            footnotes.append(f"{w} {fmt} {step} / {tool}: verification: {bad}")
            ver += f" [{len(footnotes)}]"
        mount = med("mount_s")
        both = "-" if step == "list-cold" else _num(med("wall_with_mount_s"))
        lines.append(f"| {w} | {fmt} | {step} | {name} | {wall} | {_num(mount)} | {both} | {_num(med('tool_cpu_s'))} "
                     f"| {reqs} | {_num(med('gets'), '{:.0f}')} | {_mib(med('bytes_down'))} | {target} | {ver} |")
    out = "\n".join(lines)
    out += "\n\nSteps: " + "; ".join(f"`{s}`: {t}" for s, t in B11_STEP_TEXT.items()) + (
        ". Wall: list-cold from the mount command to the end of find (Mount s is the part until the mount "
        "was up); the others the operation alone, and Mount + wall what a task waits for in all. Requests, "
        "GETs, Down and Tool CPU: the whole window, the mount included (tool CPU: since the mount process "
        "started). tar.gz members-100: the compressed bytes fetched, as the tar bytes they carry, against the "
        "members' bytes + 100 restart spans of 4 MiB.")
    if footnotes:
        out += "\n\n" + "\n".join(f"{i}. {_one_line(t)}" for i, t in enumerate(footnotes, 1))
    return out
