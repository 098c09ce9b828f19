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
    names = set()
    item = re.compile(r"\b(?:struct|enum|trait|type|fn|const|static|mod|union|macro_rules!)\s+([A-Za-z_][A-Za-z0-9_]*)")
    member = re.compile(r"^\s*(?:pub(?:\([^)]*\))?\s+)?([A-Za-z_][A-Za-z0-9_]*)\s*[:,({]", re.M)
    for path in sources:
        text = open(path, encoding="utf-8", errors="replace").read()
        names.update(item.findall(text))
        names.update(member.findall(text))
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
    search = ([os.path.join(crate, "src") if os.path.isdir(os.path.join(crate, "src")) else crate]
              if crate else []) + [os.path.join(root, "crates")]
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
    for number, line in enumerate(open(os.path.join(root, doc), encoding="utf-8"), 1):
        if line.startswith("```"):
            in_code = not in_code
            continue
        if in_code:
            continue
        if line.startswith("#"):
            crate = section_crate(root, line)
            bullet = None
            continue
        # A top-level bullet that opens with a folder of the repository (`- \`fuzz/\`: …`) is
        # about that folder until the next top-level bullet.
        if line.startswith("- "):
            m = re.match(r"- `([A-Za-z0-9_.-]+/)`", line)
            bullet = os.path.join(root, m.group(1)) if m and os.path.isdir(os.path.join(root, m.group(1))) else None
        for token in re.findall(r"`([^`]+)`", line):
            token = token.strip()
            named.setdefault(crate, set()).add(token)
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
            ok = any(n == rel or n.endswith("/" + rel) or n == os.path.basename(rel)
                     or ("/" in n and rel.endswith("/" + n)) for n in here)
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
            for line in open(path, encoding="utf-8"):
                if line.startswith("#[cfg(test)]"):
                    break
                n += 1
            if n > MAX_LINES:
                over += 1
                print(f"{os.path.relpath(path, root)}: {n} lines before its tests (at most {MAX_LINES}: "
                      f"move its second concern to a file of its own)")
    return over


def self_test():
    with tempfile.TemporaryDirectory() as d:
        os.makedirs(os.path.join(d, "crates/demo/src"))
        with open(os.path.join(d, "crates/demo/src/hub.rs"), "w") as f:
            f.write("pub struct Hub { pub topics: usize }\nimpl Hub { pub fn publish(&self) {} }\n"
                    + "fn x() {}\n" * 801 + "#[cfg(test)]\nmod tests {}\n")
        with open(os.path.join(d, "ARCHITECTURE.md"), "w") as f:
            f.write("## Pub/sub (`crates/demo`)\n- `hub.rs`: `Hub::publish`, `Hub` and `topics`.\n"
                    "- `queue.rs`: `SubscriberQueue` and `Hub::unsubscribe()`.\n")
        import io, contextlib
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            stale = check_architecture(d)
            over = check_sizes(d)
        ok = stale == 3 and over == 1  # hub.rs is named, so no unnamed file
        print(buf.getvalue(), end="")
        print(f"self-test: {stale} stale names (expected 3), {over} files over the limit (expected 1): "
              f"{'ok' if ok else 'WRONG'}")
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
