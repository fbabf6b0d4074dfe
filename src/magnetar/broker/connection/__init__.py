"""The connection: ``ServerCnx`` serves one client TCP connection (decoding, command
handlers, batched writes, backpressure); ``TopicAttacher`` joins its producers and consumers
to topics."""
