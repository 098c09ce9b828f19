#!/usr/bin/env python3
"""Turns target/bench/results.jsonl into one table per scenario (medians of the repetitions,
ratios to the best peer and to raw TCP), printed and written to bench/RESULTS.md (full runs only).
Usage: report.py RESULTS.jsonl full|smoke|core|pubsub (core, pubsub: a `run.sh --only=…` run,
which replaces only its part of RESULTS.md)"""
import collections
import datetime
import json
import os
import platform
import re
import statistics
import subprocess
import sys

PEERS = ["tungstenite", "fastwebsockets", "tokio-websockets", "uws", "node", "picows"]
NAMES = {"raw": "raw TCP", "raw-sf": "raw TCP, whole frame first", "raw-x": "raw TCP + one exchange", "sockeye": "Sockeye",
         "sockeye-loop": "Sockeye loop (io_uring)", "sockeye-loop-epoll": "Sockeye loop (epoll)", "tungstenite": "tokio-tungstenite",
         "fastwebsockets": "fastwebsockets", "tokio-websockets": "tokio-websockets", "uws": "uWebSockets",
         "node": "Node ws", "picows": "picows"}
# scenario: (metric, unit, higher is better)
METRICS = {
    "push-server": ("msgs_per_s", "msgs/s", True),
    "push-client": ("msgs_per_s", "msgs/s", True),
    "rtt": ("mean_us", "µs: mean (p50 / p99); ratios of means", False),
    "rtt-under-load": ("mean_us", "µs: mean (p50 / p99); ratios of means", False),
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
    "rtt-under-load": "2. round trip under load: one client's sequential 64 B echoes while 100 other"
                      " connections run echo-many (16 in flight each) against the same server",
    "connect": "3. connect: TCP connect (+ TLS) + handshake + close, sequential",
    "connect-parallel": "3. connect: 16 loops in parallel, as many as fit",
    "echo-many": "4. echo-many: pipelined 64-byte binary echoes (\"wss\": over TLS 1.3)",
    "large": "5. large binary echo (\"streamed\": Sockeye's server cut-through, recv_chunk → send_fragment,"
             " against raw TCP, echo checked as it arrives; \"wss\": over TLS 1.3)",
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
        # The own loop's ratio beside the tokio server's, when it ran.
        loop = "sockeye-loop" in systems
        out.append("| params | " + " | ".join(NAMES[s] for s in systems) + " | Sockeye ÷ best peer | Sockeye ÷ raw TCP |"
                   + (" loop ÷ best peer |" if loop else ""))
        out.append("|---" * (len(systems) + 3 + loop) + "|")
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
            row = f"| {params} | " + " | ".join(cells) + f" | {ratio_peer} | {ratio_raw} |"
            if loop:
                ours_loop = med.get("sockeye-loop")
                row += f" {ours_loop / best:.2f} |" if isinstance(ours_loop, (int, float)) and ours_loop and best else " — |"
            out.append(row)
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
    out += uws_tables(runs, order)
    pubsub = pubsub_tables(runs, order)
    text = "\n".join(out + pubsub)
    print(text)
    here = os.path.dirname(os.path.abspath(__file__))
    if kind == "pubsub" and pubsub:
        # Only the pub/sub part of RESULTS.md is replaced, marked with this run's date.
        path = os.path.join(here, "RESULTS.md")
        try:
            old = open(path).read().split(PUBSUB_MARK)[0].rstrip("\n")
        except OSError:
            old = "# Benchmark results"
        note = (f"\nPub/sub measured {datetime.date.today()} by `bash bench/run.sh --only=pubsub` on"
                f" {os.cpu_count()} cores ({cpu_model()}), node {node_version()}; a separate run from the tables above.")
        lines = "\n".join(pubsub).lstrip("\n").split("\n", 1)
        with open(path, "w") as f:
            f.write(old + "\n\n" + lines[0] + "\n" + note + "\n" + lines[1] + "\n")
    if kind in ("full", "core"):
        # A core-only run keeps the pub/sub part of the last run that had one.
        kept = ""
        if kind == "core":
            try:
                parts = open(os.path.join(here, "RESULTS.md")).read().split(PUBSUB_MARK)
                kept = "\n" + PUBSUB_MARK + parts[1] if len(parts) > 1 else ""
            except OSError:
                pass
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
            f"{version(['rustc', '--version'])}; {peer_versions()}; node {version(['node', '--version'])};"
            f" {uws_version(runs)}.",
            "Figures on this shared machine are comparable within one run only.",
        ]
        with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "RESULTS.md"), "w") as f:
            f.write("\n".join(header) + "\n" + text + "\n" + kept)


