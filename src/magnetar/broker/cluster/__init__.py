"""The cluster room of the broker: namespace bundles, their ownership through the metadata
store, the broker registry and the load manager (Pulsar's model; see docs/cluster.md)."""
