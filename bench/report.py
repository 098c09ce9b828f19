#!/usr/bin/env python3
"""Turns target/bench/results.jsonl into one table per scenario (medians of the repetitions,
ratios to the best peer and to raw TCP), printed and written to bench/RESULTS.md (full runs only).
Usage: report.py RESULTS.jsonl full|smoke"""
import collections
import datetime
import json
import os
import platform
import re
import statistics
import subprocess
import sys

PEERS = ["tungstenite", "fastwebsockets", "node", "picows"]
NAMES = {"raw": "raw TCP", "sockeye": "Sockeye", "tungstenite": "tokio-tungstenite",
         "fastwebsockets": "fastwebsockets", "node": "Node ws", "picows": "picows"}
# scenario: (metric, unit, higher is better)
METRICS = {
    "push-server": ("msgs_per_s", "msgs/s", True),
    "push-client": ("msgs_per_s", "msgs/s", True),
    "rtt": ("mean_us", "µs: mean (p50 / p99); ratios of means", False),
    "connect": ("mean_us", "µs: mean (p50 / p99); ratios of means", False),
    "connect-parallel": ("conns_per_s", "conns/s", True),
    "echo-many": ("msgs_per_s", "msgs/s", True),
    "large": ("mb_per_s", "MB/s", True),
    "memory": ("per_conn_kib", "KiB per idle connection", False),
    "compressed": ("msgs_per_s", "msgs/s", True),
    "instructions": ("per_unit", "instructions by callgrind", False),
}
TITLES = {
    "push-server": "1. push, server side: the server sends N × \"yo\"; our load generator counts",
    "push-client": "1. push, client side: each client receives N × \"yo\" from a pre-encoded push server",
    "rtt": "2. round trip: sequential echoes",
    "connect": "3. connect: TCP connect (+ TLS) + handshake + close, sequential",
    "connect-parallel": "3. connect: 16 loops in parallel, as many as fit",
    "echo-many": "4. echo-many: pipelined 64-byte binary echoes",
    "large": "5. large binary echo",
    "memory": "6. memory: server RSS growth with idle connections",
    "compressed": "7. compressed (permessage-deflate): push and echo, Sockeye's client against each server",
    "instructions": "8. instructions per operation, side by side (user space and syscall entry, not the kernel)",
}


NOT_RUN = "not run"


def fmt(v):
    if v is None:
        return "failed"
    if v == NOT_RUN:
        return "—"
    return f"{v:,.0f}" if v >= 100 else f"{v:,.1f}"


