#!/usr/bin/env python3
"""Report bats checks that can never fail their test.

Usage: batslint.py [--tap] FILE...
Prints FILE:LINE: RULE: what for each finding (with --tap, a TAP line per
file too); exits 1 when there is any.

bats runs a test as a bash function under `set -e`, and bash's errexit
ignores a command negated with `!` and every command of an `&&`/`||` list
but the last; only the last command of the function sets its status.  So,
in every @test body and every function of a .bats or .bash file:

negation   A pipeline negated with `!` counts only as the body's last
           statement (or the last of a branch of an if, case, { } or ( )
           that is the body's last) or when `||` follows it
           (`! cmd || false`).  Anywhere else, a loop's body included,
           write `run ! cmd` (bats >= 1.5) or `! cmd || false`.
           Conditions (`if ! cmd`, `while ! cmd`) are not checks and
           are left alone.

and-chain  A test command (`[`, `[[`, `test`) on the left of `&&` decides
           nothing outside the body's last statement (as above): when false
           the list is false, which errexit ignores.  Write one check per
           line, or say "if a then b" with an `if`.  Allowed: the list
           goes on to `||` (`[ a ] && [ b ] || fail`, a guard whose right
           side runs when any part is false), or it ends in a jump
           (`[ a ] && break`, `continue`, `return`, `exit`).

skip       A test of a tierfs feature must fail when the feature breaks,
           never skip.  `skip` is allowed only
             - as `command -v TOOL >/dev/null || skip "..."`, TOOL not one
               of tierfs's own programs (a missing tool),
             - as `[ "${TFS_LONG:-0}" = 1 ] || skip "..."` (opt-in tests),
             - inside a function whose name starts with `require_`: a
               prerequisite probe whose name says what it needs (a memory
               cgroup, a CUDA build, a bind mount root may make read-only);
               reviewers read those functions, not every test,
           and always with a reason string.

mountpoint `! mountpoint -q DIR` (or `run ! mountpoint`) as a check that no
           mount is left cannot fail on a mount whose daemon died:
           mountpoint(1) stats DIR, gets ENOTCONN and says "not a mount
           point". Write `! tfs_mounted DIR` (helpers.bash), which reads
           /proc/self/mountinfo. Conditions are left alone.

parse      The file could not be parsed: the lint does not guess.

The parser knows enough bash for tests: quotes, $( ), ${ }, $(( )),
backquotes, `\\` continuations, pipelines and lists split over lines,
heredocs (<<, <<-, quoted delimiters), here-strings, [[ ]], (( )), arrays,
if/elif/else, for, while/until, case, { }, ( ), function definitions
(also nested in a test) and bats' `@test "name" {`.  Text inside quotes,
command substitutions and heredocs is not analysed.
"""
import re
import sys

RESERVED_STOP = {"then", "do", "done", "fi", "elif", "else", "esac", "}"}
FLOW = {"break", "continue", "return", "exit"}
TESTS = {"[", "[[", "test"}
OWN_PROGRAMS = {"tierfs", "tierfsctl", "mount.tierfs"}
OPS = ["&&", "||", ";;&", ";;", ";&", "|&", "&>>", "&>", "<<<", "<<-", "<<",
       "<>", "<&", ">&", ">>", ">|", "|", "&", ";", "(", ")", "<", ">"]
REDIRS = {"&>>", "&>", "<<<", "<<-", "<<", "<>", "<&", ">&", ">>", ">|",
          "<", ">"}
ASSIGN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\[[^]]*\])?\+?=")


class ParseError(Exception):
    def __init__(self, line, what):
        super().__init__(what)
        self.line = line
        self.what = what


class Tok:
    __slots__ = ("kind", "text", "line", "glued")

    def __init__(self, kind, text, line, glued=False):
        self.kind = kind  # "w" word, "op", "nl", "eof"
        self.text = text
        self.line = line
        self.glued = glued  # no blank between it and the token before

    def __repr__(self):
        return "%s:%r@%d" % (self.kind, self.text, self.line)


