"""One base for every error a user can cause or meet, and the exit code the CLI ends with for it.

Every error class of the package derives from `SwarmnodeError`; the CLI catches it once (`swarmnode.cli.main`)
and prints `error: <message>` on one line, then exits with the error's code. A traceback appears only with
`--debug` or `SWARMNODE_DEBUG=1`. Messages are one line that says what is wrong and what to do.

Exit codes (README: "Errors and exit codes"):

| code | meaning |
|---|---|
| 0 | done (SIGTERM too: a node asked to stop leaves cleanly and exits 0) |
| 1 | a failure that is not a mistake in the input (a demo node died, an internal error) |
| 2 | usage: a bad command line, config key or value, preset name, `--initial-peers` address |
| 3 | missing: a file, package, model or engine the config names is not there or not usable |
| 4 | network: p2pd did not start, no initial peer answered, the swarm did not answer in time |
| 5 | in use: the port or the identity is already used by another process |
| 130 | interrupted by Ctrl-C (SIGINT) |
"""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    """The documented exit codes of the `swarmnode` command."""

    OK = 0
    FAILURE = 1
    USAGE = 2
    MISSING = 3
    NETWORK = 4
    IN_USE = 5
    INTERRUPTED = 130


class SwarmnodeError(Exception):
    """An error with a one-line message fit to print as is, and the exit code it ends the CLI with.

    Subclasses set a default `exit_code`; a raise site may give another (`exit_code=ExitCode.IN_USE`).
    """

    exit_code: ExitCode = ExitCode.FAILURE

    def __init__(self, message: str = "", *, exit_code: ExitCode | None = None):
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code


class UsageError(SwarmnodeError):
    """A bad command line or argument value not covered by the config model."""

    exit_code = ExitCode.USAGE


class MissingError(SwarmnodeError):
    """Something the config names (file, package, model, engine) is not there."""

    exit_code = ExitCode.MISSING


class InUseError(SwarmnodeError):
    """A port or identity is already used by another process."""

    exit_code = ExitCode.IN_USE


class Interrupted(SwarmnodeError):
    """Stopped by Ctrl-C (SIGINT); the CLI prints `interrupted` and exits with 130."""

    exit_code = ExitCode.INTERRUPTED


def missing_package(package: str, needed_for: str, extra: str | None = None) -> MissingError:
    """The error for an optional package that is not installed, with the command that installs it."""
    install = f"pip install {package}" + (f" (or pip install -e '.[{extra}]' in the swarmnode clone)" if extra else "")
    return MissingError(f"{needed_for} needs the `{package}` package, which is not installed: {install}")
