"""The broker: connections, topics, producers, subscriptions and dispatchers.

``BrokerService`` (service.py) owns everything; ``ServerCnx`` (server_cnx.py) serves one TCP
connection; ``PersistentTopic`` / ``NonPersistentTopic`` hold producers and subscriptions;
each ``Subscription`` dispatches through a ``Dispatcher`` chosen by subscription type.
"""
