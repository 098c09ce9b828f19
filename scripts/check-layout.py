#!/usr/bin/env python3
"""Checks that the layout the documents describe is the layout there is.

1. Every file, folder and item that ARCHITECTURE.md names in backticks exists: a name ending in
   `.rs`, `.py`, `.sh`, `.mjs`, `.md`, `.json` or `/` is looked up as a path (relative to the
   crate of the section it is in, then to the repository); a `CamelCase` name, a `Type::item`
   path or a `function()` is looked up as a definition (struct, enum, trait, type, fn, const,
   static, mod, macro, enum variant or field) in the project's Rust sources. So a renamed file
   or type fails the quick tier until the document follows.
2. No source file of a crate holds more than 800 lines before its `#[cfg(test)]` module (a file
   a newcomer reads in one sitting; past ~500, look for its second concern).

Usage: python3 scripts/check-layout.py [--self-test]
Prints every stale name with its line, every file over the limit, and exits 1 if there is any.
"""

import os
import re
import subprocess
import sys
import tempfile

MAX_LINES = 800
FILE_SUFFIXES = (".rs", ".py", ".sh", ".mjs", ".js", ".md", ".json", ".toml", "/")
# Names in backticks that are not the project's own: crates, std and other libraries' items,
# commands and values. Each is a name a reader is not sent to look for in this tree.
FOREIGN = {
    "Bytes", "BytesMut", "Vec", "Option", "Result", "String", "Box", "Arc", "Mutex", "Duration",
    "Instant", "Sleep", "Some", "None", "Pending", "Ready", "Ok", "Err", "Sink", "Stream",
    "AsyncRead", "AsyncWrite", "TcpStream", "JoinSet", "CancellationToken", "AtomicBool",
    "TaskTracker", "RawValue", "Router", "Send", "Sync", "Drop", "Clone", "Debug", "Default",
    "From", "Into", "Buf", "Waker", "Context", "Poll", "Future", "Pin", "Self", "Response",
    "Request", "HeaderMap", "Uri", "JoinHandle", "AbortHandle", "SlowConsumer", "ClientProtocol",
    "ServerProtocol", "Protocol", "TLS", "HTTP", "SNI", "ALPN", "GOAWAY", "PING", "SETTINGS",
    "DATA", "CONNECT", "RST_STREAM", "WINDOW_UPDATE", "END_STREAM", "CANCEL", "STREAM_CLOSED",
    "SETTINGS_ENABLE_CONNECT_PROTOCOL", "HINCRBY", "XADD", "PUBLISH", "TCP_NODELAY",
    "SO_REUSEPORT", "FIN", "RSV1", "SIGINT", "SIGTERM", "UTF", "JSON", "README",
}


# The first segment of a path that is this project's own (checked); any other is a dependency's.
OURS = {"crate", "self", "super", "sockeye", "sockeye_proto", "sockeye_pubsub", "sockeye_cli"}


def repo_root():
    return os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def rust_sources(root):
    out = []
    for base in ("crates", "conformance", "soak", "fuzz", "bench/harness"):
        for d, dirs, fs in os.walk(os.path.join(root, base)):
            dirs[:] = [x for x in dirs if x not in ("target", "node_modules", "corpus", "artifacts")]
            out += [os.path.join(d, f) for f in fs if f.endswith(".rs")]
    return out


def definitions(sources):
    """Every name the Rust sources define: items, enum variants and struct fields."""
    names = {}  # name -> the files that define it (or have an `impl` of it)
    item = re.compile(r"\b(?:struct|enum|trait|type|fn|const|static|mod|union|macro_rules!)\s+([A-Za-z_][A-Za-z0-9_]*)")
    member = re.compile(r"^\s*(?:pub(?:\([^)]*\))?\s+)?([A-Za-z_][A-Za-z0-9_]*)\s*[:,({]", re.M)
    implemented = re.compile(r"\bimpl\b(?:\s*<[^>{]*>)?\s+(?:[A-Za-z0-9_:<>, ]+?\s+for\s+)?(?:[a-z_][a-z0-9_]*::)*([A-Z][A-Za-z0-9_]*)")
    for path in sources:
        text = open(path, encoding="utf-8", errors="replace").read()
        for name in item.findall(text) + member.findall(text) + implemented.findall(text):
            names.setdefault(name, set()).add(path)
    return names


def section_crate(root, heading):
    """The folder a section is about: the first folder its heading names in backticks."""
    for name in re.findall(r"`([A-Za-z0-9_./-]+)`", heading):
        if os.path.isdir(os.path.join(root, name)):
            return os.path.join(root, name.rstrip("/"))
    return None


