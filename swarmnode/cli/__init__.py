"""The `swarmnode` command line: one thin function per command (parse, build config, call into the package).

Every error of the package derives from `SwarmnodeError` and is caught once, in `main`: one line on stderr
(`error: ...`) and the error's exit code (`swarmnode.errors.ExitCode`), never a traceback for a user mistake;
`--debug` or `SWARMNODE_DEBUG=1` shows it. Ctrl-C ends a command with exit code 130.

The command modules that start a node (join, idle, bootstrap, status, dashboard, local.trainer, and identity and
preflight, which they share) import hivemind and torch: seconds before anything prints. Each command imports
them itself, after its arguments and config are checked, so `--help`, `hardware`, a bad `--config` or `--set`
and a malformed `--initial-peers` answer at once.

The module map:
- `typer_app`        the typer app, `--debug` and `--version`, the commands in their order, `main` (the entry point)
- `node_commands`    `join`, `identity`, `bootstrap`, `host`: a node in a swarm
- `watch_commands`   `status` (and `status --self`), `dashboard` (and `dashboard --web`)
- `local_commands`   `hardware`, `demo`, `train-local`: this machine alone
- `model_commands`   `export`, `eval`: a trained model
- `settings`         from `--config`, `--set`, the flags and an invite to a node's config; `fail`
- `options`          the options several commands share
- `running`          a command's output, running a swarm coroutine or a node until it stops, an error as one line
"""

from swarmnode.cli.typer_app import app, main

__all__ = ["app", "main"]
