#!/bin/bash
# tests/lint.sh [FILE...]: report the test lines that can never fail.
#
# Reads every .bats and .bash file of the tree, not only under tests/ (FILEs
# instead, if given; .git and tests/lint/, which holds planted examples, are
# left out) with tests/lint/batslint.py, whose header states the rules:
#   negation   '! cmd' that is not a body's last statement, nor '! cmd ||'
#   and-chain  '[ ]', '[[ ]]' or 'test' left of '&&' outside the last
#              statement, unless '||' follows or the chain ends in a jump
#   skip       a skip that is not 'command -v TOOL || skip', a TFS_LONG
#              opt-in, or inside a require_* prerequisite function
#   mountpoint '! mountpoint -q DIR' as "no mount left" (a dead mount says
#              ENOTCONN and passes it): '! tfs_mounted DIR'
#   parse      a file it cannot read as shell
# Each finding is one line FILE:LINE: RULE: what; then a TAP line a file,
# so that tests/run counts them. Exits 1 when anything was found.
# The lint's own tests: tests/lint/test_batslint.py.
set -u
cd "$(dirname "$0")/.." || exit 1
py=/usr/bin/python3
[ -x "$py" ] || py=python3
if [ $# -eq 0 ]; then
	mapfile -t files < <(find . \( -path ./tests/lint -o -name .git \) \
		-prune -o -type f \( -name '*.bats' -o -name '*.bash' \) -print |
		sed 's|^\./||' | sort)
	if [ ${#files[@]} -eq 0 ]; then
		echo "not ok 1 - no .bats or .bash file in the tree"
		exit 1
	fi
	set -- "${files[@]}"
fi
exec "$py" tests/lint/batslint.py --tap "$@"
