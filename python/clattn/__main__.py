"""`python -m clattn COMMAND ...`: the clattn program that the wheel carries (clattn/bin/clattn,
which runs on the package's own library), so that a pip user has its tools without building
anything:

    python -m clattn devices               # every OpenCL device, and what the driver search found
    python -m clattn check --quick         # conformance of every variant against the reference
    python -m clattn bench --nq 1024,4096  # timings (docs/cli.md)

Every command and option is the program's; this module only replaces the Python process with it.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import List, Optional

PROGRAM = Path(__file__).resolve().parent / "bin" / "clattn"


def main(arguments: Optional[List[str]] = None) -> int:
    """Runs the packaged program with `arguments` (default: the command line's) in place of
    this process; returns 2, with a message, where the package has no program."""
    if not os.access(PROGRAM, os.X_OK):
        print(
            f"python -m clattn: this installation has no clattn program ({PROGRAM} is missing): "
            "install the wheel, or run a build's own (build/clattn)",
            file=sys.stderr,
        )
        return 2
    sys.stdout.flush()
    os.execv(PROGRAM, ["clattn", *(sys.argv[1:] if arguments is None else arguments)])
    return 0  # not reached: execv returns only by raising OSError


if __name__ == "__main__":
    sys.exit(main())
