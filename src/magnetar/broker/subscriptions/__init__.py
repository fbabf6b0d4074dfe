"""Subscriptions: a subscription (cursor plus dispatcher), the broker-side consumers, one
dispatcher per subscription type (Exclusive/Failover, Shared, Key_Shared), batch ack sets,
redelivery and delayed delivery."""
