"""`python -m config validate|generate|schema …`: the config commands without the console script."""

import sys

from config.cli import main

sys.exit(main())
