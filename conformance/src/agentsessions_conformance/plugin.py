"""pytest plugin entry point (placeholder)."""
