#!/usr/bin/env python3
"""Import circles among the modules of one crate, and the order of its folders.

    python3 scripts/module-cycles.py [--folders] [SRC_DIR]      (default: crates/pipeline/src)

Every .rs file is a module: `lib.rs` (or `main.rs`) is `lib`, `a.rs` and `a/mod.rs` are `a`,
`a/b.rs` is `a::b`. A module depends on another when its file names `crate::PATH` anywhere
outside comments: in a `use crate::a::b…` line, in a grouped `use crate::{a::b, c, …}`, or in
an inline path such as `crate::a::b::f(…)`; PATH resolves to the longest module it starts
with. Test code counts too (`#[cfg(test)] mod tests` inside a file is part of its module).
Items lib.rs re-exports (`pub use base::error::{EngineError, Result}`, so `crate::Result`)
resolve to the module that defines them; an item lib.rs defines itself (`crate::Engine`) is
a dependency on lib. lib.rs depends on every module it names by path, not on those it only
declares with `mod`. `super::` paths are not followed: they name the file's own module or
its folder.

The script prints every module's dependencies and each import circle of more than one
module. A folder (a top-level directory of SRC_DIR) is the set of its modules; the folders
depend on each other through their modules' dependencies, and the script prints that graph
with each folder's layer (0: imports no other folder), and every circle among folders.

With --folders the crate is laid out in folders: SRC_DIR's top level may hold only lib.rs,
main.rs and a folder's entry file `NAME.rs` beside a directory NAME, and imports must run
one way between folders; only a test-only folder (declared `#[cfg(test)] mod NAME;` in
lib.rs) may import lib.

Exits 1 on an import circle among modules or folders, or a breach of the --folders layout.
"""

import os
import re
import sys


def strip_comments(text):
    # line comments (//, ///, //!) and block comments; strings are rare enough in `use`
    # lines that a plain scan is fine for this purpose
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return "\n".join(re.sub(r"//.*", "", line) for line in text.splitlines())


def read(path):
    with open(path, encoding="utf-8") as fh:
        return strip_comments(fh.read())


def modules(src):
    """Module path ("lib", "a", "a::b") -> file."""
    mods = {}
    for root, _, files in os.walk(src):
        rel = os.path.relpath(root, src)
        parts = [] if rel == "." else rel.split(os.sep)
        for f in files:
            if not f.endswith(".rs"):
                continue
            stem = f[:-3]
            if not parts and stem in ("lib", "main"):
                name = "lib"
            elif stem == "mod":
                name = "::".join(parts)
            else:
                name = "::".join(parts + [stem])
            mods[name] = os.path.join(root, f)
    return mods


def use_paths(text):
    """Every path named after `crate::`, grouped imports expanded."""
    paths = []

    def expand(prefix, body):
        level, token, items = 0, "", []
        for ch in body:
            if ch == "{":
                level += 1
            elif ch == "}":
                level -= 1
            if ch == "," and level == 0:
                items.append(token)
                token = ""
                continue
            token += ch
        items.append(token)
        for item in items:
            item = item.strip()
            m = re.match(r"^([A-Za-z0-9_:\s]*?)(?:::)?\s*\{(.*)\}$", item, flags=re.S)
            if m:
                expand(prefix + [p.strip() for p in m.group(1).split("::") if p.strip()], m.group(2))
                continue
            item = re.sub(r"\s+as\s+[A-Za-z_][A-Za-z0-9_]*$", "", item)
            item = re.sub(r"\s+", "", item)
            if item:
                paths.append(prefix + [p for p in item.split("::") if p and p != "self"])

    for group in re.finditer(r"\bcrate::((?:[A-Za-z_][A-Za-z0-9_]*::)*)\{", text):
        depth, i = 1, group.end()
        while depth and i < len(text):
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        prefix = [p for p in group.group(1).split("::") if p]
        expand(prefix, text[group.end() : i - 1])
    for m in re.finditer(r"\bcrate((?:::[A-Za-z_][A-Za-z0-9_]*)+)", text):
        paths.append([p for p in m.group(1).split("::") if p])
    return paths


def reexports(text):
    """Item name -> module path, for `pub use a::b::{…}` / `pub use a::b::Item;` of lib.rs."""
    out = {}
    for m in re.finditer(r"pub\s+use\s+((?:[A-Za-z_][A-Za-z0-9_]*::)+)(\{[^}]*\}|[A-Za-z_][A-Za-z0-9_]*)\s*;", text):
        module = m.group(1).rstrip(":")
        for item in m.group(2).strip("{}").split(","):
            item = item.strip().split(" as ")[-1].strip()
            if item:
                out[item] = module
    return out


