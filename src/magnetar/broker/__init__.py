"""The broker: connections, topics, producers, subscriptions and dispatchers, in rooms.

``BrokerService`` (service.py) builds and owns everything; ``ServerCnx``
(connection/server_cnx.py) serves one TCP connection; ``PersistentTopic`` /
``NonPersistentTopic`` (topics/) hold producers and subscriptions; each ``Subscription``
(subscriptions/) dispatches through a ``Dispatcher`` chosen by subscription type. The rooms,
what each owns and which way they import: docs/architecture.md.
"""
