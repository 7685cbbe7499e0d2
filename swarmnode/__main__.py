"""`python -m swarmnode` runs the CLI."""

from swarmnode.cli import main

main()
