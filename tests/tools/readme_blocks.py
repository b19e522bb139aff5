#!/usr/bin/env python3
"""readme_blocks.py README SECTION...: the command blocks of the README's
sections, in order, as one bash script on stdout.

A block is a run of lines indented by four spaces after a blank line; a
section runs from its heading to the next heading (its subsections are
sections of their own). Lines ending in a backslash continue.
Each command is printed as the user would paste it, preceded by a comment
naming its section, so a failing command can be found in the README.
"""
import re
import sys


def sections(text, names):
    out = []
    lines = text.splitlines()
    for name in names:
        start = None
        for i, line in enumerate(lines):
            m = re.match(r"^(#+) (.*)$", line)
            if not m:
                continue
            if start is None and m.group(2).strip() == name:
                start = i
            elif start is not None:
                out.append((name, lines[start:i]))
                break
        else:
            if start is None:
                sys.exit(f"readme_blocks: no section {name!r}")
            out.append((name, lines[start:]))
    return out


def blocks(lines):
    prev_blank = True
    block = []
    for line in lines + [""]:
        if line.startswith("    ") and (block or prev_blank):
            block.append(line[4:])
        elif block:
            yield block
            block = []
        prev_blank = line.strip() == ""


def main():
    text = open(sys.argv[1]).read()
    for name, lines in sections(text, sys.argv[2:]):
        for b in blocks(lines):
            cmd = []
            for line in b:
                cmd.append(line)
                if line.endswith("\\"):
                    continue
                print(f"# README: {name}")
                print("\n".join(cmd))
                cmd = []


main()
