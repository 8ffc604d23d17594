"""`python -m audit.compare`: audited experiments against the naive baseline (`audit.cli.compare_command`)."""

import sys

from audit.cli.compare_command import main

if __name__ == "__main__":
    sys.exit(main())
