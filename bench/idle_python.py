#!/usr/bin/env python3
"""Idle memory per connection with a client that is not ours: Python `websockets`.

    python3 bench/idle_python.py                  # both servers, plain and deflate, 2,000 each
    python3 bench/idle_python.py --server ws-tool --connections 500 --hold 3
    python3 bench/idle_python.py --bin-dir target/release --no-build

Starts each server on a loopback port it picks, reads its RSS (`/proc/PID/status`, VmRSS),
opens N connections with Python `websockets` from this one process (asyncio, all at once, as an
application gathering its clients would), waits until every one is open and HOLD seconds more,
reads the RSS again and prints (after - before) / N in KiB; then closes every connection and
stops the server it started (by its PID). Twice per server: `compression=None` (plain) and the
client's default offer (`permessage-deflate; client_max_window_bits`, deflate).

The servers: `ws-tool`, the README's server (`ws echo_server -q --port P`, release build of
sockeye-cli), and `library`, bench section 6's (`bench-server sockeye echo|deflate P`, the
harness).
Unless --no-build, both are built first (cargo, release; the harness into this checkout's
target/, as bench/run.sh does).

--messages M echoes M ~1.2 KiB JSON messages on each connection before the wait (as section 6's
deflate row does one: compression state is made lazily); --concurrency N opens N at a time
instead of all at once; --malloc-info adds the server's heap
in use and the free heap glibc kept, per connection (gdb reads mallinfo2 from the live server).

The client library lives in a virtual environment under ~/.cache/sockeye/ (made and filled with
pip on first use, then reused). Loopback only; every wait is bounded.
"""

import argparse
import asyncio
import os
import resource
import socket
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VENV = os.path.expanduser("~/.cache/sockeye/idle-python-venv")
# websockets 14 brought the asyncio client used here (websockets.asyncio.client).
REQUIREMENT = "websockets>=14,<18"


# ~1.2 KiB of JSON, compressible, over the servers' least size to compress.
MESSAGE = "[" + ",".join(f'{{"id":{i},"name":"item {i}","ok":true}}' for i in range(40)) + "]"


