"""Writing decisions back: PodGroups (create / update only when different), pod patches, warning Events.

Every write passes a leadership gate first, so an instance that lost its lease stops writing at once.
"""
