"""`python -m audit.compare`: audited experiments against the naive baseline (`audit.cli.compare`)."""

import sys

from audit.cli.compare import main

if __name__ == "__main__":
    sys.exit(main())
