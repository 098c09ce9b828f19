#!/usr/bin/env python3
"""A `ws pubsub_server` under hostile clients: its RSS and open file descriptors over time.

Two runs, each bounded in connections and in time, on loopback only; the server is started
here and stopped here, by its PID.

  slowloris     N connections (default 10,000) from many loopback addresses (127.1.x.y, 100 per
                address, so that the per-address cap is not what stops them), each sending a
                request head one byte at a time, a byte every 2 s, never finishing it.
  slow-readers  N WebSocket clients (default 1,000) from as many addresses, each subscribed to a
                topic of its own and reading nothing (a 4 KiB receive buffer); a backend
                publishes PER_TOPIC publications of SIZE bytes on every topic through the HTTP
                API (default 8 x 256 KiB: 2 GiB offered in all).

Prints, at each sample, the server's RSS (MiB), its open descriptors and what the clients see
(connections still open). Usage:

  python3 bench/hostile_clients.py slowloris WS_BINARY [--connections N] [--seconds S]
  python3 bench/hostile_clients.py slow-readers WS_BINARY [--connections N] [--per-topic K]
      [--size BYTES] [--seconds S] [--server-flags "MORE FLAGS"]
"""

import argparse
import asyncio
import base64
import json
import os
import resource
import shlex
import signal
import socket
import struct
import subprocess
import sys
import time

API_TOKEN = "bench-api-token"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def server_stats(pid):
    rss = 0
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1]) / 1024
    fds = len(os.listdir(f"/proc/{pid}/fd"))
    return rss, fds


def source(i):
    """The i-th client's loopback address: 100 clients per address."""
    n = i // 100
    return f"127.1.{n // 250}.{n % 250 + 1}"


async def wait_ready(port, deadline=20.0):
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        try:
            r, w = await asyncio.open_connection("127.0.0.1", port)
            w.close()
            return
        except OSError:
            await asyncio.sleep(0.1)
    raise SystemExit(f"the server did not listen on {port} within {deadline} s")


def start_server(binary, port, extra):
    args = [binary, "pubsub_server", "-q", "--port", str(port), "--api-token", API_TOKEN, *extra]
    return subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def report(label, started, proc, open_count):
    rss, fds = server_stats(proc.pid)
    print(f"{time.monotonic() - started:6.1f} s  {label:<28} RSS {rss:8.1f} MiB  fds {fds:6d}  "
          f"clients open {open_count}", flush=True)
    return rss, fds


async def slowloris(args, proc, port):
    open_now = 0
    peak = [0.0, 0]
    stop = asyncio.Event()

    async def one(i):
        nonlocal open_now
        try:
            sock = socket.socket()
            sock.setblocking(False)
            sock.bind((source(i), 0))
            await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", port))
            r, w = await asyncio.open_connection(sock=sock)
        except OSError:
            return
        open_now += 1
        head = b"GET / HTTP/1.1\r\nHost: x\r\nX-Padding: " + b"a" * 10_000
        try:
            for byte in head:
                w.write(bytes([byte]))
                await w.drain()
                try:
                    got = await asyncio.wait_for(r.read(1), 2.0)
                    if got == b"":
                        break  # the server closed it
                except asyncio.TimeoutError:
                    pass
                if stop.is_set():
                    break
        except OSError:
            pass
        finally:
            open_now -= 1
            w.close()

    started = time.monotonic()
    tasks = []
    for i in range(args.connections):
        tasks.append(asyncio.create_task(one(i)))
        if i % 500 == 499:
            await asyncio.sleep(0.05)
    end = started + args.seconds
    while time.monotonic() < end:
        rss, fds = report("slowloris", started, proc, open_now)
        peak = [max(peak[0], rss), max(peak[1], fds)]
        await asyncio.sleep(2)
    rss, fds = report("slowloris, at the end", started, proc, open_now)
    stop.set()
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    print(f"peak RSS {max(peak[0], rss):.1f} MiB, peak fds {max(peak[1], fds)}; "
          f"at {args.seconds} s: RSS {rss:.1f} MiB, fds {fds}")


def mask(payload):
    key = os.urandom(4)
    masked = bytes(b ^ key[i % 4] for i, b in enumerate(payload))
    n = len(payload)
    head = bytes([0x81])
    if n < 126:
        head += bytes([0x80 | n])
    else:
        head += bytes([0x80 | 126]) + struct.pack("!H", n)
    return head + key + masked


