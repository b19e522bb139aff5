#!/usr/bin/env python3
"""arch_stats: the daemon's structure in figures (issue 37's before/after).

    arch_stats.py SOURCE_DIR [BUILD_DIR] [--folders-from TREE] [--check]

Prints, for daemon/ and ctl/:
  - sources (.c) per folder;
  - include circles: strongly connected groups of modules (NAME.c and
    NAME.h are one module) in the graph of #include "..." arrows;
  - call circles (with BUILD_DIR): strongly connected groups of .c files
    in the graph "calls a function defined in", from nm of the objects;
  - include arrows between daemon folders that layering_guard's list of
    allowed arrows does not hold (upward arrows).
--folders-from TREE assigns each file the folder its namesake has in TREE
(so that a flat daemon/ of an older commit is measured against today's
folders and arrows).
--check (the ctest daemon_circles): exits 1 when there is an include
circle, a call circle other than those in KNOWN_CIRCLES, an arrow the
list does not hold, or a folder of daemon/, engine/, proto/, ctl/, base/
or err/ with more than FOLDER_SOURCES_MAX sources directly.
"""
import os
import re
import subprocess
import sys

# Call circles not broken yet: each entry is the sorted files of one
# circle (none today). A circle that grows, or any other, fails --check.
KNOWN_CIRCLES = []

MISSING = []  # sources without an object in BUILD_DIR
FOLDER_SOURCES_MAX = 30  # .c and .cu files directly in one folder

INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)


def allowed_arrows(top):
    """The allowed arrows between daemon folders, as layering_guard.sh
    lists them ("allow FROM: TO TO ..." lines)."""
    path = os.path.join(top, 'tests/integration/layering_guard.sh')
    arrows = {}
    with open(path) as f:
        for line in f:
            m = re.match(r'^\s*allow\s+(\S+):\s*(.*?)\s*$', line)
            if m:
                arrows[m.group(1)] = set(m.group(2).split())
    return arrows


def sources(top, dirs):
    out = []
    for d in dirs:
        for root, _, files in os.walk(os.path.join(top, d)):
            for f in files:
                if f.endswith(('.c', '.h')):
                    out.append(os.path.relpath(os.path.join(root, f), top))
    return sorted(out)


def folder_of(rel):
    """daemon/jobs/include/jobs.h -> jobs; daemon/daemon.c -> root."""
    parts = rel.split('/')
    if parts[0] != 'daemon':
        return parts[0]
    if len(parts) == 2:
        return 'root'
    return parts[1]


def module_of(rel):
    return os.path.splitext(os.path.basename(rel))[0]


