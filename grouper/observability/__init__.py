"""Metrics and logging. Imported by every runtime layer; imports nothing from them."""