UWS_NAMES = {"uws": "uWebSockets", "sockeye": "Sockeye", "sockeye-loop": "Sockeye loop (io_uring)",
             "sockeye-loop-epoll": "Sockeye loop (epoll)", "ws-tool": "`ws echo_server`",
             "ws-tool-tokio": "`ws echo_server --runtime tokio`",
             "tokio-websockets": "tokio-websockets", "fastwebsockets": "fastwebsockets", "tungstenite": "tokio-tungstenite"}


def uws_version(runs):
    status = (runs.get(("uws-status", "-", "uws")) or [{}])[0]
    if "version" in status:
        return f"uWebSockets {status['version']}"
    return "uWebSockets not run (set UWS_DIR: see bench/README.md)"


def uws_cell(done, key):
    """The median over the rounds of each round's median sample, and the server's share of its core
    over those samples (bold below 90%: the load generator, not the server, set the pace)."""
    ok = [r for r in done if key in r]
    if not ok:
        return None, "failed" if done else "—"
    value = statistics.median(r[key] for r in ok)
    cpu = statistics.median(r["server_cpu"] for r in ok)
    share = f"cpu {cpu:.0%}"
    return value, f"{fmt(value)} ({share if cpu >= 0.9 else f'**{share}**'})"


def paired_ratio(done, base, key):
    """The median of the ratios of the rounds both servers finished (run.sh records one entry a
    round, failed ones included, so the n-th entries of two servers are the same round), with the
    rounds' ratios after it when there are several."""
    pairs = [a[key] / b[key] for a, b in zip(done, base) if key in a and key in b and b[key]]
    if not pairs:
        return "—"
    if len(pairs) == 1:
        return f"{pairs[0]:.2f}"
    return f"{statistics.median(pairs):.2f} ({', '.join(f'{p:.2f}' for p in pairs)})"


def cpu_per_message(runs, scenario, keys, systems):
    """What each server's own code costs a message (user time) beside the kernel's share (system
    time: one recvfrom and one sendto per message, the same for every server within a machine
    state), medians over the rounds; and the throughput ratio those give at equal kernel time."""
    out = ["\nThe servers' CPU time per message, µs, user + system (medians over the rounds; from /proc/PID/stat"
           " over the same samples). The kernel's share moves with the machine's state for every server alike;"
           " \"at equal kernel time\" is (K + user of uWebSockets) ÷ (K + user of the server), K the mean system time"
           " of the two: the ratio the table above converges to when both run in the same state.\n"]
    ratios = [s for s in ("sockeye", "sockeye-loop", "sockeye-loop-epoll", "ws-tool", "ws-tool-tokio") if s in systems]
    out.append("| connections × payload | " + " | ".join(UWS_NAMES[s] for s in systems) + " | "
               + " | ".join(f"{UWS_NAMES[s]} ÷ uWebSockets at equal kernel time" for s in ratios) + " |")
    out.append("|---" * (len(systems) + len(ratios) + 1) + "|")
    rows = 0
    for _, params in keys:
        cost = {}
        for s in systems:
            done = [r for r in runs.get((scenario, params, s), []) if "user_us_per_unit" in r]
            if done:
                cost[s] = (statistics.median(r["user_us_per_unit"] for r in done),
                           statistics.median(r["system_us_per_unit"] for r in done))
        if not cost:
            continue
        rows += 1
        cells = [f"{cost[s][0]:.2f} + {cost[s][1]:.2f}" if s in cost else "—" for s in systems]
        equal = []
        for s in ratios:
            if s in cost and "uws" in cost:
                k = (cost[s][1] + cost["uws"][1]) / 2
                equal.append(f"{(k + cost['uws'][0]) / (k + cost[s][0]):.2f}")
            else:
                equal.append("—")
        out.append(f"| {params} | " + " | ".join(cells) + " | " + " | ".join(equal) + " |")
    return out if rows else []


