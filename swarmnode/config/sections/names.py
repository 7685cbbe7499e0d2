"""The `names` section: the run's policy for the public names shown beside the nodes' keys."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from swarmnode.config.sections.base import Section


class NamesConfig(Section):
    """The run's policy for public names (`--public-name`): shown by status, the dashboard and the run page, never
    trusted for anything (docs/run-page.md)."""

    allowed: bool = Field(True, description="whether nodes may show a public name")
    max_length: int = Field(32, ge=1, le=64, description="longest public name, in characters")
    charset: Literal["unicode", "ascii"] = Field(
        "unicode",
        description="unicode: letters and digits of any script; ascii: A-Z a-z 0-9 (both: space and .,_-'!?#+@())",
    )
