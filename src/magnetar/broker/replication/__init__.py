"""Geo-replication (Pulsar's model): for each persistent topic of a namespace whose
``replication_clusters`` names other clusters, one `Replicator` per remote cluster reads the
topic through a durable cursor ``pulsar.repl.{remote}`` and publishes each entry to that
cluster with ``replicated_from`` set (`replicator.py`), over a small producer speaking the
binary protocol (`remote_producer.py`); `manager.py` starts and stops them as topics load
and unload and as policies change."""
