"""Gang-scheduling pod grouper: turns workloads into KAI Scheduler PodGroups."""

__version__ = "0.1.0"
