import sys

from .cli import standalone

sys.exit(standalone())
