"""`python -m audit.release`: audit a data release the user already made, with one of our pipelines
or a generator of their own (`audit.cli.release_command`)."""

import sys

from audit.cli.release_command import main

if __name__ == "__main__":
    sys.exit(main())
