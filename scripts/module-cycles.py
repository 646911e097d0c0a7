#!/usr/bin/env python3
"""Import circles among the modules of one crate.

    python3 scripts/module-cycles.py [SRC_DIR]      (default: crates/pipeline/src)

A module `a` depends on a module `b` when a.rs (or a/*.rs) names `crate::b` anywhere outside
comments: in a `use crate::b…` line, in a grouped `use crate::{b, …}`, or in an inline path
such as `crate::b::f(…)`. Test code counts too (`#[cfg(test)] mod tests` inside a module is
part of that module). Top-level items re-exported from lib.rs (`crate::Engine`,
`crate::Result`) count as a dependency on lib. The script prints every module's
dependencies, then each strongly connected component of more than one module (an import
circle), and exits 1 if there is one.

The crate root (lib.rs) is a module too: `crate::X` naming an item that lib.rs re-exports
(`pub use error::{EngineError, Result}`) resolves to the module that defines it; an item
lib.rs defines itself (`crate::UsageRow`) is a dependency on lib; and lib.rs depends on every
module it names by path (`inner::Inner`, `pool::open(…)`), not on those it only declares.
"""

import os
import re
import sys


def strip_comments(text):
    # line comments (//, ///, //!) and block comments; strings are rare enough in `use`
    # lines that a plain scan is fine for this purpose
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return "\n".join(re.sub(r"//.*", "", line) for line in text.splitlines())


def modules(src):
    mods = {}
    for name in sorted(os.listdir(src)):
        path = os.path.join(src, name)
        if name.endswith(".rs"):
            mod = name[:-3]
            mods.setdefault("lib" if mod in ("lib", "main") else mod, []).append(path)
        elif os.path.isdir(path):
            for root, _, files in os.walk(path):
                mods.setdefault(name, []).extend(os.path.join(root, f) for f in files if f.endswith(".rs"))
    return mods


def reexports(src, names):
    """Item name -> defining module, for `pub use module::{…}` lines of lib.rs."""
    out = {}
    path = os.path.join(src, "lib.rs")
    if not os.path.exists(path):
        return out
    with open(path, encoding="utf-8") as fh:
        text = strip_comments(fh.read())
    for m in re.finditer(r"pub\s+use\s+([A-Za-z_][A-Za-z0-9_]*)::(\{[^}]*\}|[A-Za-z_][A-Za-z0-9_]*)\s*;", text):
        if m.group(1) not in names:
            continue
        for item in m.group(2).strip("{}").split(","):
            item = item.strip().split(" as ")[-1].strip()
            if item:
                out[item] = m.group(1)
    return out


def lib_deps(src, names):
    path = os.path.join(src, "lib.rs")
    if not os.path.exists(path):
        return set()
    with open(path, encoding="utf-8") as fh:
        text = strip_comments(fh.read())
    text = re.sub(r"(pub\s+)?mod\s+[A-Za-z_][A-Za-z0-9_]*\s*;", "", text)
    found = set(re.findall(r"(?<![A-Za-z0-9_:])([a-z_][a-z0-9_]*)::", text))
    return {n for n in found if n in names and n != "lib"}


def deps_of(files, names, items):
    out = set()
    resolve = lambda head: head if head in names else items.get(head, "lib")
    for f in files:
        with open(f, encoding="utf-8") as fh:
            text = strip_comments(fh.read())
        # grouped imports: use crate::{a, b::c, d::{e, f}}
        for group in re.finditer(r"\bcrate::\{", text):
            depth, i = 1, group.end()
            while depth and i < len(text):
                depth += {"{": 1, "}": -1}.get(text[i], 0)
                i += 1
            inner = text[group.end() : i - 1]
            # top-level names of the group only
            level, token, tops = 0, "", []
            for ch in inner:
                if ch == "{":
                    level += 1
                elif ch == "}":
                    level -= 1
                elif ch == "," and level == 0:
                    tops.append(token)
                    token = ""
                    continue
                if level == 0 and ch not in "{}":
                    token += ch
            tops.append(token)
            for t in tops:
                head = t.strip().split("::")[0].strip()
                if head:
                    out.add(resolve(head))
        for m in re.finditer(r"\bcrate::([A-Za-z_][A-Za-z0-9_]*)", text):
            out.add(resolve(m.group(1)))
    return out


def sccs(graph):
    index, low, stack, on, comps, counter = {}, {}, [], set(), [], [0]

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
            comps.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return comps


def main():
    src = sys.argv[1] if len(sys.argv) > 1 else "crates/pipeline/src"
    mods = modules(src)
    names = set(mods)
    items = reexports(src, names)
    graph = {m: deps_of(files, names, items) - {m} for m, files in mods.items()}
    graph["lib"] = (graph.get("lib", set()) | lib_deps(src, names)) - {"lib"}
    for m in sorted(graph):
        print(f"{m:14} -> {', '.join(sorted(graph[m])) or '-'}")
    circles = [c for c in sccs(graph) if len(c) > 1]
    print()
    if not circles:
        print(f"no import circle among {len(mods)} modules of {src}")
        return 0
    for c in circles:
        print(f"import circle ({len(c)} modules): {' '.join(c)}")
    return 1


if __name__ == "__main__":
    sys.exit(main())
