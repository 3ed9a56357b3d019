"""`python -m dojo.notebook`: dojo.notebook.commands.main (`--render-solutions DIR`)."""

import sys

from dojo.notebook.commands import main

sys.exit(main())
