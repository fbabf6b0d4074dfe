"""Schemas: the registry of versioned schemas per topic and Pulsar's compatibility
strategies (Avro schema-resolution rules)."""