async def slow_readers(args, proc, port):
    started = time.monotonic()
    sockets = []
    for i in range(args.connections):
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.bind((source(i), 0))
        sock.setblocking(False)
        try:
            await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", port))
        except OSError as e:
            print(f"connection {i}: {e}", file=sys.stderr)
            continue
        r, w = await asyncio.open_connection(sock=sock)
        key = base64.b64encode(os.urandom(16)).decode()
        w.write((f"GET / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\n"
                 f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
                 f"Sec-WebSocket-Version: 13\r\n\r\n").encode())
        await w.drain()
        head = await asyncio.wait_for(r.readuntil(b"\r\n\r\n"), 10)
        if not head.startswith(b"HTTP/1.1 101"):
            print(f"connection {i} refused: {head[:60]!r}", file=sys.stderr)
            w.close()
            continue
        w.write(mask(json.dumps({"type": "subscribe", "topic": f"user/{i}", "id": 1}).encode()))
        await w.drain()
        sockets.append((r, w))
    await asyncio.sleep(1)
    report(f"{len(sockets)} readers subscribed", started, proc, len(sockets))
    # The backend: every topic, PER_TOPIC publications of SIZE bytes (a JSON string), one per
    # request (a request body is at most the node's largest publication).
    body = json.dumps("x" * args.size).encode()
    peak = [0.0, 0]
    r, w = await asyncio.open_connection("127.0.0.1", port)
    published = refused = 0
    for round_ in range(args.per_topic):
        for i in range(args.connections):
            w.write((f"POST /publish/user/{i} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {API_TOKEN}\r\n"
                     f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n").encode() + body)
            await w.drain()
            head = await asyncio.wait_for(r.readuntil(b"\r\n\r\n"), 30)
            length = next(int(l.split(b":")[1]) for l in head.split(b"\r\n") if l.lower().startswith(b"content-length"))
            await r.readexactly(length)
            if head.startswith(b"HTTP/1.1 200"):
                published += 1
            else:
                refused += 1
        rss, fds = report(f"round {round_ + 1} published", started, proc, len(sockets))
        peak = [max(peak[0], rss), max(peak[1], fds)]
    end = time.monotonic() + args.seconds
    while time.monotonic() < end:
        rss, fds = report("readers still not reading", started, proc, len(sockets))
        peak = [max(peak[0], rss), max(peak[1], fds)]
        await asyncio.sleep(2)
    closed = 0
    for rr, _ in sockets:
        try:
            # A socket the node closed ends with EOF once its buffered bytes are read.
            while True:
                chunk = await asyncio.wait_for(rr.read(1 << 20), 0.05)
                if chunk == b"":
                    closed += 1
                    break
        except (asyncio.TimeoutError, OSError):
            pass
    print(f"published {published}, refused {refused}; peak RSS {peak[0]:.1f} MiB, peak fds {peak[1]}; "
          f"readers the node closed: {closed} of {len(sockets)}")
    for _, ww in sockets:
        ww.close()
    w.close()


async def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("mode", choices=["slowloris", "slow-readers"])
    p.add_argument("binary")
    p.add_argument("--connections", type=int)
    p.add_argument("--seconds", type=float, default=30)
    p.add_argument("--per-topic", type=int, default=8)
    p.add_argument("--size", type=int, default=256 << 10)
    p.add_argument("--server-flags", default="", help="more flags for the server, as one string")
    args = p.parse_args()
    args.extra = shlex.split(args.server_flags)
    if args.connections is None:
        args.connections = 10_000 if args.mode == "slowloris" else 1_000
    args.connections = min(args.connections, 20_000)
    args.seconds = min(args.seconds, 300)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 65536), hard))
    port = free_port()
    proc = start_server(args.binary, port, args.extra)
    try:
        await wait_ready(port)
        time.sleep(0.5)
        rss, fds = server_stats(proc.pid)
        print(f"server {args.binary} (PID {proc.pid}) idle: RSS {rss:.1f} MiB, fds {fds}")
        if args.mode == "slowloris":
            await slowloris(args, proc, port)
        else:
            await slow_readers(args, proc, port)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


if __name__ == "__main__":
    asyncio.run(main())
