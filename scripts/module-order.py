#!/usr/bin/env python3
"""Checks that the block layer's modules (crates/mqblk/src) import one
another in one declared order, bottom up, with no cycle: a module may use
the modules before it in MODULE_ORDER, never one after it. Prints each
`use` (or path) that climbs back up, with its file and line, and exits 1
if there is any.

Usage: scripts/module-order.py [--graph]
  --graph   print each module's imports instead (for a picture of the house)
"""
import os
import re
import sys

SRC = os.path.join(os.path.dirname(__file__), "..", "crates", "mqblk", "src")

# Bottom up. The block layer's path of one I/O reads top down: a client
# submits a bio (client, plug), the queue checks it and takes a tag (queue,
# tag over sbitmap), the request goes through the scheduler to the
# hardware context and the driver (sched, hctx, driver), and completes up
# through the completion rings.
MODULE_ORDER = """
sync clock cpus socket_mode status zoned config registry buf bio error segment limits trace sbitmap completion request tag
driver merge sched hctx queue plug client device
""".split()

# Modules outside the order: the crate root, and test-only modules.
EXEMPT = {"lib", "loom_models"}

PATH = re.compile(r"\b(crate|super)::(\{[^}]*\}|[a-z_][a-z0-9_]*)")
USE_GROUP = re.compile(r"^\s*(?:pub(?:\([a-z]+\))?\s+)?use\s+crate::\{([^;]*)\};", re.S | re.M)


def top_module(path):
    rel = os.path.relpath(path, SRC)
    first = rel.split(os.sep)[0]
    return first[:-3] if first.endswith(".rs") else first


def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return "\n".join(line.split("//")[0] if '"' not in line.split("//")[0] else line for line in text.split("\n"))


TEST_MODULE = re.compile(r"#\[cfg\([^\]]*\btest\b[^\]]*\)\]\s*mod\s+\w+\s*\{")


def references(path):
    """(line number, referenced top-level module) for each crate:: path,
    outside test modules (unit tests may use the whole crate)."""
    mod = top_module(path)
    text = strip_comments(open(path).read())
    test = TEST_MODULE.search(text)
    if test:
        text = text[: test.start()]
    refs = []
    for m in USE_GROUP.finditer(text):
        line = text.count("\n", 0, m.start()) + 1
        for item in re.split(r"[,\s]+", re.sub(r"\{[^}]*\}", "", m.group(1))):
            name = item.split("::")[0].strip()
            if name:
                refs.append((line, name))
    for m in PATH.finditer(text):
        line = text.count("\n", 0, m.start()) + 1
        kind, name = m.group(1), m.group(2)
        if kind == "super":
            # super:: inside a top-level module's own files stays inside it,
            # except from a top-level file's child (lib.rs is the parent).
            rel = os.path.relpath(path, SRC).split(os.sep)
            depth = len(rel) - (0 if rel[-1] == "mod.rs" else 1)
            if depth >= 2 or (depth == 1 and rel[-1] == "mod.rs"):
                continue
            if name.startswith("{"):
                continue
        if name.startswith("{"):
            continue
        refs.append((line, name))
    return [(line, name) for line, name in refs if name != mod]


def main():
    graph = "--graph" in sys.argv
    modules = set()
    for entry in os.listdir(SRC):
        modules.add(entry[:-3] if entry.endswith(".rs") else entry)
    unknown = sorted(modules - set(MODULE_ORDER) - EXEMPT)
    if unknown:
        print(f"module-order: modules missing from MODULE_ORDER: {', '.join(unknown)}")
        return 1
    rank = {m: i for i, m in enumerate(MODULE_ORDER)}
    climbs = []
    edges = {}
    for root, _, files in os.walk(SRC):
        for f in sorted(files):
            if not f.endswith(".rs"):
                continue
            path = os.path.join(root, f)
            mod = top_module(path)
            for line, name in references(path):
                if name not in rank:
                    continue
                edges.setdefault(mod, set()).add(name)
                if mod in EXEMPT or "tests" in f or "/tests" in path:
                    continue
                if rank[name] > rank[mod]:
                    climbs.append(f"{os.path.relpath(path, SRC)}:{line}: {mod} uses {name}, which comes after it")
    if graph:
        for mod in MODULE_ORDER:
            print(f"{mod}: {' '.join(sorted(edges.get(mod, ()), key=rank.get))}")
        return 0
    for c in sorted(set(climbs)):
        print(c)
    if climbs:
        print(f"module-order: {len(set(climbs))} uses climb back up (order: {' '.join(MODULE_ORDER)})")
        return 1
    print(f"module-order: {len(MODULE_ORDER)} modules in order, no use climbs back up")
    return 0


if __name__ == "__main__":
    sys.exit(main())
