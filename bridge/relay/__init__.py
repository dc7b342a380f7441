"""The end-to-end encrypted relay over NATS (docs/protocol.md, "Relay"; docs/remote-access.md).

The daemon dials out to a NATS server; a paired client reaches it there, and every frame between
them is sealed so the relay operator sees only ciphertext, sizes and timing.
"""