def resolve(path, names, items):
    """The longest module a `crate::` path starts with; re-exported items to their module."""
    for n in range(len(path), 0, -1):
        cand = "::".join(path[:n])
        if cand in names:
            return cand
    if path and path[0] in items:
        return resolve(items[path[0]].split("::"), names, {}) or "lib"
    return "lib"


def lib_deps(text, names):
    text = re.sub(r"(pub(\([a-z]+\))?\s+)?mod\s+[A-Za-z_][A-Za-z0-9_]*\s*;", "", text)
    out = set()
    for m in re.finditer(r"(?<![A-Za-z0-9_:])((?:[a-z_][a-z0-9_]*::)+)", text):
        parts = [p for p in m.group(1).split("::") if p]
        for n in range(len(parts), 0, -1):
            cand = "::".join(parts[:n])
            if cand in names and cand != "lib":
                out.add(cand)
                break
    # `pub use base::{pool_lock, units}`: modules named inside a group after a folder
    for m in re.finditer(r"\buse\s+([a-z_][a-z0-9_]*)::\{([^}]*)\}", text):
        for item in m.group(2).split(","):
            cand = f"{m.group(1)}::{item.strip()}"
            if cand in names:
                out.add(cand)
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


def folder_of(module):
    return module.split("::")[0]


def layers(graph):
    """Folder -> layer: 0 for a folder importing no other, else 1 + the highest it imports."""
    out = {}

    def layer(v, seen=()):
        if v not in out:
            below = [layer(w, seen + (v,)) for w in graph.get(v, ()) if w not in seen]
            out[v] = 1 + max(below) if below else 0
        return out[v]

    for v in graph:
        layer(v)
    return out


def test_only_folders(lib_text):
    return set(re.findall(r"#\[cfg\(test\)\]\s*(?:pub(?:\([a-z]+\))?\s+)?mod\s+([A-Za-z_][A-Za-z0-9_]*)\s*;", lib_text))


def main():
    args = sys.argv[1:]
    check_folders = "--folders" in args
    args = [a for a in args if a != "--folders"]
    src = args[0] if args else "crates/pipeline/src"
    mods = modules(src)
    names = set(mods)
    lib_text = read(mods["lib"]) if "lib" in mods else ""
    items = reexports(lib_text)
    graph = {}
    for m, path in mods.items():
        deps = {resolve(p, names, items) for p in use_paths(read(path))}
        graph[m] = deps - {m}
    graph["lib"] = (graph.get("lib", set()) | lib_deps(lib_text, names)) - {"lib"}
    for m in sorted(graph):
        print(f"{m:24} -> {', '.join(sorted(graph[m])) or '-'}")
    failed = False
    circles = [c for c in sccs(graph) if len(c) > 1]
    print()
    for c in circles:
        print(f"import circle ({len(c)} modules): {' '.join(c)}")
        failed = True
    if not circles:
        print(f"no import circle among {len(mods)} modules of {src}")

    folders = {folder_of(m) for m in mods if "::" in m or os.path.isdir(os.path.join(src, m))}
    if folders:
        fgraph = {f: set() for f in folders | {"lib"}}
        for m, deps in graph.items():
            fm = folder_of(m) if folder_of(m) in folders else m
            for d in deps:
                fd = folder_of(d) if folder_of(d) in folders else d
                if fm != fd and fm in fgraph:
                    fgraph[fm].add(fd)
        print()
        fcircles = [c for c in sccs(fgraph) if len(c) > 1]
        lay = layers({f: d for f, d in fgraph.items() if f != "lib"} if not fcircles else {})
        for f in sorted(fgraph, key=lambda f: (lay.get(f, 99), f)):
            if f == "lib":
                continue
            print(f"folder {f:12} layer {lay.get(f, '?')!s:2} -> {', '.join(sorted(fgraph[f])) or '-'}")
        for c in fcircles:
            print(f"import circle among folders: {' '.join(c)}")
            failed = True
        if check_folders:
            tests = test_only_folders(lib_text)
            for f in sorted(folders):
                if "lib" in fgraph[f] and f not in tests:
                    print(f"folder {f} imports lib.rs (only a test-only folder may)")
                    failed = True
            for name in sorted(os.listdir(src)):
                path = os.path.join(src, name)
                if os.path.isfile(path) and name.endswith(".rs"):
                    stem = name[:-3]
                    if stem not in ("lib", "main") and not os.path.isdir(os.path.join(src, stem)):
                        print(f"{path}: a file at the top level; it belongs in a folder")
                        failed = True
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
