#!/usr/bin/env python3
"""The lint's own tests (TAP), run by tests/run.

- tests/lint/cases/bad_*: every line after a "# expect: RULE..." comment is
  reported with those rules, and no other line is;
- tests/lint/cases/good_*: nothing is reported, and under bats every test
  passes (they are real shell, not something only the lint reads);
- batslint.py's exit status and file:line output;
- tests/lint/premise.bats under the bats installed here: the forms the lint
  reports pass although their check is false, the forms it accepts fail.
"""
import glob
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import batslint  # noqa: E402

EXPECT = re.compile(r"^\s*# expect: (.+)$")
n = 0
failed = 0


def result(ok, what, diag=()):
    global n, failed
    n += 1
    print("%s %d - %s" % ("ok" if ok else "not ok", n, what))
    if not ok:
        failed += 1
        for d in diag:
            print("#   %s" % d)


def expected(path):
    want = set()
    with open(path) as f:
        for i, line in enumerate(f, 1):
            m = EXPECT.match(line)
            if m:
                for rule in m.group(1).split():
                    want.add((i + 1, rule))
    return want


def case(path):
    name = os.path.relpath(path, HERE)
    want = expected(path)
    got = {(line, rule) for line, rule, _ in
           batslint.Linter(path).lint(open(path).read())}
    bad = os.path.basename(path).startswith("bad_")
    diag = ["expected, not reported: line %d %s" % x
            for x in sorted(want - got)]
    diag += ["reported, not expected: line %d %s" % x
             for x in sorted(got - want)]
    if bad:
        result(bool(want) and got == want,
               "%s: its %d planted lines reported, at their lines, and no "
               "other" % (name, len(want)),
               diag or (["no '# expect:' line"] if not want else []))
    else:
        result(not want and not got, "%s: nothing reported" % name, diag)


def cli():
    tool = os.path.join(HERE, "batslint.py")
    bad = os.path.join(HERE, "cases", "bad_negation.bats")
    good = os.path.join(HERE, "cases", "good_checks.bats")
    p = subprocess.run([sys.executable, tool, bad, good],
                       capture_output=True, text=True)
    lines = p.stdout.splitlines()
    first = min(line for line, _ in expected(bad))
    result(p.returncode == 1 and lines and
           lines[0].startswith("%s:%d: negation: " % (bad, first)) and
           all(x.startswith(bad + ":") for x in lines),
           "batslint.py exits 1 and names FILE:LINE: RULE for each finding",
           ["exit %d" % p.returncode] + lines[:3])
    p = subprocess.run([sys.executable, tool, good],
                       capture_output=True, text=True)
    result(p.returncode == 0 and not p.stdout,
           "batslint.py exits 0 silently on a clean file",
           ["exit %d" % p.returncode] + p.stdout.splitlines()[:3])
    p = subprocess.run([sys.executable, tool, os.path.join(HERE, "nowhere")],
                       capture_output=True, text=True)
    result(p.returncode == 1, "batslint.py fails on a file it cannot read",
           ["exit %d" % p.returncode])


def bats_tap(files):
    p = subprocess.run(["bats", "--tap"] + files, capture_output=True,
                       text=True, env=dict(os.environ, TFS_LONG="0"))
    return p, re.findall(r"^(ok|not ok) \d+ (.*?)(?: # skip.*)?$", p.stdout,
                         re.M)


def premise():
    p, rows = bats_tap([os.path.join(HERE, "premise.bats")])
    wrong = ["%s: %s" % (st, name) for st, name in rows
             if (st == "ok") != name.startswith("dead:")]
    result(len(rows) >= 10 and not wrong,
           "premise.bats: the forms reported pass with a false check, the "
           "forms accepted fail (%d tests)" % len(rows),
           wrong or p.stdout.splitlines()[-5:] + p.stderr.splitlines()[-5:])


def good_under_bats():
    files = sorted(glob.glob(os.path.join(HERE, "cases", "good_*.bats")))
    p, rows = bats_tap(files)
    planned = re.search(r"^1\.\.(\d+)$", p.stdout, re.M)
    notok = [name for st, name in rows if st != "ok"]
    result(planned and int(planned.group(1)) == len(rows) and rows and
           not notok and p.returncode == 0,
           "the good cases are real tests: all %d pass under bats" % len(rows),
           notok or p.stdout.splitlines()[-5:] + p.stderr.splitlines()[-5:])


def main():
    for path in sorted(glob.glob(os.path.join(HERE, "cases", "*"))):
        case(path)
    cli()
    premise()
    good_under_bats()
    print("1..%d" % n)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
