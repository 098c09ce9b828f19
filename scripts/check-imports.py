#!/usr/bin/env python3
"""Checks that the files of each crate import one another one way: no circle between files.

A file imports another when it names an item through it: `use crate::a::b::Item`, `use
super::x`, or an inline `crate::a::b::f()` path. The path is resolved to the file that holds the
module it names (`src/a/b.rs` or `src/a/b/mod.rs`, the longest that exists), so an item taken
through a parent's re-export counts as an import of that parent. A file declaring its children
(`mod x;`) is not an import; a `mod.rs` that re-exports its children imports them, and then no
child may take anything from it. Comments, strings and `#[cfg(test)]` modules are left out: a
test module is part of the file it tests.

Usage: python3 scripts/check-imports.py [CRATE_DIR ...]   (default: every crate under crates/)
Prints each circle found (its files and the names that tie them) and exits 1 if there is any.
"""

import os
import re
import sys

PATH = re.compile(r"\b(crate|super|self)((?:::[A-Za-z_][A-Za-z0-9_]*)+)")
USE_GROUP = re.compile(r"\buse\s+(crate|super|self)((?:::[A-Za-z_][A-Za-z0-9_]*)*)::\{([^;]*)\};", re.S)


def strip(text):
    """The code without comments, strings and `#[cfg(test)] mod … { … }` blocks."""
    text = re.sub(r"//[^\n]*", "", text)
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    text = re.sub(r'r#*"(?:.|\n)*?"#*', '""', text)
    text = re.sub(r'"(?:\\.|[^"\\])*"', '""', text)
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


def module_of(src, path):
    """The module path (list of names) a file defines, relative to `src`."""
    rel = os.path.relpath(path, src)[:-3].split(os.sep)
    if rel[-1] in ("mod", "lib", "main"):
        rel = rel[:-1]
    return rel


def file_of(src, module):
    """The file holding the longest prefix of `module` that is a file of the crate."""
    for n in range(len(module), -1, -1):
        base = os.path.join(src, *module[:n])
        for cand in ((base + ".rs") if n else None, os.path.join(base, "mod.rs"),
                     os.path.join(base, "lib.rs") if n == 0 else None):
            if cand and os.path.isfile(cand):
                return cand, module[n:]
    return None, module


def imports(src, path):
    """{file imported: set of names taken} for one file."""
    here = module_of(src, path)
    code = strip(open(path, encoding="utf-8").read())
    paths = []
    for m in USE_GROUP.finditer(code):
        for item in re.split(r",", m.group(3)):
            item = item.strip().split(" as ")[0].strip()
            if item and not item.startswith("{"):
                paths.append((m.group(1), m.group(2) + "::" + item.replace("::{", "").strip("}")))
    paths += [(m.group(1), m.group(2)) for m in PATH.finditer(code)]
    found = {}
    for root, rest in paths:
        names = [p for p in rest.split("::") if p]
        if root == "crate":
            base = []
        elif root == "super":
            # `super` of a mod.rs/lib.rs-less file is its parent module.
            base = here[:-1]
            while names and names[0] == "super":
                names, base = names[1:], base[:-1]
        else:
            base = list(here)
        target, item = file_of(src, base + names)
        if target and os.path.abspath(target) != os.path.abspath(path):
            found.setdefault(target, set()).add("::".join(item) or "(module)")
    return found


def circles(graph):
    """Strongly connected components of more than one file (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
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


def main(crates):
    bad = 0
    for crate in crates:
        src = os.path.join(crate, "src")
        files = [os.path.join(d, f) for d, _, fs in os.walk(src) for f in fs if f.endswith(".rs")]
        edges = {f: imports(src, f) for f in files}
        graph = {f: set(t) for f, t in edges.items()}
        found = circles(graph)
        for comp in found:
            bad += 1
            print(f"circle in {crate}: {len(comp)} files")
            for f in comp:
                for t in sorted(graph[f] & set(comp)):
                    print(f"  {os.path.relpath(f, src)} -> {os.path.relpath(t, src)}: "
                          f"{', '.join(sorted(edges[f][t]))}")
        print(f"{crate}: {len(files)} files, {sum(len(g) for g in graph.values())} imports between them, "
              f"{len(found)} circles")
    return 1 if bad else 0


if __name__ == "__main__":
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    args = sys.argv[1:] or sorted(
        os.path.join(here, "crates", c) for c in os.listdir(os.path.join(here, "crates")))
    sys.exit(main(args))
