#!/usr/bin/env python3
"""dead_symbols: fails on a public function that no non-test code calls.

usage: dead_symbols.py SOURCE_DIR BUILD_DIR     (the check, then its self-test)
       dead_symbols.py --check SOURCE_DIR BUILD_DIR ALLOW_FILE   (the check only)

How the words are decided (all from the built objects, so nothing is
guessed from header text):

public   A function of global binding that a production static library
         defines: `nm -g --defined-only` type T in a lib*.a of BUILD_DIR
         outside its tests/ folder (gpterr, gptbase, gptproto, gptengine,
         gpttok, gptfmt, gptfactory, gptcuda when built, and every daemon
         library), with a C name: `main` and C++-mangled names (_Z..., the
         CUDA objects' kernel stubs) are not public.

called   Either of:
         1. a relocation against the symbol in a production object (a member
            of those libraries, or an object of the gptd and gptctl
            programs) in a section of code or data, debug information and
            unwind tables left out (`readelf -rW`): a call, a jump, or its
            address in a table of function pointers;
         2. its name as a C identifier in a production source file
            (engine/, daemon/, ctl/, proto/, base/, err/: .c, .cu and .cuh,
            comments and string literals removed) inside braces (a function
            body or an initializer) or in a #define; at file scope outside
            braces a name is only declared or defined. This catches what
            leaves no relocation: a call the compiler inlined in the
            defining file, and sources this configuration did not compile
            (the CUDA backend without GPTD_CUDA).

non-test Everything under the source folders above. tests/, bench/ and
         packaging/ are not production: a function that only they call is
         reported like one nobody calls.

ALLOW_FILE (tests/tools/dead_symbols.allow) names the functions only tests
call today (test hooks, entry points of fuzzers and white-box tests), one
per line; the check fails on a name there that production now calls or
that is gone from the sources, so the list only shrinks. A name defined in
a source this configuration does not compile (the CUDA backend) may stay. Exit 0 when clean, 1 with
the names otherwise.
"""
import os
import re
import subprocess
import sys
import tempfile

PROD_DIRS = ("engine", "daemon", "ctl", "proto", "base", "err")
PROD_PROGRAMS = ("gptd", "gptctl")
SRC_EXT = (".c", ".cu", ".cuh")
TOKEN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|[{}]")
# Comments, then string and character literals (an escaped quote stays inside).
STRIP = re.compile(r'/\*.*?\*/|//[^\n]*|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', re.S)


def run(cmd):
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout


def production_objects(build):
    libs, objs = [], []
    prog_dirs = {p + ".dir" for p in PROD_PROGRAMS}
    for root, dirs, files in os.walk(build):
        rel = os.path.relpath(root, build)
        if rel == "tests" or rel.startswith("tests" + os.sep):
            dirs[:] = []
            continue
        for f in files:
            if f.startswith("lib") and f.endswith(".a"):
                libs.append(os.path.join(root, f))
        # A program's objects, wherever its CMakeLists puts it
        # (build/daemon/CMakeFiles/gptd.dir, build/CMakeFiles/gptctl.dir).
        parts = rel.split(os.sep)
        if any(a == "CMakeFiles" and b in prog_dirs for a, b in zip(parts, parts[1:])):
            objs += [os.path.join(root, f) for f in files if f.endswith(".o")]
    return sorted(libs), sorted(objs)


def public_functions(libs):
    names = set()
    for lib in libs:
        for line in run(["nm", "-g", "--defined-only", lib]).splitlines():
            parts = line.split()
            # C names only: the CUDA objects' C++-mangled kernel stubs and
            # helpers (_Z...) are reached through launches, not an API.
            if len(parts) == 3 and parts[1] == "T" and not parts[2].startswith("_Z"):
                names.add(parts[2])
    names.discard("main")
    return names


def relocated(files):
    names = set()
    for f in files:
        skip = True
        for line in run(["readelf", "-rW", f]).splitlines():
            if line.startswith("Relocation section"):
                sec = line.split("'")[1]
                skip = ".debug" in sec or "eh_frame" in sec
                continue
            parts = line.split()
            if not skip and len(parts) >= 5 and re.fullmatch(r"[0-9a-f]+", parts[0]):
                names.add(parts[4].split("@")[0])
    return names


def source_uses(text, uses, seen):
    """Adds to `uses` the identifiers text uses: those inside braces (a
    function body or an initializer) and in #define bodies; at file scope
    outside braces a name is declared or defined, not used. Every
    identifier goes into `seen`."""
    text = STRIP.sub(" ", text).replace("\\\n", " ")
    depth = 0
    for line in text.split("\n"):
        directive = line.lstrip().startswith("#")
        for tok in TOKEN.findall(line):
            if tok == "{" and not directive:
                depth += 1
            elif tok == "}" and not directive:
                depth = max(depth - 1, 0)
            elif tok not in "{}":
                seen.add(tok)
                if depth > 0 or line.lstrip().startswith("#define"):
                    uses.add(tok)


