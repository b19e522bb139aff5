#!/usr/bin/env python3
"""func_length: production functions by length (issue 37's long functions).

    func_length.py SOURCE_DIR [--over N] [--check LIMIT] [--self-test]

Lists the C functions of the production folders (engine/, daemon/, proto/,
ctl/, base/, err/; .c and .h, CUDA .cu/.cuh kernels excluded) longest
first, with the count of those over 100 and over 150 lines. A function's
length is its lines from the line that names it to its closing brace,
both included (blank and comment lines count: they are read too).
--over N lists only those longer than N (default 100).
--check LIMIT (the ctest function_length): exits 1 when a function is
longer than LIMIT lines, naming it.
--self-test: plants a function of LIMIT+1 lines (and one of exactly LIMIT)
in a scratch tree and checks that --check catches the first only.
"""
import os
import re
import subprocess
import sys
import tempfile

DIRS = ['engine', 'daemon', 'proto', 'ctl', 'base', 'err']
EXTS = ('.c', '.h')
KEYWORDS = {'if', 'for', 'while', 'switch', 'return', 'sizeof', 'do',
            'else', 'case', 'defined', '__attribute__', 'alignof',
            '_Alignof', '__typeof__', 'typeof', '_Generic'}


def blank(text):
    """The text with comments, string and character literals and
    preprocessor lines replaced by spaces (newlines kept), so that braces
    and parentheses left are code."""
    out = []
    i, n = 0, len(text)
    line_start = True
    while i < n:
        c = text[i]
        if line_start and c in ' \t':
            out.append(c)
            i += 1
            continue
        if line_start and c == '#':
            # a preprocessor line, with its backslash continuations
            while i < n and text[i] != '\n':
                if text[i] == '\\' and i + 1 < n and text[i + 1] == '\n':
                    out.append(' \n')
                    i += 2
                    continue
                out.append(' ')
                i += 1
            continue
        line_start = False
        if text.startswith('/*', i):
            j = text.find('*/', i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r'[^\n]', ' ', text[i:j]))
            i = j
            continue
        if text.startswith('//', i):
            j = text.find('\n', i)
            j = n if j < 0 else j
            out.append(' ' * (j - i))
            i = j
            continue
        if c in '"\'':
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == '\\' else 1
            j = min(j + 1, n)
            out.append(re.sub(r'[^\n]', ' ', text[i:j]))
            i = j
            continue
        if c == '\n':
            line_start = True
        out.append(c)
        i += 1
    return ''.join(out)


NAME_BEFORE_PAREN = re.compile(r'([A-Za-z_]\w*)\s*$')


def functions(path):
    """(name, first line, last line) of each function defined in `path`:
    a brace at depth 0 whose code before it ends with a parameter list
    (name '(' ... ')', then perhaps attributes) is a function body."""
    with open(path, errors='replace') as f:
        code = blank(f.read())
    out = []
    depth = 0
    i, n = 0, len(code)
    stmt_start = 0  # where the current top-level declaration began
    while i < n:
        c = code[i]
        if c == '{':
            if depth == 0:
                head = code[stmt_start:i]
                fn = function_head(head)
                if fn:
                    name, off = fn
                    end = matching_brace(code, i)
                    first = code.count('\n', 0, stmt_start + off) + 1
                    last = code.count('\n', 0, end) + 1
                    out.append((name, first, last))
                    i = end + 1
                    stmt_start = i
                    continue
            depth += 1
        elif c == '}':
            depth = max(depth - 1, 0)
            if depth == 0:
                stmt_start = i + 1
        elif c == ';' and depth == 0:
            stmt_start = i + 1
        i += 1
    return out


