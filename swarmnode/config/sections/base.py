"""`Section`: the base of every config section model (unknown keys refused, assignments validated)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Section(BaseModel):
    """One section of a node's config: an unknown key is an error, and so is a bad value set later."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)
