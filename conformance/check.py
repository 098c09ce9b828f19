#!/usr/bin/env python3
"""Compare an Autobahn|Testsuite report with conformance/expected.json.

usage: check.py --role server|client [--expected FILE] [--full] INDEX_JSON

Prints a summary per section (cases, behaviours, close results, summed durations), then one line
per case whose result differs from what expected.json records. Exit 0 when every case matches,
1 on any difference (better or worse: cases only move toward OK, and expected.json must say so),
2 when the report is missing, unreadable or empty. With --full, the report must hold every case
(`total_cases`): a run that stopped early is a failure.
"""
import argparse
import json
import os
import sys
from collections import Counter, OrderedDict

BEHAVIORS = ["OK", "NON-STRICT", "INFORMATIONAL", "UNIMPLEMENTED", "FAILED"]
GOOD_CLOSE = {"OK", "INFORMATIONAL"}


def case_key(case_id):
    return tuple(int(p) if p.isdigit() else p for p in case_id.split("."))


def expected_for(case_id, table):
    """The value of the most specific key that matches: the exact id, then the longest prefix pattern."""
    if case_id in table:
        return table[case_id]
    best, best_len = None, -1
    for pattern, value in table.items():
        if pattern.endswith("*"):
            prefix = pattern[:-1]
            if case_id.startswith(prefix) and len(prefix) > best_len:
                best, best_len = value, len(prefix)
    return best


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--role", required=True, choices=["server", "client"])
    ap.add_argument("--expected", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "expected.json"))
    ap.add_argument("--full", action="store_true", help="require every case of the suite")
    ap.add_argument("index")
    a = ap.parse_args()

    try:
        with open(a.index) as f:
            report = json.load(f)
        with open(a.expected) as f:
            expected = json.load(f)
    except (OSError, ValueError) as e:
        print("check: cannot read: %s" % e, file=sys.stderr)
        return 2
    if len(report) != 1:
        print("check: expected one agent in %s, found %s" % (a.index, sorted(report)), file=sys.stderr)
        return 2
    agent, cases = next(iter(report.items()))
    if not cases:
        print("check: %s holds no cases" % a.index, file=sys.stderr)
        return 2
    table = expected[a.role]

    sections = OrderedDict()
    for cid in sorted(cases, key=case_key):
        sections.setdefault(cid.split(".")[0], []).append(cid)
    header = ["section", "cases"] + BEHAVIORS + ["close!=OK", "ms"]
    rows, total, total_ms, diffs = [], Counter(), 0, []
    for sec, ids in sections.items():
        c, ms = Counter(), 0
        for cid in ids:
            r = cases[cid]
            b, bc = r.get("behavior"), r.get("behaviorClose")
            c[b if b in BEHAVIORS else "FAILED"] += 1
            bad_close = b != "UNIMPLEMENTED" and bc not in GOOD_CLOSE
            c["close!=OK"] += bad_close
            ms += r.get("duration") or 0
            want = expected_for(cid, table)
            if b != want or bad_close:
                diffs.append("DIFF %-8s expected %s, got behavior=%s behaviorClose=%s  [%s]"
                             % (cid, want, b, bc, r.get("reportfile", "")))
        rows.append([sec, len(ids)] + [c[k] for k in BEHAVIORS] + [c["close!=OK"], ms])
        total.update(c)
        total_ms += ms
    rows.append(["total", len(cases)] + [total[k] for k in BEHAVIORS] + [total["close!=OK"], total_ms])
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    line = lambda row: "  ".join(str(x).rjust(w) for x, w in zip(row, widths))
    print("agent %s, role %s: %s" % (agent, a.role, a.index))
    print(line(header))
    for row in rows[:-1]:
        print(line(row))
    print("  ".join("-" * w for w in widths))
    print(line(rows[-1]))
    if a.full and len(cases) != expected["total_cases"]:
        diffs.append("DIFF the report holds %d cases, the suite has %d" % (len(cases), expected["total_cases"]))
    for d in diffs:
        print(d)
    print("%s: %d difference(s) from %s" % ("FAILED" if diffs else "PASSED", len(diffs), os.path.basename(a.expected)))
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main())
