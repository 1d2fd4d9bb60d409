"""What `bench/compare.py` prints: the figures of one run, their ratios and the targets, or with
--table the README's performance table, every figure beside the one it is judged against from
the same run (the reference's, or the stack's floor for a cold start)."""

from __future__ import annotations

import re
import statistics
import time
from dataclasses import dataclass
from typing import Any

from cold_start import DEPLOYED, FLOOR, REFERENCE_NAME

# The unsandboxed figures, as the detailed table shows them.
ROWS = [
    ("stream MB/s", "stream_mbps", "{:.0f}"),
    ("  client CPU share", "client_cpu", "{:.0%}"),
    ("  server CPU s/GiB", "server_cpu_per_gib", "{:.2f}"),
    ("latency median ms", "latency_median_ms", "{:.2f}"),
    ("latency p95 ms", "latency_p95_ms", "{:.2f}"),
    ("fan-out: all started s", "fanout_start_s", "{:.3f}"),
    ("fan-out: all closed s", "fanout_close_s", "{:.3f}"),
    ("fan-out: peak RSS MB", "fanout_peak_rss_mb", "{:.1f}"),
    ("idle RSS MB", "idle_rss_mb", "{:.1f}"),
]

# The issue-35 targets of a ratio to the reference (or the floor): (at most, at least).
AT_MOST_REFERENCE = {"latency_median_ms": 0.25, "fanout_start_s": 0.5,
                     "fanout_peak_rss_mb": 1.0}
STREAM_AT_LEAST = 3.0
SANDBOXED_AT_MOST = 0.25
COLD_AT_MOST_FLOOR = 1.5


def now() -> str:
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())


def load_average() -> str:
    with open("/proc/loadavg") as loadavg:
        return " ".join(loadavg.read().split()[:3])


