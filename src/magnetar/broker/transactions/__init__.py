"""Transaction coordinators (Pulsar's ``TransactionMetadataStoreService``), kept in the
metadata store.

Coordinator N is served by the broker owning partition N of
``persistent://pulsar/system/transaction_coordinator_assign``. Each transaction is one
record in the metadata store (`records.py`), changed by compare-and-set on its version;
`coordinator.py` is one coordinator (new, add partitions and subscriptions, end, timeouts,
recovery from its records); `participants.py` tells the topics and subscriptions of an ending
transaction (``EndTxnOnPartition`` / ``EndTxnOnSubscription``) over broker-to-broker
connections, retried with backoff; `manager.py` builds the coordinators this broker serves
and answers the participants' questions (`TxnChecker`). See docs/transactions.md.
"""
