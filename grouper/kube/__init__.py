"""Talking to the API server: connection config, an async rate-limited transport, discovery, informers.

Objects stay plain dicts decoded with orjson; nothing here knows about PodGroups or grouping.
"""