def main(path, kind):
    runs = collections.defaultdict(list)
    order = []
    for line in open(path):
        r = json.loads(line)
        key = (r["scenario"], r["params"])
        if key not in order:
            order.append(key)
        runs[key + (r["system"],)].append(r["result"])
    out = []
    for scenario in METRICS:
        metric, unit, higher = METRICS[scenario]
        keys = [k for k in order if k[0] == scenario]
        if not keys:
            continue
        systems = [s for s in NAMES if any((k[0], k[1], s) in runs for k in keys)]
        out.append(f"\n### {TITLES[scenario]} ({unit}{', higher is better' if higher else ', lower is better'})\n")
        out.append("| params | " + " | ".join(NAMES[s] for s in systems) + " | Sockeye ÷ best peer | Sockeye ÷ raw TCP |")
        out.append("|---" * (len(systems) + 3) + "|")
        for _, params in keys:
            med = {}
            for s in systems:
                done = runs.get((scenario, params, s))
                vals = [r[metric] for r in done or [] if metric in r]
                # None: every repetition failed; NOT_RUN: the system sits this row out.
                med[s] = statistics.median(vals) if vals else (None if done else NOT_RUN)
            peers = [med[s] for s in PEERS if isinstance(med.get(s), (int, float))]
            best = (max(peers) if higher else min(peers)) if peers else None
            ours = med.get("sockeye")
            ours = ours if isinstance(ours, (int, float)) else None
            raw = med.get("raw") if isinstance(med.get("raw"), (int, float)) else None
            ratio_peer = f"{ours / best:.2f}" if ours and best else "—"
            ratio_raw = f"{ours / raw:.2f}" if ours and raw else "—"
            cells = []
            for s in systems:
                cell = fmt(med[s])
                # Latency rows also show the medians of p50 and p99: a mean can hide a tail.
                tails = [[r.get(q) for r in runs.get((scenario, params, s), []) if q in r] for q in ("p50_us", "p99_us")]
                if isinstance(med[s], (int, float)) and all(tails):
                    cell += f" ({fmt(statistics.median(tails[0]))} / {fmt(statistics.median(tails[1]))})"
                cells.append(cell)
            out.append(f"| {params} | " + " | ".join(cells) + f" | {ratio_peer} | {ratio_raw} |")
    h2 = [k for k in order if k[0].startswith("h2-")]
    if h2:
        out.append("\n### 10. WebSockets over HTTP/2 (RFC 8441) vs HTTP/1.1, Sockeye client and server on both ends\n")
        out.append("Connect: time to a usable new socket (HTTP/1.1: a new TCP (+ TLS) connection and upgrade; HTTP/2: a new")
        out.append("stream on the open connection). Round trip: µs, mean (p50 / p99). Echo-many: msgs/s. Memory: server KiB per idle socket.\n")
        out.append("| scenario | params | HTTP/1.1 | HTTP/2 | HTTP/2 ÷ HTTP/1.1 |")
        out.append("|---|---|---|---|---|")
        for scenario, params in h2:
            metric = {"h2-echo-many": "msgs_per_s", "h2-memory": "per_conn_kib"}.get(scenario, "mean_us")
            cells, values = [], []
            for system in ("sockeye-h1", "sockeye-h2"):
                done = runs.get((scenario, params, system), [])
                vals = [r[metric] for r in done if metric in r]
                value = statistics.median(vals) if vals else None
                values.append(value)
                cell = fmt(value)
                tails = [[r.get(q) for r in done if q in r] for q in ("p50_us", "p99_us")]
                if value is not None and all(tails):
                    cell += f" ({fmt(statistics.median(tails[0]))} / {fmt(statistics.median(tails[1]))})"
                cells.append(cell)
            ratio = f"{values[1] / values[0]:.2f}" if values[0] and values[1] is not None else "—"
            out.append(f"| {scenario[3:]} | {params} | {cells[0]} | {cells[1]} | {ratio} |")
    micro = [(k[1], runs[k + ("sockeye",)][0]) for k in order if k[0] == "micro"]
    if micro:
        out.append("\n### 9. micro-benchmarks (Sockeye's hot paths, instructions by callgrind; repeatable)\n")
        out.append("| operation | instructions | per |")
        out.append("|---|---|---|")
        for op, r in micro:
            out.append(f"| {op} | {r['instructions']:,} | {r['unit']} |")
    text = "\n".join(out)
    print(text)
    if kind == "full":
        def version(cmd):
            try:
                return subprocess.run(cmd, capture_output=True, text=True, timeout=10).stdout.strip().splitlines()[0]
            except Exception:
                return "?"
        header = [
            "# Benchmark results",
            "",
            f"Measured {datetime.date.today()} on {platform.machine()}, {os.cpu_count()} cores"
            f" ({version(['uname', '-sr'])}, {cpu_model()}); `bash bench/run.sh` (medians of the"
            " repetitions; servers single-threaded on CPU 0, load generator on CPU 1). Versions: "
            f"{version(['rustc', '--version'])}; {peer_versions()}; node {version(['node', '--version'])}.",
            "Figures on this shared machine are comparable within one run only.",
        ]
        with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "RESULTS.md"), "w") as f:
            f.write("\n".join(header) + "\n" + text + "\n")


def peer_versions():
    """The peers' versions as locked in this tree."""
    here = os.path.dirname(os.path.abspath(__file__))
    found = []
    try:
        lock = open(os.path.join(here, "harness", "Cargo.lock")).read()
        for name in ("tokio-tungstenite", "fastwebsockets", "tokio"):
            m = re.search(r'name = "%s"\nversion = "([^"]+)"' % re.escape(name), lock)
            found.append(f"{name} {m.group(1) if m else '?'}")
        ws = json.load(open(os.path.join(here, "peers", "node-ws", "package-lock.json")))
        found.append(f"Node ws {ws['packages'].get('node_modules/ws', {}).get('version', '?')}")
        found.append(open(os.path.join(here, "peers", "picows", "requirements.txt")).read().strip().replace("==", " "))
    except (OSError, ValueError, KeyError) as e:
        found.append(f"(versions unreadable: {e})")
    return ", ".join(found)


def cpu_model():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "full")
