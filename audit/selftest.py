"""`python -m audit.selftest`: the one-run ε bound on mechanisms of known ε (`audit.stats.selftest`)."""

import sys

from audit.cli.selftest import main

if __name__ == "__main__":
    sys.exit(main())
