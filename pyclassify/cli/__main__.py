"""``python -m pyclassify.cli`` runs the command line, as ``python -m pyclassify`` does."""

from pyclassify.cli import main

main()
