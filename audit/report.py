"""`python -m audit.report`: report.html and report.json for audited experiments (`audit.cli.report_command`)."""

import sys

from audit.cli.report_command import main

if __name__ == "__main__":
    sys.exit(main())
