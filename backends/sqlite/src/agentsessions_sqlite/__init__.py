"""agentsessions backend (work in progress)."""