def in_venv():
    """Re-runs this script under the venv's Python, making the venv first if needed."""
    python = os.path.join(VENV, "bin", "python")
    if os.path.realpath(sys.prefix) == os.path.realpath(VENV):
        return
    probe = [python, "-c", "import websockets.asyncio.client"]
    if not os.path.exists(python) or subprocess.run(probe, capture_output=True).returncode != 0:
        print(f"installing {REQUIREMENT} into {VENV}", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "venv", VENV], check=True)
        pip = [python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
        subprocess.run(pip + [REQUIREMENT], check=True)
    os.execv(python, [python] + sys.argv)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for {pid}")


def malloc_info(pid):
    """glibc's heap in use and free in its arenas (KiB), read with gdb from the live server:
    RSS that is free heap is memory the allocator kept, not state a connection holds."""
    ask = ["gdb", "-p", str(pid), "-batch", "-ex", "p (long)mallinfo2().uordblks"]
    out = subprocess.run(
        ask + ["-ex", "p (long)mallinfo2().fordblks"], capture_output=True, text=True, timeout=60
    ).stdout
    values = [int(line.split("=")[1]) for line in out.splitlines() if line.startswith("$")]
    return tuple(v // 1024 for v in values) if len(values) == 2 else None


def build(target_dir):
    cargo = ["cargo", "build", "--release", "--quiet"]
    subprocess.run(cargo + ["-p", "sockeye-cli", "--bin", "ws"], cwd=ROOT, check=True)
    env = dict(os.environ, CARGO_TARGET_DIR=target_dir)
    harness = os.path.join(ROOT, "bench", "harness")
    subprocess.run(cargo + ["--bin", "bench-server"], cwd=harness, env=env, check=True)


def server_command(kind, bin_dir, port, deflate):
    if kind == "ws-tool":
        # permessage-deflate on by default, as the library's.
        return [os.path.join(bin_dir, "ws"), "echo_server", "-q", "--port", str(port)]
    # Section 6's server: its `echo` mode turns permessage-deflate off, `deflate` keeps the
    # default (pooled states).
    mode = "deflate" if deflate else "echo"
    return [os.path.join(bin_dir, "bench-server"), "sockeye", mode, str(port), "0"]


def wait_listening(port, proc, seconds=20):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited with {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("the server did not listen in time")


async def hold(port, count, deflate, seconds, pid, concurrency, probe, messages):
    """Opens `count` connections, `concurrency` at a time (0: all at once); returns the server's
    RSS once all are open and `seconds` have passed, then closes them."""
    from websockets.asyncio.client import connect

    uri = f"ws://127.0.0.1:{port}/"
    options = {"open_timeout": 60, "close_timeout": 5}
    if not deflate:
        options["compression"] = None
    gate = asyncio.Semaphore(concurrency or count)

    async def one():
        async with gate:
            ws = await connect(uri, **options)
            # As section 6's deflate row: a message each way first, so that compression state
            # and context exist (they are made lazily).
            for _ in range(messages):
                await ws.send(MESSAGE)
                await asyncio.wait_for(ws.recv(), timeout=30)
            return ws

    opened = await asyncio.wait_for(asyncio.gather(*(one() for _ in range(count))), timeout=120)
    try:
        negotiated = sum(
            1 for c in opened if c.response.headers.get("Sec-WebSocket-Extensions")
        )
        if deflate and negotiated != count:
            raise RuntimeError(f"{count - negotiated} connections without permessage-deflate")
        await asyncio.sleep(seconds)
        return rss_kib(pid), (malloc_info(pid) if probe else None)
    finally:
        await asyncio.wait_for(asyncio.gather(*(c.close() for c in opened)), timeout=60)


def measure(kind, bin_dir, count, deflate, seconds, concurrency, probe, messages):
    port = free_port()
    proc = subprocess.Popen(
        server_command(kind, bin_dir, port, deflate),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_listening(port, proc)
        time.sleep(0.5)
        before = rss_kib(proc.pid)
        heap_before = malloc_info(proc.pid) if probe else None
        after, heap_after = asyncio.run(
            hold(port, count, deflate, seconds, proc.pid, concurrency, probe, messages)
        )
        return before, after, heap_before, heap_after
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--server", choices=["ws-tool", "library", "both"], default="both")
    parser.add_argument("--connections", type=int, default=2000)
    parser.add_argument("--hold", type=float, default=3.0, help="seconds after all are open")
    parser.add_argument("--mode", choices=["plain", "deflate", "both"], default="both")
    parser.add_argument(
        "--concurrency", type=int, default=0, help="handshakes at a time (default: all at once)"
    )
    parser.add_argument(
        "--messages", type=int, default=0, help="echoes per connection before the wait (0..10)"
    )
    parser.add_argument(
        "--malloc-info",
        action="store_true",
        help="also the server's heap in use and free heap (glibc, read with gdb)",
    )
    parser.add_argument("--bin-dir", default=os.path.join(ROOT, "target", "release"))
    parser.add_argument("--no-build", action="store_true")
    args = parser.parse_args()
    if not 1 <= args.connections <= 10000 or not 0 <= args.hold <= 60 or not 0 <= args.messages <= 10:
        parser.error("--connections 1..10000, --hold 0..60, --messages 0..10")
    in_venv()

    # Each connection is a socket at both ends, both in this process tree.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = min(hard, max(soft, 2 * args.connections + 256))
    resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    if want < 2 * args.connections + 64:
        sys.exit(f"open files limited to {want}: too few for {args.connections} connections")

    if not args.no_build:
        build(os.path.join(ROOT, "target"))
    servers = ["ws-tool", "library"] if args.server == "both" else [args.server]
    modes = ["plain", "deflate"] if args.mode == "both" else [args.mode]
    for kind in servers:
        for mode in modes:
            deflate = mode == "deflate"
            n = args.connections
            before, after, heap_before, heap_after = measure(
                kind,
                args.bin_dir,
                n,
                deflate,
                args.hold,
                args.concurrency,
                args.malloc_info,
                args.messages,
            )
            heap = ""
            if heap_before and heap_after:
                used = (heap_after[0] - heap_before[0]) / n
                free = (heap_after[1] - heap_before[1]) / n
                heap = f" (heap in use {used:.2f}, free heap kept {free:.2f})"
            print(
                f"{kind:8} {mode:8} {n} connections, {args.messages} messages: RSS {before} -> {after} KiB,"
                f" {(after - before) / n:.2f} KiB per connection{heap}",
                flush=True,
            )


if __name__ == "__main__":
    main()
