"""A click group whose commands are imported when they are used.

Every ``es-sched`` call is a new process; importing every command's module for one of them
(the audit, projection, search, PostgreSQL and API clients, rich tables) cost about 1.5 s of
CPU a call, most of a short command's run and of a worker process's start. A ``LazyGroup``
names each command's module (``module:attribute``) and imports only the one that runs;
``--help`` imports them all to show their help. ADR 21 did the same for ``run`` alone.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

import click


class LazyGroup(click.Group):
    def __init__(self, *args: Any, lazy: Mapping[str, str] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lazy = dict(lazy or {})

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.lazy and cmd_name not in self.commands:
            module, attribute = self.lazy[cmd_name].split(":")
            command = getattr(importlib.import_module(module), attribute)
            if not isinstance(command, click.Command):
                raise TypeError(f"{self.lazy[cmd_name]} is not a click command")
            self.add_command(command, cmd_name)
        return super().get_command(ctx, cmd_name)