def path_exists(root, crate, name, bullet=None):
    name = name.rstrip("/") if name.endswith("/") else name
    bases = [bullet] if bullet else []
    if crate:
        bases += [os.path.join(crate, "src"), crate]
    bases += [root]
    bases += [os.path.join(root, "crates")]
    for base in bases:
        if os.path.exists(os.path.join(base, name)):
            return True
    # A file named by its last parts within its crate (`nats/life.rs` under src/backplane/).
    # Only in the section's crate when it has one: a stale name must not pass because another
    # crate happens to have a file of that name.
    search = ([os.path.join(crate, "src") if os.path.isdir(os.path.join(crate, "src")) else crate]
              if crate else [os.path.join(root, "crates")])
    for s in search:
        for d, dirs, fs in os.walk(s):
            for f in fs + dirs:
                full = os.path.join(d, f)
                if full.endswith(os.sep + name):
                    return True
    return False


def check_architecture(root, doc="ARCHITECTURE.md"):
    sources = rust_sources(root)
    defined = definitions(sources)
    stale = []
    crate = None
    bullet = None
    in_code = False
    named = {}  # section folder -> the names in backticks there
    groups = {}  # section folder -> [the names of each top-level bullet (or paragraph)]
    group = None
    for number, line in enumerate(open(os.path.join(root, doc), encoding="utf-8"), 1):
        if line.startswith("```"):
            in_code = not in_code
            continue
        if in_code:
            continue
        if line.startswith("#"):
            crate = section_crate(root, line)
            bullet = None
            group = None
            continue
        if line.startswith("- ") or group is None or not line.strip():
            group = set()
            groups.setdefault(crate, []).append(group)
        # A top-level bullet that opens with a folder of the repository (`- \`fuzz/\`: …`) is
        # about that folder until the next top-level bullet.
        if line.startswith("- "):
            m = re.match(r"- `([A-Za-z0-9_.-]+/)`", line)
            bullet = os.path.join(root, m.group(1)) if m and os.path.isdir(os.path.join(root, m.group(1))) else None
        for token in re.findall(r"`([^`]+)`", line):
            token = token.strip()
            named.setdefault(crate, set()).add(token)
            group.add(token)
            if " " in token or token.startswith(("-", "$", "--")):
                continue  # a command, a flag or a phrase
            if token.endswith(FILE_SUFFIXES) and re.fullmatch(r"[A-Za-z0-9_./-]+", token):
                if not path_exists(root, crate, token, bullet):
                    stale.append((number, token, "no such file or folder"))
                continue
            first = token.split("::")[0]
            if "::" in token and first[:1].islower() and first not in OURS:
                continue  # another crate's item (std, tokio, futures_util…)
            for name in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", re.sub(r"[<(\[].*$", "", token)):
                looks_rust = (
                    re.fullmatch(r"[A-Z][a-z0-9]+[A-Z][A-Za-z0-9]*", name)  # CamelCase
                    or "::" in token or token.endswith(")")
                )
                if not looks_rust or name in FOREIGN or name.isupper() and "::" not in token:
                    continue
                if name in OURS:
                    continue
                if name not in defined:
                    stale.append((number, token, f"`{name}` is defined nowhere in the Rust sources"))
            # `Type::item`: the item is defined where the type is (its file, or a file with an
            # `impl` of it), not merely somewhere (a `Hub::publish` renamed away must not pass
            # because `Publisher::publish` exists).
            parts = re.sub(r"[<(\[].*$", "", token).split("::")
            for owner, member_name in zip(parts, parts[1:]):
                if (owner[:1].isupper() and owner in defined and member_name in defined
                        and not defined[owner] & defined[member_name]):
                    stale.append((number, token, f"`{member_name}` is not defined with `{owner}`"))
    # Every source file of a crate is named in the document (by its path from `src/`, or by its
    # name where that is unique in the crate), so a new file cannot go undescribed.
    for crate_dir in sorted(os.listdir(os.path.join(root, "crates"))):
        src = os.path.join(root, "crates", crate_dir, "src")
        here = named.get(os.path.join(root, "crates", crate_dir), set())
        files = sorted(os.path.relpath(os.path.join(d, f), src)
                       for d, _, fs in os.walk(src) for f in fs if f.endswith(".rs"))
        for rel in files:
            if os.path.basename(rel) in ("lib.rs", "main.rs"):
                continue
            folder = os.path.dirname(rel) + "/"
            base = os.path.basename(rel)
            same_name = [r for r in files if os.path.basename(r) == base]
            ok = any(n == rel or n.endswith("/" + rel) or ("/" in n and rel.endswith("/" + n)) for n in here)
            names_folder = lambda g, f: any(n.endswith("/") and (n == f or f.endswith("/" + n)) for n in g)
            if not ok and len(same_name) == 1:
                ok = base in here  # a name unique in the crate
            elif not ok and folder != "/":
                # A bare name shared by several files: named in a bullet that names its folder.
                ok = any(base in g and names_folder(g, folder) for g in groups.get(os.path.join(root, "crates", crate_dir), []))
            elif not ok:
                # At the crate's root: named in a bullet that names no folder holding its namesake.
                others = {os.path.dirname(r) + "/" for r in same_name if r != rel}
                ok = any(base in g and not any(names_folder(g, o) for o in others)
                         for g in groups.get(os.path.join(root, "crates", crate_dir), []))
            if os.path.basename(rel) == "mod.rs":
                ok = ok or any(n == folder or n.endswith("/" + folder) or folder.endswith("/" + n)
                               for n in here)
            if not ok:
                stale.append((0, f"crates/{crate_dir}/src/{rel}", "a source file the document never names"))
    for number, token, why in stale:
        print(f"{doc}{f':{number}' if number else ''}: `{token}`: {why}")
    return len(stale)


def check_sizes(root):
    over = 0
    for d, dirs, fs in os.walk(os.path.join(root, "crates")):
        dirs[:] = [x for x in dirs if x not in ("target", "tests", "examples", "benches")]
        if os.sep + "src" not in d + os.sep:
            continue
        for f in fs:
            if not f.endswith(".rs"):
                continue
            path = os.path.join(d, f)
            n = 0
            lines = open(path, encoding="utf-8").read().split("\n")
            for i, line in enumerate(lines):
                # The test module: `#[cfg(test)]` then `mod` (a test-only item before it counts).
                if line.startswith("#[cfg(test)]") and re.match(
                        r"\s*(pub(\([^)]*\))?\s+)?mod\s", line[len("#[cfg(test)]"):] or
                        next((l for l in lines[i + 1:] if l.strip()), "")):
                    break
                n += 1
            if n > MAX_LINES:
                over += 1
                print(f"{os.path.relpath(path, root)}: {n} lines before its tests (at most {MAX_LINES}: "
                      f"move its second concern to a file of its own)")
    return over


def self_test():
    import contextlib
    import io
    with tempfile.TemporaryDirectory() as d:
        src = os.path.join(d, "crates/demo/src")
        for folder in ("", "redis", "kafka"):
            os.makedirs(os.path.join(src, folder), exist_ok=True)
        files = {
            # Over the limit, with a test-only item before its test module (it counts).
            "hub.rs": "pub struct Hub { pub topics: usize }\nimpl Hub { pub fn publish(&self) {} }\n"
                      + "fn x() {}\n" * 790 + "#[cfg(test)]\nconst T: u8 = 0;\n" + "fn y() {}\n" * 20
                      + "#[cfg(test)]\nmod tests {}\n",
            "queue.rs": "pub struct Queue;\nimpl Queue { pub fn unsubscribe(&self) {} }\n",
            "redis/mod.rs": "mod wire;\n",
            "redis/wire.rs": "pub fn key() {}\n",
            "kafka/mod.rs": "mod wire;\n",
            "kafka/wire.rs": "pub fn key() {}\n",
        }
        for rel, text in files.items():
            with open(os.path.join(src, rel), "w") as f:
                f.write(text)
        with open(os.path.join(d, "ARCHITECTURE.md"), "w") as f:
            f.write("## Pub/sub (`crates/demo`)\n"
                    "- `hub.rs`: `Hub::publish`, `Hub` and `topics`; `queue.rs`: `Queue`.\n"
                    "- `stream.rs`: `SubscriberQueue` and `Hub::unsubscribe()`.\n"
                    "- `redis/`: `wire.rs` (keys).\n- `kafka/`: new.\n")
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            stale = check_architecture(d)
            over = check_sizes(d)
        out = buf.getvalue()
        expected = ["`stream.rs`: no such file", "`SubscriberQueue` is defined nowhere",
                    "`unsubscribe` is not defined with `Hub`", "kafka/wire.rs`: a source file the document never names",
                    "hub.rs: 8"]
        missing = [e for e in expected if e not in out]
        ok = stale == 4 and over == 1 and not missing
        print(out, end="")
        print(f"self-test: {stale} stale names (expected 4), {over} files over the limit (expected 1)"
              f"{', missing: ' + '; '.join(missing) if missing else ''}: {'ok' if ok else 'WRONG'}")
        return 0 if ok else 1


def main(args):
    if args == ["--self-test"]:
        return self_test()
    root = repo_root()
    stale = check_architecture(root)
    over = check_sizes(root)
    print(f"layout: {stale} stale names in ARCHITECTURE.md, {over} source files over {MAX_LINES} lines")
    return 1 if stale or over else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
