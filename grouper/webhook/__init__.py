"""The mutating admission webhook: pods are put in their group at creation (see :mod:`.admission`)."""