class Lexer:
    def __init__(self, text):
        self.s = text
        self.i = 0
        self.line = 1
        self.toks = []
        self.heredocs = []  # (delimiter, strip_tabs) waiting for a newline

    def err(self, what):
        raise ParseError(self.line, what)

    def peekc(self, k=0):
        j = self.i + k
        return self.s[j] if j < len(self.s) else ""

    def adv(self, n=1):
        for _ in range(n):
            if self.i < len(self.s) and self.s[self.i] == "\n":
                self.line += 1
            self.i += 1

    def run(self):
        glued = False
        while self.i < len(self.s):
            c = self.peekc()
            if c in " \t":
                self.adv()
                glued = False
                continue
            if c == "\\" and self.peekc(1) == "\n":
                self.adv(2)
                glued = False
                continue
            if c == "\n":
                self.toks.append(Tok("nl", "\n", self.line))
                self.adv()
                self.read_heredocs()
                glued = False
                continue
            if c == "#" and not glued:
                while self.i < len(self.s) and self.peekc() != "\n":
                    self.adv()
                continue
            if c == "(" and self.peekc(1) == "(":
                line = self.line
                self.toks.append(Tok("w", self.arith(), line, glued))
                glued = True
                continue
            if c in "<>" and self.peekc(1) == "(":
                line = self.line
                self.toks.append(Tok("w", self.word(), line, glued))
                glued = True
                continue
            op = self.match_op()
            if op:
                self.toks.append(Tok("op", op, self.line, glued))
                self.adv(len(op))
                if op in ("<<", "<<-"):
                    self.heredoc_start(op == "<<-")
                glued = True
                continue
            line = self.line
            self.toks.append(Tok("w", self.word(), line, glued))
            glued = True
        self.toks.append(Tok("nl", "\n", self.line))
        self.toks.append(Tok("eof", "", self.line))
        if self.heredocs:
            delim, _, line = self.heredocs[0]
            raise ParseError(line, "heredoc '%s' never ends" % delim)
        return self.toks

    def match_op(self):
        for op in OPS:
            if self.s.startswith(op, self.i):
                return op
        return None

    def heredoc_start(self, strip):
        while self.peekc() in " \t":
            self.adv()
        line = self.line
        w = self.word()
        self.toks.append(Tok("w", w, line, False))
        delim = re.sub(r"[\"'\\]", "", w)
        if not delim:
            self.err("heredoc without a delimiter")
        self.heredocs.append((delim, strip, line))

    def read_heredocs(self):
        for delim, strip, line in self.heredocs:
            while True:
                if self.i >= len(self.s):
                    raise ParseError(line, "heredoc '%s' never ends" % delim)
                end = self.s.find("\n", self.i)
                if end < 0:
                    end = len(self.s)
                body = self.s[self.i:end]
                self.adv(end - self.i + 1)
                if (body.lstrip("\t") if strip else body) == delim:
                    break
        self.heredocs = []

    def word(self):
        start = self.i
        while self.i < len(self.s):
            c = self.peekc()
            if c in " \t\n;&|()<>":
                if c in "<>" and self.peekc(1) == "(":
                    self.adv()
                    self.balanced("(", ")")
                    continue
                if c == "(" and ASSIGN.match(self.s[start:self.i] + "x"):
                    # name=( array ): the list belongs to the word
                    self.balanced("(", ")")
                    continue
                break
            if c == "\\":
                self.adv(2)
            elif c == "'":
                self.squote()
            elif c == '"':
                self.dquote()
            elif c == "`":
                self.backquote()
            elif c == "$":
                self.dollar()
            else:
                self.adv()
        if self.i == start:
            self.err("unexpected '%s'" % self.peekc())
        return self.s[start:self.i]

    def squote(self):
        line = self.line
        self.adv()
        j = self.s.find("'", self.i)
        if j < 0:
            raise ParseError(line, "quote never closes")
        self.adv(j - self.i + 1)

    def dquote(self):
        line = self.line
        self.adv()
        while self.i < len(self.s):
            c = self.peekc()
            if c == "\\":
                self.adv(2)
            elif c == '"':
                self.adv()
                return
            elif c == "$":
                self.dollar()
            elif c == "`":
                self.backquote()
            else:
                self.adv()
        raise ParseError(line, "double quote never closes")

    def backquote(self):
        line = self.line
        self.adv()
        while self.i < len(self.s):
            c = self.peekc()
            if c == "\\":
                self.adv(2)
            elif c == "`":
                self.adv()
                return
            else:
                self.adv()
        raise ParseError(line, "backquote never closes")

    def dollar(self):
        n = self.peekc(1)
        if n == "(":
            self.adv()
            if self.peekc(1) == "(":
                self.arith()
            else:
                self.balanced("(", ")")
        elif n == "{":
            self.adv()
            self.balanced("{", "}")
        elif n == "'":
            line = self.line
            self.adv(2)
            while self.i < len(self.s) and self.peekc() != "'":
                self.adv(2 if self.peekc() == "\\" else 1)
            if self.i >= len(self.s):
                raise ParseError(line, "$' quote never closes")
            self.adv()
        else:
            self.adv()

    def arith(self):
        start = self.i
        self.balanced("(", ")")
        return self.s[start:self.i]

    def balanced(self, open_, close):
        """Skip from an opening bracket to its partner, through quotes and
        comments; a `case` pattern's lone `)` inside $( ) is not handled."""
        line = self.line
        depth = 0
        while self.i < len(self.s):
            c = self.peekc()
            if c == "\\":
                self.adv(2)
                continue
            if c == "'" and open_ != "{":
                self.squote()
                continue
            if c == '"':
                self.dquote()
                continue
            if c == "`":
                self.backquote()
                continue
            if c == "$" and self.peekc(1) in "({'":
                self.dollar()
                continue
            if c == "#" and open_ == "(" and self.s[self.i - 1] in " \t\n":
                while self.i < len(self.s) and self.peekc() != "\n":
                    self.adv()
                continue
            if c == open_:
                depth += 1
            elif c == close:
                depth -= 1
                if depth == 0:
                    self.adv()
                    return
            self.adv()
        raise ParseError(line, "'%s' never closes" % open_)