def function_head(head):
    """(name, offset of name in head) when `head` (the code from the end
    of the last top-level declaration up to a '{') is a function's
    declarator, else None (a struct, enum, union or initialiser)."""
    s = head.rstrip()
    # trailing attributes: __attribute__((...)) after the parameter list
    while True:
        m = re.search(r'__attribute__\s*$', s)
        if s.endswith(')'):
            start = open_paren(s, len(s) - 1)
            if start is None:
                return None
            before = s[:start].rstrip()
            if before.endswith('__attribute__') or before.endswith('__attribute__('):
                s = before[:-len('__attribute__')].rstrip()
                continue
            m = NAME_BEFORE_PAREN.search(before)
            if not m or m.group(1) in KEYWORDS:
                return None
            if '=' in before:
                return None  # an initialiser with a call in it
            return m.group(1), m.start(1)
        return None


def open_paren(s, close):
    depth = 0
    for j in range(close, -1, -1):
        if s[j] == ')':
            depth += 1
        elif s[j] == '(':
            depth -= 1
            if depth == 0:
                return j
    return None


def matching_brace(code, open_at):
    depth = 0
    for j in range(open_at, len(code)):
        if code[j] == '{':
            depth += 1
        elif code[j] == '}':
            depth -= 1
            if depth == 0:
                return j
    return len(code) - 1


def sources(top):
    out = []
    for d in DIRS:
        for root, _, files in os.walk(os.path.join(top, d)):
            for f in files:
                if f.endswith(EXTS):
                    out.append(os.path.relpath(os.path.join(root, f), top))
    return sorted(out)


def measure(top):
    rows = []
    for rel in sources(top):
        for name, first, last in functions(os.path.join(top, rel)):
            rows.append((last - first + 1, rel, first, name))
    rows.sort(key=lambda r: (-r[0], r[1], r[2]))
    return rows


def self_test():
    limit = 150
    with tempfile.TemporaryDirectory() as tmp:
        os.makedirs(os.path.join(tmp, 'daemon', 'x'))
        body = ['\tx++;'] * (limit + 1 - 3)
        src = ['#include <stdio.h>', '/* { not a brace } */',
               'static const char *s = "{";',
               'struct t { int a; };',
               'int planted_long(int x)', '{'] + body + ['}']
        src += ['static int planted_ok(int x)', '{'] + \
            ['\tx++;'] * (limit - 3) + ['\treturn x; }']
        src += ['/* a CUDA kernel file is not measured */']
        with open(os.path.join(tmp, 'daemon', 'x', 'planted.c'), 'w') as f:
            f.write('\n'.join(src) + '\n')
        with open(os.path.join(tmp, 'engine.cu'), 'w') as f:
            f.write('void k(void)\n{\n' + '\tx++;\n' * 400 + '}\n')
        rows = measure(tmp)
        got = {name: length for length, _, _, name in rows}
        ok = got.get('planted_long') == limit + 1 and got.get('planted_ok') == limit
        res = subprocess.run([sys.executable, __file__, tmp, '--check', str(limit)],
                             capture_output=True, text=True)
        ok = ok and res.returncode == 1 and 'planted_long' in res.stdout \
            and 'planted_ok' not in res.stdout
        print('self-test:', 'planted function caught' if ok else 'FAILED', got)
        return 0 if ok else 1


def main():
    args = sys.argv[1:]
    if '--self-test' in args:
        return self_test()
    over, check = 100, None
    if '--over' in args:
        i = args.index('--over')
        over = int(args[i + 1])
        del args[i:i + 2]
    if '--check' in args:
        i = args.index('--check')
        check = int(args[i + 1])
        del args[i:i + 2]
    top = args[0]
    rows = measure(top)
    if check is not None:
        bad = [r for r in rows if r[0] > check]
        for length, rel, line, name in bad:
            print(f'{rel}:{line}: {name} is {length} lines (limit {check}): '
                  'split it along its steps (STYLE.md)')
        print(f'{len(rows)} functions measured, {len(bad)} over {check} lines')
        return 1 if bad else 0
    for length, rel, line, name in rows:
        if length > over:
            print(f'{length:5d}  {name:<36} {rel}:{line}')
    print(f'functions: {len(rows)}; over 100 lines: '
          f'{sum(1 for r in rows if r[0] > 100)}; over 150 lines: '
          f'{sum(1 for r in rows if r[0] > 150)}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
