"""``python -m pinfer ...`` runs the pinfer command line (see pinfer.cli)."""
import sys

from .cli import main

sys.exit(main())