# The tree: a body is a list of Stmt.
class Simple:
    def __init__(self, words, line):
        self.words = words  # the command's words, redirections left out
        self.line = line

    def name(self):
        for w in self.words:
            if not ASSIGN.match(w):
                return w
        return ""


class Compound:
    def __init__(self, kind, line):
        self.kind = kind
        self.line = line
        self.conds = []  # lists of Stmt in condition position
        self.bodies = []  # lists of Stmt


class Func:
    def __init__(self, name, line, is_test):
        self.name = name
        self.line = line
        self.is_test = is_test
        self.body = []


class Pipeline:
    def __init__(self, negated, line):
        self.negated = negated
        self.line = line
        self.cmds = []


class Stmt:
    def __init__(self, line):
        self.line = line
        self.pipes = []
        self.ops = []  # ops[i] joins pipes[i] and pipes[i + 1]


class Parser:
    def __init__(self, toks):
        self.t = toks
        self.k = 0
        self.open = []  # (word, line) of the constructs being read

    def unclosed(self, tok):
        """An error inside a construct is the construct's: an if without
        fi is reported where the if is, not where the file ends."""
        what = "end of file" if tok.kind == "eof" else "'%s'" % tok.text
        if self.open:
            word, line = self.open[-1]
            raise ParseError(line, "'%s' does not end before %s (line %d)" %
                             (word, what, tok.line))
        raise ParseError(tok.line, "unexpected %s" % what)

    def peek(self, n=0):
        return self.t[min(self.k + n, len(self.t) - 1)]

    def next(self):
        tok = self.t[self.k]
        self.k += 1
        return tok

    def err(self, what, tok=None):
        tok = tok or self.peek()
        raise ParseError(tok.line, what)

    def is_word(self, text, n=0):
        tok = self.peek(n)
        return tok.kind == "w" and tok.text == text

    def is_op(self, text, n=0):
        tok = self.peek(n)
        return tok.kind == "op" and tok.text == text

    def skip_nl(self):
        while self.peek().kind == "nl":
            self.next()

    def expect_word(self, text):
        self.skip_nl()
        if not self.is_word(text):
            self.unclosed(self.peek())
        self.next()

    def program(self):
        body = self.stmt_list(set(), set())
        if self.peek().kind != "eof":
            self.err("unexpected '%s'" % self.peek().text)
        return body

    def stmt_list(self, stop_words, stop_ops):
        out = []
        while True:
            while self.peek().kind == "nl" or self.is_op(";"):
                self.next()
            tok = self.peek()
            if tok.kind == "eof":
                if self.open:
                    self.unclosed(tok)
                return out
            if tok.kind == "w" and tok.text in stop_words:
                return out
            if tok.kind == "op" and tok.text in stop_ops:
                return out
            if tok.kind == "w" and tok.text in RESERVED_STOP:
                self.unclosed(tok)
            out.append(self.and_or())
            tok = self.peek()
            if tok.kind == "nl" or (tok.kind == "op" and tok.text in (";", "&")):
                self.next()
            elif not ((tok.kind == "op" and tok.text in stop_ops) or
                      (tok.kind == "w" and tok.text in stop_words) or
                      tok.kind == "eof"):
                self.err("unexpected '%s'" % tok.text)

    def and_or(self):
        st = Stmt(self.peek().line)
        st.pipes.append(self.pipeline())
        while self.peek().kind == "op" and self.peek().text in ("&&", "||"):
            st.ops.append(self.next().text)
            self.skip_nl()
            st.pipes.append(self.pipeline())
        return st

    def pipeline(self):
        tok = self.peek()
        p = Pipeline(False, tok.line)
        if self.is_word("time"):
            self.next()
        if self.is_word("!"):
            self.next()
            p.negated = True
        p.cmds.append(self.command())
        while self.peek().kind == "op" and self.peek().text in ("|", "|&"):
            self.next()
            self.skip_nl()
            p.cmds.append(self.command())
        return p

    def redirections(self):
        while True:
            tok = self.peek()
            if tok.kind == "op" and tok.text in REDIRS:
                self.next()
                if self.peek().kind != "w":
                    self.err("redirection without a target")
                self.next()
            elif (tok.kind == "w" and tok.text.isdigit() and
                  self.peek(1).kind == "op" and self.peek(1).text in REDIRS and
                  self.peek(1).glued):
                self.next()
            else:
                return

    def command(self):
        tok = self.peek()
        opener = tok.text if tok.kind == "w" else "("
        self.open.append((opener, tok.line))
        c = self.command_in()
        self.open.pop()
        return c

    def command_in(self):
        tok = self.peek()
        if tok.kind == "op" and tok.text == "(":
            c = Compound("subshell", tok.line)
            self.next()
            c.bodies.append(self.stmt_list(set(), {")"}))
            if not self.is_op(")"):
                self.err("'(' never closes", tok)
            self.next()
            self.redirections()
            return c
        if tok.kind != "w":
            self.err("expected a command, found '%s'" % tok.text.strip())
        w = tok.text
        if w == "if":
            return self.if_()
        if w in ("while", "until"):
            c = Compound(w, tok.line)
            self.next()
            c.conds.append(self.stmt_list({"do"}, set()))
            self.expect_word("do")
            c.bodies.append(self.stmt_list({"done"}, set()))
            self.expect_word("done")
            self.redirections()
            return c
        if w in ("for", "select"):
            c = Compound(w, tok.line)
            self.next()
            while not (self.peek().kind in ("nl", "eof") or self.is_op(";") or
                       self.is_word("do")):
                self.next()
            self.skip_nl()
            if self.is_op(";"):
                self.next()
            self.expect_word("do")
            c.bodies.append(self.stmt_list({"done"}, set()))
            self.expect_word("done")
            self.redirections()
            return c
        if w == "case":
            return self.case()
        if w == "{":
            c = Compound("group", tok.line)
            self.next()
            c.bodies.append(self.stmt_list({"}"}, set()))
            self.expect_word("}")
            self.redirections()
            return c
        if w == "function":
            self.next()
            name = self.next()
            if self.is_op("(") and self.is_op(")", 1):
                self.next()
                self.next()
            return self.func_body(name.text, tok.line, False)
        if w == "@test":
            self.next()
            name = self.next()
            if name.kind != "w":
                self.err("@test without a name", tok)
            return self.func_body(name.text, tok.line, True)
        if self.is_op("(", 1) and self.is_op(")", 2) and ASSIGN.match(w + "=") \
                and not ASSIGN.match(w):
            self.next()
            self.next()
            self.next()
            return self.func_body(w, tok.line, False)
        return self.simple()

    def func_body(self, name, line, is_test):
        f = Func(name, line, is_test)
        self.skip_nl()
        if not self.is_word("{"):
            self.err("a function body that is not { }")
        self.next()
        f.body = self.stmt_list({"}"}, set())
        self.expect_word("}")
        self.redirections()
        return f

    def if_(self):
        c = Compound("if", self.next().line)
        c.conds.append(self.stmt_list({"then"}, set()))
        self.expect_word("then")
        c.bodies.append(self.stmt_list({"elif", "else", "fi"}, set()))
        while True:
            self.skip_nl()
            if self.is_word("elif"):
                self.next()
                c.conds.append(self.stmt_list({"then"}, set()))
                self.expect_word("then")
                c.bodies.append(self.stmt_list({"elif", "else", "fi"}, set()))
            elif self.is_word("else"):
                self.next()
                c.bodies.append(self.stmt_list({"fi"}, set()))
            else:
                break
        self.expect_word("fi")
        self.redirections()
        return c

    def case(self):
        c = Compound("case", self.next().line)
        self.next()  # the word
        self.expect_word("in")
        while True:
            self.skip_nl()
            if self.is_word("esac"):
                self.next()
                break
            if self.peek().kind == "eof":
                self.err("case never ends with esac")
            if self.is_op("("):
                self.next()
            while not self.is_op(")"):
                if self.peek().kind in ("nl", "eof"):
                    self.err("case pattern without ')'")
                self.next()
            self.next()
            c.bodies.append(self.stmt_list({"esac"}, {";;", ";&", ";;&"}))
            if self.peek().kind == "op" and self.peek().text in (";;", ";&",
                                                                 ";;&"):
                self.next()
        self.redirections()
        return c

    def simple(self):
        line = self.peek().line
        words = []
        dbl = False
        while True:
            self.redirections()
            tok = self.peek()
            if dbl:
                if tok.kind in ("eof",):
                    self.err("[[ never closes")
                self.next()
                if tok.kind == "w" and tok.text == "]]":
                    dbl = False
                    words.append(tok.text)
                elif tok.kind == "w":
                    words.append(tok.text)
                continue
            if tok.kind != "w":
                break
            self.next()
            words.append(tok.text)
            if len(words) == 1 and tok.text == "[[":
                dbl = True
        if not words:
            self.err("expected a command, found '%s'" % self.peek().text.strip())
        return Simple(words, line)