def uws_tables(runs, order):
    """Sections 12 and 13: uWebSockets' load_test and broadcast_test, or why they did not run."""
    out = []
    for scenario, key, title, unit, first in (
        ("load-test", "msgs_per_s", "12. uWebSockets' load_test: each connection keeps one message in flight, echoed",
         "msgs/s", "connections × payload"),
        ("broadcast-test", "iterations_per_s", "13. uWebSockets' broadcast_test: each iteration every client sends one"
         " 20-byte message, published to every client, sender included", "iterations/s", "clients"),
    ):
        keys = [k for k in order if k[0] == scenario]
        status = (runs.get(("uws-status", scenario, "uws")) or [{}])[0]
        if not keys and "not_run" not in status:
            continue
        out.append(f"\n### {title} ({unit}, higher is better)\n")
        if not keys:
            out.append(f"uWebSockets {status['not_run']}.")
            continue
        rounds = max(len(runs.get((scenario, k[1], "uws"), [])) for k in keys)
        how = ("median of the 4-second samples after the first (the connection ramp)" if rounds == 1 else
               f"{rounds} rounds, each running every server once back to back, in the opposite order of the round"
               " before; a cell is the median over the rounds of each round's median 4-second sample after the first"
               " (the connection ramp), a ratio the median of the rounds' ratios (each round's in parentheses)")
        out.append(f"Server on CPU 0, the load generator on CPU 1; {how}; in parentheses the server's share of its"
                   " core over those samples (below 90% in bold: the load generator set the pace).\n")
        systems = [s for s in UWS_NAMES if any((scenario, k[1], s) in runs for k in keys)]
        ratios = [s for s in ("sockeye", "sockeye-loop", "sockeye-loop-epoll", "ws-tool", "ws-tool-tokio") if s in systems]
        out.append(f"| {first} | " + " | ".join(UWS_NAMES[s] for s in systems) + " | "
                   + " | ".join(f"{UWS_NAMES[s]} ÷ uWebSockets" for s in ratios) + " |")
        out.append("|---" * (len(systems) + len(ratios) + 1) + "|")
        for _, params in keys:
            cells = [uws_cell(runs.get((scenario, params, s), []), key)[1] for s in systems]
            base = runs.get((scenario, params, "uws"), [])
            out.append(f"| {params} | " + " | ".join(cells) + " | "
                       + " | ".join(paired_ratio(runs.get((scenario, params, s), []), base, key) for s in ratios) + " |")
        if scenario == "load-test":
            out += cpu_per_message(runs, scenario, keys, systems)
    return out


PUBSUB_MARK = "<!-- pubsub: written by report.py; `run.sh --only=pubsub` replaces from here -->"
PUBSUB_NAMES = {"raw": "pre-encoded (no pub/sub)", "sockeye": "Sockeye", "node": "Node ws (loop)",
                "socketio": "Socket.IO"}
NODE_NAMES = {"sockeye-redis": "Sockeye, Redis", "sockeye-redis-cluster": "Sockeye, Redis Cluster",
              "sockeye-nats": "Sockeye, NATS", "sockeye-nats-js": "Sockeye, NATS + JetStream",
              "sockeye-nats-cluster": "Sockeye, NATS cluster + JetStream R3",
              "ws-broadcast-redis": "`ws broadcast_server`, Redis", "ws-pubsub-redis": "`ws pubsub_server` (JSON), Redis",
              "socketio-redis": "Socket.IO, Redis adapter"}
# Ratios of the across-nodes table: (heading, numerator, denominator).
NODE_RATIOS = [("Sockeye Redis ÷ Socket.IO", "sockeye-redis", "socketio-redis"),
               ("Sockeye NATS ÷ Socket.IO", "sockeye-nats", "socketio-redis"),
               ("Redis Cluster ÷ Redis", "sockeye-redis-cluster", "sockeye-redis"),
               ("NATS cluster ÷ NATS + JetStream", "sockeye-nats-cluster", "sockeye-nats-js"),
               ("JSON protocol ÷ broadcast_server", "ws-pubsub-redis", "ws-broadcast-redis"),
               ("JSON protocol ÷ Socket.IO", "ws-pubsub-redis", "socketio-redis")]


def pubsub_cell(done):
    """deliveries/s (p50 / p99 µs), medians of the repetitions; the worst loss if any."""
    ok = [r for r in done if "deliveries_per_s" in r]
    if not ok:
        return None, "failed" if done else "—"
    med = lambda k: statistics.median(r[k] for r in ok)
    value = med("deliveries_per_s")
    cell = f"{fmt(value)} ({fmt(med('p50_us'))} / {fmt(med('p99_us'))})"
    lost = max(r.get("lost", 0) for r in ok)
    closed = max(r.get("closed", 0) for r in ok)
    if lost or closed:
        cell += f" **lost {lost:,}" + (f", {closed} closed" if closed else "") + "**"
    return value, cell


def ratio(a, b):
    return f"{a / b:.2f}" if a and b else "—"


