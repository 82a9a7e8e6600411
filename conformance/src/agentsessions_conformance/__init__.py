"""The agentsessions conformance kit (work in progress)."""