def walk_funcs(stmts):
    """Every function and test in a body, nested ones too."""
    for st in stmts:
        for p in st.pipes:
            for c in p.cmds:
                yield from walk_cmd_funcs(c)


def walk_cmd_funcs(c):
    if isinstance(c, Func):
        yield c
        yield from walk_funcs(c.body)
    elif isinstance(c, Compound):
        for b in c.conds + c.bodies:
            yield from walk_funcs(b)


def is_test_cmd(p):
    return (not p.negated and len(p.cmds) == 1 and
            isinstance(p.cmds[0], Simple) and p.cmds[0].name() in TESTS)


def simple_name(p):
    if len(p.cmds) == 1 and isinstance(p.cmds[0], Simple):
        return p.cmds[0].name()
    return None


def negated_mountpoint(p):
    """`! mountpoint ...` or `run ! mountpoint ...`."""
    if len(p.cmds) != 1 or not isinstance(p.cmds[0], Simple):
        return False
    w = p.cmds[0].words
    if p.negated:
        return p.cmds[0].name() == "mountpoint"
    return len(w) >= 3 and w[0] == "run" and w[1] == "!" and \
        w[2] == "mountpoint"


def unquote(w):
    return re.sub(r"[\"']", "", w)


def prerequisite_probe(p):
    """The left side of `|| skip` that may skip a test: a missing tool or
    the opt-in switch for long tests."""
    if p.negated or len(p.cmds) != 1 or not isinstance(p.cmds[0], Simple):
        return False
    w = [unquote(x) for x in p.cmds[0].words]
    if len(w) == 3 and w[:2] == ["command", "-v"]:
        return w[2] not in OWN_PROGRAMS and not w[2].startswith("$")
    return w == ["[", "${TFS_LONG:-0}", "=", "1", "]"]


