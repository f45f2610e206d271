"""`python -m monitor.cli`: the same as the `drift-monitor` command."""

import sys

from monitor.cli import main

sys.exit(main())
