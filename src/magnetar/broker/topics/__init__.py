"""Topics: persistent and non-persistent topics, topic names, producers and the publish
path, message deduplication, per-topic schema checks, compaction and topic stats."""
