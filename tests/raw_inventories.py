"""What a backend really stored, read past its manager: the kit's `raw_inventory` for the
PostgreSQL kit runs (one server, or a primary and standby through a multi-host URL), the
one agentsessions-postgres registers for the kit's URL mode."""

from __future__ import annotations

from agentsessions_postgres._conformance import postgres_inventory

__all__ = ["postgres_inventory"]
