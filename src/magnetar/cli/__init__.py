"""Command-line entry points: ``magnetar standalone | admin | client | perf | tokens``."""