class Linter:
    def __init__(self, path):
        self.path = path
        self.found = []

    def report(self, line, rule, what):
        self.found.append((line, rule, what))

    def lint(self, text):
        try:
            tree = Parser(Lexer(text).run()).program()
        except ParseError as e:
            self.report(e.line, "parse", e.what)
            return self.found
        for f in walk_funcs(tree):
            self.body(f, f.body, top=True, cond=False)
        self.found.sort()
        return self.found

    def body(self, f, stmts, top, cond):
        for n, st in enumerate(stmts):
            last = top and n == len(stmts) - 1
            self.stmt(f, st, last, cond)

    def stmt(self, f, st, last, cond):
        pipes, ops = st.pipes, st.ops
        if not last and not cond:
            for i, p in enumerate(pipes):
                if p.negated and not (i < len(ops) and ops[i] == "||"):
                    self.report(p.line, "negation",
                                "'! cmd' here can never fail the test: "
                                "write 'run ! cmd' or '! cmd || false'")
            jump = all(o == "&&" for o in ops) and simple_name(pipes[-1]) in FLOW
            if not jump:
                for i, o in enumerate(ops):
                    if o == "&&" and is_test_cmd(pipes[i]) and \
                            "||" not in ops[i + 1:]:
                        self.report(pipes[i].line, "and-chain",
                                    "a false test left of '&&' can never fail "
                                    "the test: one check per line, or an if")
                        break
        for i, p in enumerate(pipes):
            if not cond and negated_mountpoint(p):
                self.report(p.line, "mountpoint",
                            "'! mountpoint' passes on a dead mount "
                            "(ENOTCONN): write '! tfs_mounted DIR'")
            for c in p.cmds:
                if isinstance(c, Simple) and c.name() == "skip":
                    self.skip(f, c, pipes, ops, i)
                elif isinstance(c, Compound):
                    # The last statement of a branch or a group sets the
                    # status of an if, case, { } or ( ) that itself sets
                    # the body's: last in its pipeline, not negated, with
                    # no || after it; a loop's last pass is not its only one.
                    tail = (last and c is p.cmds[-1] and not p.negated and
                            "||" not in ops[i:] and
                            c.kind in ("if", "case", "group", "subshell"))
                    for b in c.conds:
                        self.body(f, b, top=False, cond=True)
                    for b in c.bodies:
                        self.body(f, b, top=tail, cond=cond)

    def skip(self, f, c, pipes, ops, i):
        args = c.words[c.words.index("skip") + 1:]
        if not args or not unquote(args[0]).strip():
            self.report(c.line, "skip", "a skip must say why")
            return
        if f.name.startswith("require_") and not f.is_test:
            return
        if (i == 1 and len(pipes) == 2 and ops == ["||"] and
                prerequisite_probe(pipes[0])):
            return
        self.report(c.line, "skip",
                    "a test of tierfs must fail, not skip: skip only for a "
                    "missing tool (command -v X || skip), TFS_LONG, or in a "
                    "require_* prerequisite function")


def main(argv):
    """batslint.py [--tap] FILE...: with --tap, a TAP line per file after
    its findings."""
    tap = argv[:1] == ["--tap"]
    if tap:
        argv = argv[1:]
    bad = 0
    for n, path in enumerate(argv, 1):
        try:
            text = open(path, encoding="utf-8", errors="replace").read()
            found = Linter(path).lint(text)
        except OSError as e:
            found = [(0, "read", e.strerror)]
        for line, rule, what in found:
            print("%s:%d: %s: %s" % (path, line, rule, what))
        if tap:
            print("%s %d - %s" % ("not ok" if found else "ok", n, path))
        bad += len(found)
    if tap:
        print("1..%d" % len(argv))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
