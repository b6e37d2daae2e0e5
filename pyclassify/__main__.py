"""``python -m pyclassify`` runs the command line."""

from pyclassify.cli import main

main()
