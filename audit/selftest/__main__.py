"""`python -m audit.selftest`: the one-run ε bound on mechanisms of known ε (`audit.selftest.designs`).

Ends with the verdict line; exit status 0 when the self-test passes, 1 when a judged row fails, 2 on a bad flag."""

import sys

from audit.selftest.command import main

if __name__ == "__main__":
    sys.exit(main())