def scc(graph):
    """Tarjan's strongly connected components with more than one node."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

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
    return sorted(out)


# Sources a plain build does not compile (daemon/CMakeLists.txt adds them
# only to sanitizer builds): they have no object to read calls from, and
# they call nothing of ours.
SANITIZER_ONLY = {'daemon/tsan_close.c'}


def call_graph(build, files):
    """.c file -> .c files whose functions it calls, from nm."""
    objs = {}  # basename -> object paths
    for root, _, names in os.walk(build):
        for n in names:
            if n.endswith('.c.o'):
                objs.setdefault(n[:-2], []).append(os.path.join(root, n))

    def object_of(rel):
        """The object of source `rel`: the one whose folder is the
        source's own (daemon/cli/export.c -> .../cli/export.c.o, not
        engine/fmt's), else a daemon root file's (.../gptdroot.dir/)."""
        cands = objs.get(os.path.basename(rel), [])
        parent = os.path.basename(os.path.dirname(rel))
        for o in cands:
            if os.path.basename(os.path.dirname(o)) == parent:
                return o
        for o in cands:
            if parent == 'daemon' and os.path.dirname(o).endswith('.dir'):
                return o
        return None
    defined, undefined = {}, {}
    for rel in files:
        if not rel.endswith('.c') or rel in SANITIZER_ONLY:
            continue
        o = object_of(rel)
        if not o:
            MISSING.append(rel)
            continue
        res = subprocess.run(['nm', o], capture_output=True, text=True).stdout
        undefined[rel] = set()
        for line in res.splitlines():
            parts = line.split()
            if len(parts) == 3 and parts[1] == 'T':
                defined[parts[2]] = rel
            elif len(parts) == 2 and parts[0] == 'U':
                undefined[rel].add(parts[1])
    graph = {}
    for rel, syms in undefined.items():
        graph[rel] = {defined[s] for s in syms if s in defined and defined[s] != rel}
    return graph


def main():
    args = sys.argv[1:]
    check = '--check' in args
    if check:
        args.remove('--check')
    bad = []
    ref = None
    if '--folders-from' in args:
        i = args.index('--folders-from')
        ref = args[i + 1]
        del args[i:i + 2]
    top = args[0]
    build = args[1] if len(args) > 1 else None
    files = sources(top, ['daemon', 'ctl'])
    by_base = {os.path.basename(f): f for f in files}
    fold = {f: folder_of(f) for f in files}
    if ref:
        ref_files = sources(ref, ['daemon', 'ctl'])
        ref_fold = {os.path.basename(f): folder_of(f) for f in ref_files}
        # A file the reference tree has no longer in daemon/ (moved to
        # another layer since) belongs to no daemon folder.
        fold = {f: ref_fold.get(os.path.basename(f)) for f in files}

    print('sources (.c) per folder:')
    per = {}
    for f in files:
        if f.endswith('.c'):
            d = os.path.dirname(f)
            per[d] = per.get(d, 0) + 1
    for d in sorted(per):
        print(f'  {d:<20} {per[d]}')

    mods, arrows = {}, []
    for f in files:
        with open(os.path.join(top, f), errors='replace') as fh:
            incs = INCLUDE.findall(fh.read())
        m = module_of(f)
        for inc in incs:
            tgt = by_base.get(os.path.basename(inc))
            if not tgt:
                continue
            mods.setdefault(m, set())
            if module_of(tgt) != m:
                mods[m].add(module_of(tgt))
            arrows.append((f, tgt))
    # A header without a .c of its own (NAME_impl.h, NAME_int.h) is
    # transparent: an arrow through it is an arrow to what it includes.
    with_c = {module_of(f) for f in files if f.endswith('.c')}

    def reach(m, seen):
        for t in mods.get(m, ()):
            if t in seen:
                continue
            seen.add(t)
            if t not in with_c:
                reach(t, seen)
        return seen

    graph = {m: {t for t in reach(m, set()) if t in with_c and t != m}
             for m in mods if m in with_c}
    circles = scc(graph)
    bad += [' <-> '.join(c) for c in circles]
    print(f'include arrows between files: {len(arrows)}')
    print(f'include circles (modules: NAME.c with NAME.h): {len(circles)}')
    for c in circles:
        print('  ' + ' <-> '.join(c))

    if build:
        calls = call_graph(build, files)
        ccircles = scc(calls)
        bad += [' <-> '.join(c) for c in ccircles if c not in KNOWN_CIRCLES]
        print(f'call circles (.c files): {len(ccircles)}')
        for c in ccircles:
            print('  ' + ' <-> '.join(c))

    allow = allowed_arrows(ref or top)
    up = []
    for a, b in arrows:
        fa, fb = fold[a], fold[b]
        if not a.startswith('daemon/') or not b.startswith('daemon/') or fa == fb:
            continue
        if fa is None or fb is None:
            continue
        if fb not in allow.get(fa, set()):
            up.append((a, b, fa, fb))
    print(f'include arrows between daemon folders not allowed: {len(up)}')
    for a, b, fa, fb in up:
        print(f'  {a} -> {os.path.basename(b)} ({fa} -> {fb})')
    bad += [f'{a} -> {os.path.basename(b)}' for a, b, _, _ in up]
    # STYLE.md: subsystem folders past about 20 files; issue 37: none over 30.
    crowded = []
    for root, _, names in os.walk(top):
        rel = os.path.relpath(root, top)
        if rel.split(os.sep)[0] not in ('daemon', 'engine', 'proto', 'ctl', 'base', 'err'):
            continue
        n = sum(1 for x in names if x.endswith(('.c', '.cu')))
        if n > FOLDER_SOURCES_MAX:
            crowded.append(f'{rel}: {n} sources (at most {FOLDER_SOURCES_MAX})')
    bad += crowded
    if check and bad:
        print('FAIL: circles, arrows against the direction or crowded folders (a part that')
        print('is called back receives an interface, it does not include or call its caller):')
        for b in bad:
            print('  ' + b)
        sys.exit(1)
    if check and MISSING:
        print('FAIL: no object for ' + ', '.join(MISSING) + ' (build first)')
        sys.exit(1)
    if check and not build:
        print('FAIL: --check needs BUILD_DIR (call circles come from the objects)')
        sys.exit(1)


main()
