"""The one error an export ends with: a one-line message and the exit code it ends the CLI with."""

from __future__ import annotations

from swarmnode.errors import ExitCode, SwarmnodeError


class ExportError(SwarmnodeError):
    """An export or an evaluation that cannot be done; the message says why and what to do. The default code is
    MISSING (3): the version, the directory or the model asked for is not there."""

    exit_code = ExitCode.MISSING
