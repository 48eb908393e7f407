"""Native grouping plugins, one module per workload kind (KAI ``pkg/podgrouper/podgrouper/plugins``).

``registry.native_plugins()`` maps (group, version, kind) to a plugin; ``default`` holds the default
grouper every plugin builds on; ``common`` the shared helpers.

Plugins are pure: they read the pod, its owner chain and ``ctx.lookups``, and return a
``PodGroupMetadata``, None ("leave this pod alone"), or raise a ``GroupingError`` naming the object
and field.

Deliberate choice for reference §8 item 2 (a pod being deleted whose owner is gone): KAI returns
success but still emits a ``PodGrouperWarning`` event. Plugins that read a further object (CronJob's
Job, Knative's Revision, Grove's PodGang, SkipTopOwner's lower owner) return None when that object
is missing *and the pod is being deleted*: nothing to group, nothing to warn about. For a live pod a
missing object stays an ``OwnerNotFound`` error (the core reports it and retries).
"""
