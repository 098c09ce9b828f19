#!/usr/bin/env python3
"""Runs one of uWebSockets' load generators (`load_test`, `broadcast_test`) against a server and
prints one JSON line for run.sh: the median of its 4-second samples after the first (which holds
the connection ramp), and the share of one core the server used over exactly those samples (from
/proc/PID/stat, user + system time of all its threads), so that a row where the server was not
at ~100% of its core says the load generator, not the server, was measured. It prints the server's
user and system time per unit (message or iteration) over the same samples too: the kernel's share
(one recvfrom and one sendto per message) moves with the machine's state from one run to the next
alike for every server, the user share is what a server's own code costs.

Usage: uws_sample.py SERVER_PID KEY PATTERN SAMPLES -- COMMAND...
  KEY      the JSON key of the figure (msgs_per_s, iterations_per_s)
  PATTERN  a regular expression whose first group is a sample (e.g. 'Msg/sec: ([0-9.]+)')
  SAMPLES  samples kept after the first; the run stops after SAMPLES + 1 (bounded in time too)
"""
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import time

TICKS = os.sysconf("SC_CLK_TCK")
# uSockets' LIBUS_TIMEOUT_GRANULARITY: both programs print one sample every 4 seconds.
PERIOD = 4


def cpu_seconds(pid):
    """User and system time of the process so far (all threads), in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        # The command name (field 2) may hold spaces: count fields after its closing parenthesis.
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) / TICKS, int(fields[12]) / TICKS


class OutOfTime(Exception):
    pass


def out_of_time(*_):
    raise OutOfTime


def main(argv):
    if len(argv) < 6 or argv[4] != "--":
        sys.exit(__doc__)
    pid, key, pattern, keep = int(argv[0]), argv[1], re.compile(argv[2]), int(argv[3])
    command = argv[5:]
    # stdbuf: both programs printf to a pipe, which C buffers; their lines must arrive as printed.
    child = subprocess.Popen(["stdbuf", "-oL", *command], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True, errors="replace")
    # Bounded: a program that stops printing (a server that never answers) is killed, and so is
    # it when run.sh's `timeout` ends this script.
    signal.signal(signal.SIGALRM, out_of_time)
    signal.signal(signal.SIGTERM, out_of_time)
    signal.alarm(PERIOD * (keep + 1) + 60)
    samples, start, last_lines, out_of_time_seen = [], None, [], False
    try:
        for line in child.stdout:
            last_lines = (last_lines + [line.strip()])[-3:]
            m = pattern.search(line)
            if m:
                if start is None:
                    # The first sample (the ramp) ends here: the kept ones start now.
                    start = (time.monotonic(), cpu_seconds(pid))
                else:
                    samples.append(float(m.group(1)))
                    if len(samples) == keep:
                        end = (time.monotonic(), cpu_seconds(pid))
                        break
    except OutOfTime:
        last_lines.append("(out of time)")
        out_of_time_seen = True
    finally:
        signal.alarm(0)
        child.kill()
        child.wait()
    if len(samples) < keep:
        print(f"{command[0]} stopped after {len(samples)} of {keep} samples: {' | '.join(last_lines)}", file=sys.stderr)
        # 124, as `timeout` says it: run.sh gives a hung run one more try in the smoke run.
        sys.exit(124 if out_of_time_seen else 1)
    seconds = end[0] - start[0]
    user, system = end[1][0] - start[1][0], end[1][1] - start[1][1]
    # Units handled over the window: the samples are rates over consecutive periods that cover it.
    units = statistics.mean(samples) * seconds
    result = {
        key: statistics.median(samples),
        "samples": samples,
        "server_cpu": round((user + system) / seconds, 3),
    }
    # None handled (a broadcast_test stopped by a lost message): no time per unit to give.
    if units > 0:
        result["user_us_per_unit"] = round(user / units * 1e6, 3)
        result["system_us_per_unit"] = round(system / units * 1e6, 3)
    print(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1:])
