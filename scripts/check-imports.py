#!/usr/bin/env python3
"""Checks that the files of each crate import one another one way: no circle between files.

A file imports another when it names an item *defined* there: `use crate::a::b::Item`, `use
super::x`, `use child::Item` (a child module the file declares), or an inline path
(`crate::a::b::f()`, `super::f()`, `child::f()`). A path is resolved to the file that holds the module it names (`src/a/b.rs` or
`src/a/b/mod.rs`, the longest that exists), and then through that file's re-exports (`pub use`,
`pub(crate) use`, in `lib.rs`, a `mod.rs` or any file) to the file that defines the item, so a
name taken through `crate::Item` or `super::Item` counts as an import of the file behind the
re-export, not of `lib.rs`. A re-export is itself an import of the file it names: a `mod.rs`
that re-exports a child imports it, and then that child may take nothing defined in the
`mod.rs` (move it to a leaf file both use). Declaring a child (`mod x;`) is not an import.
Comments, strings and `#[cfg(test)]` modules are left out: a test module is part of the file
it tests.

Usage: python3 scripts/check-imports.py [--graph] [CRATE_DIR ...]
       (default: every crate under crates/; --graph prints every edge)
       python3 scripts/check-imports.py --self-test
Prints each circle found (its files and the names that tie them) and exits 1 if there is any.
"""

import os
import re
import sys
import tempfile

PATH = re.compile(r"(?<![A-Za-z0-9_:])(crate|super|self)((?:::[A-Za-z_][A-Za-z0-9_]*)+)")
USE = re.compile(r"(?<![A-Za-z0-9_])(?:(pub)(?:\([^)]*\))?\s+)?use\s+([^;]*);")
CHILD = re.compile(r"(?<![A-Za-z0-9_])(?:pub(?:\([^)]*\))?\s+)?mod\s+([A-Za-z_][A-Za-z0-9_]*)\s*;")
MAX_HOPS = 16


def strip(text):
    """The code without comments, strings and `#[cfg(test)] mod … { … }` blocks."""
    text = re.sub(r"//[^\n]*", "", text)
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    text = re.sub(r'r#*"(?:.|\n)*?"#*', '""', text)
    text = re.sub(r'"(?:\\.|[^"\\])*"', '""', text)
    text = re.sub(r"'(?:\\.|[^'\\])'", "' '", text)
    out, i = [], 0
    for m in re.finditer(r"#\[cfg\(test\)\]\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+\w+\s*\{", text):
        if m.start() < i:
            continue
        out.append(text[i : m.start()])
        depth, j = 1, m.end()
        while j < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[j], 0)
            j += 1
        i = j
    out.append(text[i:])
    return "".join(out)


def parse_uses(code):
    """[(is_pub, [segments], alias)] for every `use` statement of the code."""
    found = []
    for m in USE.finditer(code):
        is_pub = bool(m.group(1))
        for path, alias in leaves(m.group(2)):
            found.append((is_pub, path, alias))
    return found


def leaves(tree, prefix=()):
    """The leaves of a use tree as (segments, alias): alias is the name it is known by here
    (`*` for a glob, `self` resolves to the path itself)."""
    tree = tree.strip()
    out = []
    brace = tree.find("{")
    if brace >= 0:
        head = [p.strip() for p in tree[:brace].split("::") if p.strip()]
        body = tree[brace + 1 : tree.rfind("}")]
        depth, start = 0, 0
        for i, ch in enumerate(body + ","):
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
            elif ch == "," and depth == 0:
                part = body[start:i].strip()
                start = i + 1
                if part:
                    out += leaves(part, prefix + tuple(head))
        return out
    m = re.match(r"(.*?)\s+as\s+([A-Za-z_][A-Za-z0-9_]*)$", tree, re.S)
    path, alias = (m.group(1), m.group(2)) if m else (tree, None)
    segs = list(prefix) + [p.strip() for p in path.split("::") if p.strip()]
    if segs and segs[-1] == "self":
        segs = segs[:-1]
    if not segs:
        return out
    return [(segs, alias or segs[-1])]