def pubsub_tables(runs, order):
    out = []
    fan = [k for k in order if k[0] == "pubsub-fanout"]
    nodes = [k for k in order if k[0] == "pubsub-nodes"]
    memory = [k for k in order if k[0] == "pubsub-memory"]
    if not (fan or nodes or memory):
        return out
    out.append("\n" + PUBSUB_MARK)
    out.append("\nPub/sub (section 11): one topic, 64-byte messages; one publisher connection, every other connection"
               " subscribed. Deliveries/s: messages received by all subscribers ÷ time from the first publish to the"
               " last delivery; in parentheses publish→deliver latency p50 / p99 in µs (send time in the message, read"
               " by the same process). \"as fast as possible\": at most 128 messages per subscriber (200,000 deliveries in all) in flight;"
               " paced rows aim at 100,000 deliveries/s. Any message lost or subscriber closed is shown in bold.")
    if fan:
        systems = [s for s in PUBSUB_NAMES if any(("pubsub-fanout", k[1], s) in runs for k in fan)]
        out.append("\n### 11. pub/sub fan-out in one process (deliveries/s (p50 / p99 µs), higher is better)\n")
        out.append("| params | " + " | ".join(PUBSUB_NAMES[s] for s in systems)
                   + " | Sockeye ÷ best peer | Sockeye ÷ Socket.IO | Sockeye ÷ pre-encoded |")
        out.append("|---" * (len(systems) + 4) + "|")
        for _, params in fan:
            vals, cells = {}, []
            for s in systems:
                vals[s], cell = pubsub_cell(runs.get(("pubsub-fanout", params, s), []))
                cells.append(cell)
            peers = [vals[s] for s in ("node", "socketio") if vals.get(s)]
            ours = vals.get("sockeye")
            out.append(f"| {params} | " + " | ".join(cells) + f" | {ratio(ours, max(peers) if peers else None)}"
                       f" | {ratio(ours, vals.get('socketio'))} | {ratio(ours, vals.get('raw'))} |")
    if nodes:
        systems = [s for s in NODE_NAMES if any(("pubsub-nodes", k[1], s) in runs for k in nodes)]
        out.append("\n### 11. pub/sub across 3 nodes on one backplane (deliveries/s (p50 / p99 µs), higher is better)\n")
        out.append("Three server processes and the backplane's server share CPU 0; subscribers are spread over the"
                   " nodes, the publisher is on the first.\n")
        ratios = [r for r in NODE_RATIOS if r[1] in systems and r[2] in systems]
        out.append("| params | " + " | ".join(NODE_NAMES[s] for s in systems) + " | "
                   + " | ".join(r[0] for r in ratios) + " |")
        out.append("|---" * (len(systems) + len(ratios) + 1) + "|")
        for _, params in nodes:
            vals, cells = {}, []
            for s in systems:
                vals[s], cell = pubsub_cell(runs.get(("pubsub-nodes", params, s), []))
                cells.append(cell)
            out.append(f"| {params} | " + " | ".join(cells) + " | "
                       + " | ".join(ratio(vals.get(n), vals.get(d)) for _, n, d in ratios) + " |")
    if memory:
        out.append("\n### 11. pub/sub memory: Sockeye server RSS growth per idle connection (KiB, lower is better)\n")
        out.append("| connections | KiB per connection |")
        out.append("|---|---|")
        per = {}
        for _, params in memory:
            vals = [r["per_conn_kib"] for r in runs.get(("pubsub-memory", params, "sockeye"), []) if "per_conn_kib" in r]
            per[params] = statistics.median(vals) if vals else None
            out.append(f"| {params} | {fmt(per[params]) if per[params] is None else f'{per[params]:.2f}'} |")
        sub = [v for p, v in per.items() if "idle, subscribed" in p]
        nosub = [v for p, v in per.items() if p.endswith("idle, not subscribed")]
        split = [v for p, v in per.items() if "split into" in p]
        if sub and nosub and sub[0] is not None and nosub[0] is not None:
            out.append(f"| **per subscription** (subscribed − not subscribed) | **{sub[0] - nosub[0]:.2f}** |")
        if sub and split and sub[0] is not None and split[0] is not None:
            out.append(f"| per subscription above a split connection (a Session: Subscriber, one task) | {sub[0] - split[0]:.2f} |")
    return out


def peer_versions():
    """The peers' versions as locked in this tree."""
    here = os.path.dirname(os.path.abspath(__file__))
    found = []
    try:
        lock = open(os.path.join(here, "harness", "Cargo.lock")).read()
        for name in ("tokio-tungstenite", "fastwebsockets", "tokio-websockets", "tokio"):
            m = re.search(r'name = "%s"\nversion = "([^"]+)"' % re.escape(name), lock)
            found.append(f"{name} {m.group(1) if m else '?'}")
        ws = json.load(open(os.path.join(here, "peers", "node-ws", "package-lock.json")))
        found.append(f"Node ws {ws['packages'].get('node_modules/ws', {}).get('version', '?')}")
        found.append(open(os.path.join(here, "peers", "picows", "requirements.txt")).read().strip().replace("==", " "))
    except (OSError, ValueError, KeyError) as e:
        found.append(f"(versions unreadable: {e})")
    return ", ".join(found)


def node_version():
    try:
        return subprocess.run(["node", "--version"], capture_output=True, text=True, timeout=10).stdout.strip()
    except Exception:
        return "?"


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
