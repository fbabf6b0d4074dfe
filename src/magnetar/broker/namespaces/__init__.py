"""Namespaces and policies: which tenants and namespaces exist, their policies over broker
defaults, and the periodic work policies drive (backlog quotas, message expiry, the idle
topic sweep, housekeeping)."""