class Crate:
    def __init__(self, src):
        self.src = src
        self.files = sorted(os.path.join(d, f) for d, _, fs in os.walk(src) for f in fs if f.endswith(".rs"))
        self.code = {f: strip(open(f, encoding="utf-8").read()) for f in self.files}
        self.children = {f: set(CHILD.findall(self.code[f])) for f in self.files}
        # Re-exports: file -> {name: absolute module path of what it names}.
        self.reexports = {}
        for f in self.files:
            table = {}
            for is_pub, segs, alias in parse_uses(self.code[f]):
                if not is_pub or alias == "*":
                    continue
                absolute = self.absolute(f, segs)
                if absolute is not None:
                    table[alias] = absolute
            self.reexports[f] = table

    def module_of(self, path):
        rel = os.path.relpath(path, self.src)[:-3].split(os.sep)
        if rel[-1] in ("mod", "lib", "main"):
            rel = rel[:-1]
        return rel

    def file_of(self, module):
        """The file holding the longest prefix of `module` that is a file of the crate."""
        for n in range(len(module), -1, -1):
            base = os.path.join(self.src, *module[:n])
            for cand in ((base + ".rs") if n else None, os.path.join(base, "mod.rs"),
                         os.path.join(base, "lib.rs") if n == 0 else None,
                         os.path.join(base, "main.rs") if n == 0 else None):
                if cand and os.path.isfile(cand):
                    return cand, module[n:]
        return None, module

    def absolute(self, f, segs):
        """A path as written in file `f` -> an absolute module path (list), or None when it
        leaves the crate (another crate, std)."""
        here = self.module_of(f)
        root, rest = segs[0], segs[1:]
        if root == "crate":
            return list(rest)
        if root == "super":
            base = here[:-1]
            while rest and rest[0] == "super":
                rest, base = rest[1:], base[:-1]
            return base + list(rest)
        if root == "self":
            return here + list(rest)
        if root in self.children[f]:
            return here + list(segs)
        return None

    def definer(self, module):
        """(file, item) that defines what `module` (an absolute path) names, following re-exports."""
        for _ in range(MAX_HOPS):
            target, rest = self.file_of(module)
            if target is None:
                return None, None
            if rest and rest[0] in self.reexports[target]:
                module = self.reexports[target][rest[0]] + list(rest[1:])
                continue
            return target, "::".join(rest) or "(module)"
        return None, None

    def imports(self, f):
        """{file imported: set of names taken} for one file."""
        paths = [segs for _, segs, _ in parse_uses(self.code[f])]
        code_wo_uses = USE.sub("", self.code[f])
        paths += [[m.group(1)] + [p for p in m.group(2).split("::") if p] for m in PATH.finditer(code_wo_uses)]
        # Inline paths through a child the file declares (`api::publish(…)` in a mod.rs that has
        # `mod api;`), the same import as `use self::api::publish`; and through a name a `use`
        # brought in (`use crate::backplane::redis;` then `redis::wire::meta_key(…)`), an import
        # of the file that defines what the whole path names, not only of the module used.
        aliases = {}
        for _, segs, alias in parse_uses(self.code[f]):
            if alias != "*" and self.absolute(f, segs) is not None:
                aliases[alias] = self.absolute(f, segs)
        names = sorted(set(self.children[f]) | set(aliases))
        if names:
            inline = re.compile(r"(?<![A-Za-z0-9_:])(" + "|".join(map(re.escape, names))
                                + r")((?:::[A-Za-z_][A-Za-z0-9_]*)+)")
            for m in inline.finditer(code_wo_uses):
                rest = [p for p in m.group(2).split("::") if p]
                if m.group(1) in aliases:
                    paths.append(["crate"] + aliases[m.group(1)] + rest)
                else:
                    paths.append([m.group(1)] + rest)
        found = {}
        for segs in paths:
            absolute = self.absolute(f, segs)
            if absolute is None:
                continue
            target, item = self.definer(absolute)
            if target and os.path.abspath(target) != os.path.abspath(f):
                found.setdefault(target, set()).add(item)
        return found


