#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""tests/lint/store_layers.py [--graph] [ROOT]: the store's files in layers.

Reads tiers/store*.c (comments and strings left out), finds where each
function named st_* that is not static is defined, and draws an edge A -> B
when file A names a function of file B. The files must form layers: no
circle of calls among them (accounting at the bottom, the tier files on it,
eviction above them; see store_i.h). Eviction is reached from below only
through the s->make_room hook, which names no function.

Prints a TAP line per check; with --graph, the edges first, one line a file
("store_dev -> store_acct store_host ..."), which is how the report on
issue 32 shows the graph before and after. Exits 1 on a circle.
"""
import os
import re
import sys

DEF = re.compile(r'^(?!static\b)[A-Za-z_][\w \t*]*?[ *](st_\w+)\(', re.M)
NAME = re.compile(r'\bst_\w+\b')


def strip(text):
    text = re.sub(r'/\*.*?\*/', lambda m: '\n' * m.group(0).count('\n'),
                  text, flags=re.S)
    text = re.sub(r'//[^\n]*', '', text)
    return re.sub(r'"(?:\\.|[^"\\])*"', '""', text)


def graph(root):
    d = os.path.join(root, 'tiers')
    src = {}
    for f in sorted(os.listdir(d)):
        if f.startswith('store') and f.endswith('.c'):
            with open(os.path.join(d, f)) as fh:
                src[f[:-2]] = strip(fh.read())
    where = {}
    for name, text in src.items():
        for m in DEF.finditer(text):
            # A definition: the next thing after its parameters is '{'.
            rest = text[m.end():]
            depth, i = 1, 0
            while depth and i < len(rest):
                depth += {'(': 1, ')': -1}.get(rest[i], 0)
                i += 1
            if rest[i:].lstrip().startswith('{'):
                where[m.group(1)] = name
    edges = {}
    for name, text in src.items():
        edges[name] = sorted({where[n] for n in NAME.findall(text)
                              if n in where and where[n] != name})
    return edges


def circle(edges):
    state, stack = {}, []

    def visit(n):
        state[n] = 1
        stack.append(n)
        for m in edges.get(n, []):
            if state.get(m) == 1:
                return stack[stack.index(m):] + [m]
            if not state.get(m):
                c = visit(m)
                if c:
                    return c
        stack.pop()
        state[n] = 2
        return None

    for n in sorted(edges):
        if not state.get(n):
            c = visit(n)
            if c:
                return c
    return None


def main(argv):
    show = '--graph' in argv
    args = [a for a in argv if a != '--graph']
    root = args[0] if args else os.path.join(os.path.dirname(__file__),
                                             '..', '..')
    edges = graph(root)
    if show:
        for n, out in edges.items():
            print('# %s -> %s' % (n, ' '.join(out)))
    print('1..2')
    if len(edges) < 2 or not any(edges.values()):
        print('not ok 1 - no store files or no calls among them found')
        return 1
    print('ok 1 - %d store files read' % len(edges))
    c = circle(edges)
    if c:
        print('not ok 2 - the store\'s files call each other in a circle: '
              '%s' % ' -> '.join(c))
        return 1
    print('ok 2 - the store\'s files form layers, no circle of calls')
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
