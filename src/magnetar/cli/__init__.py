"""Command-line entry points: ``magnetar standalone | produce | consume | perf``."""