def circles(graph):
    """Strongly connected components of more than one file (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def floors(graph):
    """The longest chain of imports below each file (a leaf is floor 1), circles aside."""
    memo = {}

    def depth(v, seen):
        if v in memo:
            return memo[v]
        if v in seen:
            return 0
        seen.add(v)
        d = 1 + max((depth(w, seen) for w in graph.get(v, ())), default=0)
        seen.discard(v)
        memo[v] = d
        return d

    return max((depth(v, set()) for v in graph), default=0)


def check(crate, show_graph=False, out=sys.stdout):
    src = os.path.join(crate, "src")
    c = Crate(src)
    edges = {f: c.imports(f) for f in c.files}
    graph = {f: set(t) for f, t in edges.items()}
    found = circles(graph)
    if show_graph:
        for f in sorted(edges):
            for t in sorted(edges[f]):
                print(f"  {os.path.relpath(f, src)} -> {os.path.relpath(t, src)}: "
                      f"{', '.join(sorted(edges[f][t]))}", file=out)
    for comp in found:
        print(f"circle in {crate}: {len(comp)} files", file=out)
        for f in comp:
            for t in sorted(graph[f] & set(comp)):
                print(f"  {os.path.relpath(f, src)} -> {os.path.relpath(t, src)}: "
                      f"{', '.join(sorted(edges[f][t]))}", file=out)
    print(f"{crate}: {len(c.files)} files, {sum(len(g) for g in graph.values())} imports between them "
          f"(re-exports resolved), {floors(graph)} floors, {len(found)} circles", file=out)
    return len(found)


def self_test():
    """The check must see a circle that runs through a re-export, and none in a clean tree."""
    cases = {
        # hub.rs takes SessionConfig through lib.rs's re-export; session.rs takes Hub the same way.
        "through lib.rs": ({
            "lib.rs": "mod hub;\nmod session;\npub use hub::Hub;\npub use session::SessionConfig;\n",
            "hub.rs": "use crate::SessionConfig;\npub struct Hub;\n",
            "session.rs": "use crate::{Hub};\npub struct SessionConfig;\n",
        }, 1),
        "through a mod.rs": ({
            "lib.rs": "pub mod backplane;\n",
            "backplane/mod.rs": "mod redis;\npub use redis::Redis;\npub struct Position;\n",
            "backplane/redis.rs": "use super::Position;\npub struct Redis;\n",
        }, 1),
        "a chain of re-exports and an alias": ({
            "lib.rs": "pub mod a;\npub mod b;\npub use a::Thing as Renamed;\n",
            "a/mod.rs": "mod inner;\npub use inner::Thing;\n",
            "a/inner.rs": "pub struct Thing;\nfn f() { let _ = crate::b::g(); }\n",
            "b.rs": "pub fn g() -> crate::Renamed { todo!() }\n",
        }, 1),
        "an inline path through a declared child": ({
            "lib.rs": "pub mod web;\n",
            "web/mod.rs": "mod api;\npub struct Shared;\nfn router() { let _ = api::publish; }\n",
            "web/api.rs": "use super::Shared;\npub fn publish(_: Shared) {}\n",
        }, 1),
        "an inline path through a module a `use` brought in": ({
            "lib.rs": "mod hub;\npub mod backplane;\n",
            "hub.rs": "use crate::backplane::redis;\npub struct Hub;\nfn f() { redis::wire::meta_key(); }\n",
            "backplane/mod.rs": "pub mod redis;\n",
            "backplane/redis/mod.rs": "pub mod wire;\n",
            "backplane/redis/wire.rs": "use crate::hub::Hub;\npub fn meta_key() {}\n",
        }, 1),
        "clean: a leaf both use": ({
            "lib.rs": "mod hub;\nmod session;\nmod config;\npub use config::SessionConfig;\npub use hub::Hub;\n",
            "config.rs": "pub struct SessionConfig;\n",
            "hub.rs": "use crate::SessionConfig;\npub struct Hub;\n",
            "session.rs": "use crate::{Hub, SessionConfig};\n#[cfg(test)]\nmod tests { use crate::session::*; }\n",
        }, 0),
    }
    bad = 0
    for name, (tree, expected) in cases.items():
        with tempfile.TemporaryDirectory() as d:
            for rel, text in tree.items():
                path = os.path.join(d, "src", rel)
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with open(path, "w") as fh:
                    fh.write(text)
            with open(os.devnull, "w") as null:
                got = check(d, out=null)
        status = "ok" if got == expected else "WRONG"
        bad += got != expected
        print(f"self-test {name}: {got} circles (expected {expected}) {status}")
    return 1 if bad else 0


def main(args):
    if args == ["--self-test"]:
        return self_test()
    show = "--graph" in args
    args = [a for a in args if a != "--graph"]
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    crates = args or sorted(
        os.path.join(here, "crates", c) for c in os.listdir(os.path.join(here, "crates")))
    bad = sum(check(crate, show) for crate in crates)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