def table(results: dict[str, dict[str, Any]]) -> str:
    names = list(results)
    lines = ["| workload | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]
    for label, key, fmt in ROWS:
        cells = [fmt.format(results[n][key]) if results[n].get(key) is not None else "-"
                 for n in names]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def ratios(results: dict[str, dict[str, Any]], ours: str, other: str) -> list[str]:
    if other not in results:
        return [f"{ours}/{other}: not measured ({other} is not available here)"]
    lines = [f"{ours} / {other}:"]
    for label, key, _ in ROWS:
        a, b = results[ours].get(key), results[other].get(key)
        if a is not None and b:
            lines.append(f"  {label.strip():24} {a / b:6.2f}x")
    return lines


def checks(run: dict[str, Any], ours: str) -> list[tuple[str, bool]]:
    """(what, met) for every target this run has the figures for."""
    found: list[tuple[str, bool]] = []
    results = run.get("results", {})
    r, ref = results.get(ours), results.get("reference")
    if r is not None:
        local = results["local"]
        found.append((f"latency median within 10x of subprocess.run(['true']) "
                       f"({r['latency_median_ms']:.2f} vs {local['latency_median_ms']:.2f} ms)",
                       r["latency_median_ms"] <= 10 * local["latency_median_ms"]))
    if r is not None and ref is not None:
        stream = r["stream_mbps"] / ref["stream_mbps"]
        found.append((f"stream at least {STREAM_AT_LEAST}x the reference ({stream:.2f}x)",
                      stream >= STREAM_AT_LEAST))
        for key, most in AT_MOST_REFERENCE.items():
            ratio = r[key] / ref[key]
            found.append((f"{key} at most {most}x the reference's ({ratio:.2f}x)",
                          ratio <= most))
    for profile, servers in run.get("sandboxed", {}).items():
        ratio = sandboxed_ratio(servers, ours)
        if ratio is not None:
            found.append((f"sandboxed start, {profile}, at most {SANDBOXED_AT_MOST}x the "
                          f"reference's ({ratio:.2f}x)", ratio <= SANDBOXED_AT_MOST))
    cold = run.get("cold")
    if cold:
        ratio = median(cold[DEPLOYED]) / median(cold[FLOOR])
        found.append((f"cold start at most {COLD_AT_MOST_FLOOR}x the stack's floor ({ratio:.2f}x)",
                      ratio <= COLD_AT_MOST_FLOOR))
    return found


def median(values: list[float]) -> float:
    return statistics.median(values)


def sandboxed_ratio(servers: dict[str, Any], ours: str) -> float | None:
    a, b = servers.get(ours, {}), servers.get("reference", {})
    if "median_ms" in a and "median_ms" in b:
        return float(a["median_ms"] / b["median_ms"])
    return None


def summary(run: dict[str, Any], ours: str) -> str:
    """Every figure of the run, the ratios and the targets, as plain text."""
    lines: list[str] = []
    sizes = run["sizes"]
    results = run.get("results")
    if results:
        lines += [f"\n{sizes['stream_mib']} MiB stream, {sizes['runs']} runs, "
                  f"{sizes['cores']} cores\n", table(results), ""]
        for other in ("reference", "openssh"):
            lines += ratios(results, ours, other)
        held = run["backpressure"]
        verdict = "ok" if held["blocked"] and held["peak_rss_mb"] < 100 else "MISSED"
        lines.append(f"\nbackpressure ({ours}): a client stops reading while a process writes "
                     f"1 GiB; the writer stopped at {held['written_mib']:.0f} MiB and stays "
                     f"blocked: {held['blocked']}; server peak RSS {held['peak_rss_mb']:.1f} MB "
                     f"(< 100 MB) [{verdict}]")
    if "sandboxed" in run:
        lines.append(f"\nsandboxed start -> closed of `true`, {sizes['sandboxed_runs']} starts "
                     "each, ms: median (p10-p90; min-max)")
        for profile, servers in run["sandboxed"].items():
            lines.append(f"  {profile}:")
            for name, got in servers.items():
                if "skipped" in got:
                    lines.append(f"    {name:20} {got['skipped']}")
                    continue
                ratio = sandboxed_ratio({name: got, "reference": servers.get("reference", {})},
                                        name)
                against = f"  {ratio:.2f}x the reference" if name != "reference" and ratio else ""
                lines.append(f"    {name:20} {got['median_ms']:7.1f} ({got['p10_ms']:.1f}-"
                             f"{got['p90_ms']:.1f}; {got['min_ms']:.1f}-{got['max_ms']:.1f})"
                             f"{against}")
    if "cold" in run:
        lines.append(f"\ncold start, launch -> first /readyz 200, {sizes['cold_runs']} launches "
                     "each, ms: median (min-max)")
        for name, times in run["cold"].items():
            lines.append(f"  {name:62} {median(times):6.1f} ({min(times):.1f}-{max(times):.1f})")
        ratio = median(run["cold"][DEPLOYED]) / median(run["cold"][FLOOR])
        lines.append(f"  as deployed / the floor: {ratio:.2f}x")
    lines.append(f"\ntargets for {ours}:")
    lines += [f"  [{'ok' if ok else 'MISSED'}] {what}" for what, ok in checks(run, ours)]
    lines.append(f"\nload average (1, 5, 15 min): {run['load_before']} before, "
                 f"{run['load_after']} after")
    lines += [f"note: {note}" for note in run["notes"]]
    return "\n".join(lines)


def ms_spread(got: dict[str, Any]) -> str:
    return f"{got['median_ms']:.1f} ({got['p10_ms']:.0f}–{got['p90_ms']:.0f})"


def times_spread(times: list[float]) -> str:
    return f"{median(times):.0f} ({min(times):.0f}–{max(times):.0f})"


SPREAD = re.compile(r" \((p95|p10–p90|min–max)\)")  # a spread's name in a label


@dataclass
class Row:
    """One figure of the README table: ours and what it is judged against, from one run."""

    label: str
    against: str  # "reference", or "the stack's floor"
    fmt: str
    ours: float | None  # None: not measured (``ours_text`` says why)
    theirs: float | None
    ours_text: str
    theirs_text: str
    target: str
    workload: str  # the --workloads that measures it

    @property
    def ratio(self) -> float | None:
        return self.ours / self.theirs if self.ours is not None and self.theirs else None


def rows_of(run: dict[str, Any], ours: str) -> list[Row]:
    sizes = run["sizes"]
    rows: list[Row] = []
    results = run.get("results", {})
    r, ref = results.get(ours), results.get("reference")
    if r is not None and ref is not None:
        n = sizes["runs"]
        for label, key, fmt, spread in (
            (f"stream, {sizes['stream_mib']} MiB, MB/s (best of {sizes.get('stream_runs', 3)})",
             "stream_mbps", "{:.0f}", None),
            ("server CPU s/GiB streamed", "server_cpu_per_gib", "{:.2f}", None),
            (f"start → closed of `true`, median ms (p95), {n} one after another",
             "latency_median_ms", "{:.2f}", "latency_p95_ms"),
            (f"{n} starts at once: all started, s", "fanout_start_s", "{:.3f}", None),
            (f"{n} starts at once: all closed, s", "fanout_close_s", "{:.3f}", None),
            (f"peak RSS with {n} processes, MB", "fanout_peak_rss_mb", "{:.1f}", None),
            ("idle RSS, MB", "idle_rss_mb", "{:.1f}", None),
        ):
            target = (f"≥ {STREAM_AT_LEAST:g}x" if key == "stream_mbps" else
                      f"≤ {AT_MOST_REFERENCE[key]:g}x" if key in AT_MOST_REFERENCE else "")
            mine, theirs = fmt.format(r[key]), fmt.format(ref[key])
            if spread:
                mine += f" ({fmt.format(r[spread])})"
                theirs += f" ({fmt.format(ref[spread])})"
            rows.append(Row(label, "reference", fmt, r[key], ref[key], mine, theirs, target,
                            "unsandboxed"))
    for profile, servers in run.get("sandboxed", {}).items():
        label = (f"sandboxed start → closed of `true`, {profile}, median ms (p10–p90), "
                 f"{sizes['sandboxed_runs']} one after another")
        mine, theirs = servers.get(ours, {}), servers.get("reference", {})
        rows.append(Row(label, "reference", "{:.1f}", mine.get("median_ms"),
                        theirs.get("median_ms"),
                        ms_spread(mine) if "median_ms" in mine else mine.get("skipped", "-"),
                        ms_spread(theirs) if "median_ms" in theirs else theirs.get("skipped", "-"),
                        f"≤ {SANDBOXED_AT_MOST:g}x", "sandboxed"))
    cold = run.get("cold")
    if cold:
        label = (f"cold start, launch → `/readyz` 200, as deployed, median ms (min–max), "
                 f"{sizes['cold_runs']} each")
        mine_cold = times_spread(cold[DEPLOYED])
        rows.append(Row(label, "the stack's floor", "{:.0f}", median(cold[DEPLOYED]),
                        median(cold[FLOOR]), mine_cold, times_spread(cold[FLOOR]),
                        f"≤ {COLD_AT_MOST_FLOOR:g}x", "cold"))
        if REFERENCE_NAME in cold:
            rows.append(Row(label, "reference", "{:.0f}", median(cold[DEPLOYED]),
                            median(cold[REFERENCE_NAME]), mine_cold,
                            times_spread(cold[REFERENCE_NAME]), "", "cold"))
    return rows


def readme_table(runs: list[dict[str, Any]], ours: str) -> str:
    """The README's performance table: one row a figure, ours beside what it is judged against
    and the ratio of the two; under it the command and the machine's load. Of several runs
    (taken in turns with other work, or at different times), the medians across the runs, and
    the ratio's median and range."""
    if len(runs) == 1:
        lines = [f"| figure | {ours} | against | ratio | target | `--workloads` |",
                 "|---|---|---|---|---|---|"]
        lines += [f"| {row.label} | {row.ours_text} | {row.against} {row.theirs_text} | "
                  f"{'-' if row.ratio is None else f'{row.ratio:.2f}x'} | {row.target} | "
                  f"{row.workload} |" for row in rows_of(runs[0], ours)]
    else:
        lines = [f"| figure | {ours}, median of the runs | against, median of the runs | "
                 f"ratio: median (range) of {len(runs)} runs | target | `--workloads` |",
                 "|---|---|---|---|---|---|"]
        grouped: dict[tuple[str, str], list[Row]] = {}
        for run in runs:
            for row in rows_of(run, ours):
                grouped.setdefault((row.label, row.against), []).append(row)
        for (label, against), rows in grouped.items():
            mine = [row.ours for row in rows if row.ours is not None]
            theirs = [row.theirs for row in rows if row.theirs is not None]
            ratios = [row.ratio for row in rows if row.ratio is not None]
            fmt = rows[0].fmt
            ratio = "-"
            if ratios:
                ratio = f"{median(ratios):.2f}x ({min(ratios):.2f}–{max(ratios):.2f})"
                if len(ratios) < len(runs):
                    ratio += f", {len(ratios)} runs"
            lines.append(f"| {SPREAD.sub('', label)} | {fmt.format(median(mine)) if mine else '-'}"
                         f" | {against} {fmt.format(median(theirs)) if theirs else '-'}"
                         f" | {ratio} | {rows[0].target} | {rows[0].workload} |")
    commands: dict[str, list[dict[str, Any]]] = {}
    for run in runs:
        commands.setdefault(run["command"], []).append(run)
    for command, same in commands.items():
        loads = [float(run[when].split()[0]) for run in same
                 for when in ("load_before", "load_after")]
        when = same[0]["at"] if len(same) == 1 else f"{same[0]['at']} to {same[-1]['at']}"
        lines += ["", f"Measured by `{command}`{f' ({len(same)} runs)' if len(same) > 1 else ''}"
                  f" on {when}, {same[0]['sizes']['cores']} cores; the 1-minute load average "
                  f"from {min(loads):.2f} to {max(loads):.2f} before and after each run."]
    lines += [f"Note: {note}." for note in dict.fromkeys(n for run in runs for n in run["notes"])]
    return "\n".join(lines)
