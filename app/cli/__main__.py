"""``python -m app.cli``: the ``greentwin`` command without the installed entry point (tests spawn it so)."""

from __future__ import annotations

import sys

from app.cli import main

sys.exit(main())