def source_scan(src):
    uses, seen = set(), set()
    for top in PROD_DIRS:
        for root, _, files in os.walk(os.path.join(src, top)):
            for f in files:
                if f.endswith(SRC_EXT):
                    with open(os.path.join(root, f), errors="replace") as fh:
                        source_uses(fh.read(), uses, seen)
    return uses, seen


def check(src, build, allow_file):
    libs, progs = production_objects(build)
    if not libs:
        print(f"dead_symbols: no production libraries under {build}")
        return 1
    public = public_functions(libs)
    called = relocated(libs + progs)
    uses, seen = source_scan(src)
    uncalled = {n for n in public if n not in called and n not in uses}
    allow = set()
    if os.path.exists(allow_file):
        with open(allow_file) as fh:
            allow = {l.split("#")[0].strip() for l in fh} - {""}
    status = 0
    for n in sorted(uncalled - allow):
        print(f"dead public function: {n} (no production code calls it: delete it, make it"
              f" static, or call it)")
        status = 1
    for n in sorted(allow - uncalled):
        # A name another configuration builds (the CUDA backend) is not
        # public here; it is stale once production sources no longer hold it.
        if n not in public and n in seen and n not in uses:
            continue
        why = "is no longer a function of ours" if n not in public else "is called by production code"
        print(f"{os.path.basename(allow_file)}: {n} {why}: remove it from the list")
        status = 1
    return status


def selftest():
    """A scratch tree whose library holds a function its program calls, one
    only its own file calls (inlined there), one a table names, one the
    allow list names, and one planted that nothing calls: only the planted
    one and a stale allow entry may be reported."""
    cc = os.environ.get("CC", "cc")
    with tempfile.TemporaryDirectory() as t:
        src, build = os.path.join(t, "src"), os.path.join(t, "build")
        os.makedirs(os.path.join(src, "engine"))
        os.makedirs(os.path.join(src, "ctl"))
        os.makedirs(os.path.join(build, "CMakeFiles", "gptctl.dir"))
        with open(os.path.join(src, "engine", "a.c"), "w") as fh:
            fh.write("int planted_dead_fn(int x);\nint own_file_fn(int x);\n"
                     "int own_file_fn(int x) { return x + 1; }\n"
                     "int used_fn(int x) { return own_file_fn(x) * 2; }\n"
                     "int table_fn(int x) { return x; }\n"
                     "int (*const a_table[])(int) = {table_fn};\n"
                     "/* planted_dead_fn(1) in a comment is no call */\n"
                     "int planted_dead_fn(int x) { return x - 1; }\n"
                     "int hook_fn(int x) { return x; }\n")
        with open(os.path.join(src, "ctl", "main.c"), "w") as fh:
            fh.write('int used_fn(int x);\nint main(void) { return used_fn(1) == 4 ? 0 : 1; }\n'
                     'const char *s = "planted_dead_fn";\n')
        a_o, m_o = os.path.join(t, "a.o"), os.path.join(build, "CMakeFiles", "gptctl.dir", "m.o")
        run([cc, "-O2", "-c", os.path.join(src, "engine", "a.c"), "-o", a_o])
        run([cc, "-O2", "-c", os.path.join(src, "ctl", "main.c"), "-o", m_o])
        run(["ar", "rcs", os.path.join(build, "libgptplant.a"), a_o])
        allow = os.path.join(t, "allow")
        with open(allow, "w") as fh:
            fh.write("hook_fn  # a test hook\n")
        out = subprocess.run([sys.executable, __file__, "--check", src, build, allow],
                             capture_output=True, text=True)
        want = ["dead public function: planted_dead_fn"]
        ok = out.returncode == 1 and all(w in out.stdout for w in want) and all(
            n not in out.stdout for n in ("used_fn", "own_file_fn", "table_fn", "hook_fn"))
        with open(allow, "a") as fh:
            fh.write("used_fn\ngone_fn\n")
        out2 = subprocess.run([sys.executable, __file__, "--check", src, build, allow],
                              capture_output=True, text=True)
        ok = ok and out2.returncode == 1 and "used_fn is called by production" in out2.stdout \
            and "gone_fn is no longer a function of ours" in out2.stdout
        if not ok:
            print("dead_symbols self-test failed:\n" + out.stdout + out2.stdout)
            return 1
    return 0


def main(argv):
    if len(argv) == 5 and argv[1] == "--check":
        return check(argv[2], argv[3], argv[4])
    if len(argv) != 3:
        print(__doc__)
        return 2
    allow = os.path.join(os.path.dirname(os.path.abspath(__file__)), "dead_symbols.allow")
    status = check(argv[1], argv[2], allow)
    return status | selftest()


if __name__ == "__main__":
    sys.exit(main(sys.argv))
