"""The daemon's client side: endpoint, transports, connections and their outboxes, tokens, auth,
admission, the web client's files, pairing.
"""
