# SPDX-License-Identifier: LGPL-2.1-or-later
"""python3 -m tierfs cleanup ROOT [--max-age SECONDS]"""

import argparse
import sys

from .store import cleanup_stale


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python3 -m tierfs")
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("cleanup", help="remove directories of dead Dask workers")
    c.add_argument("root", help="the directory given to TierfsStore(root=)")
    c.add_argument("--max-age", type=float, default=None,
                   help="also remove unverifiable directories idle this many seconds")
    args = p.parse_args(argv)
    for path in cleanup_stale(args.root, max_age=args.max_age):
        print("removed", path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
