"""`python -m dojo`: the same as the `dojo` command."""

import sys

from dojo.cli import main

sys.exit(main())
