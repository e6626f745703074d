"""`python -m vista_dspy.cli` runs the `vista` command."""

from . import main

main()
