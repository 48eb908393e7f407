"""Platform visibility: the live gang state of every PodGroup, derived from the caches (issue 39)."""
