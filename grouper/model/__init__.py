"""Data types shared by every layer: PodGroup metadata, object helpers, errors.

This package imports nothing from the rest of ``grouper``; everything else may import it.
"""
