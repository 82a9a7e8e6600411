"""``python -m agentsessions_cli``: the ``agentsessions`` command (the demo runs its turns so)."""

import sys

from ._main import main

sys.exit(main())
