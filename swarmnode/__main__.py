"""`python -m swarmnode` runs the CLI; a SIGTERM exits 0 from the first line on (`cli_runtime`)."""

from swarmnode.cli_runtime import exit_zero_on_sigterm

exit_zero_on_sigterm()  # before the CLI's imports (hivemind, torch: seconds under load)

from swarmnode.cli import main  # noqa: E402

main()
