"""The types on the wire: protocol frames, request results, the agent-facing types they carry, and
the JSON schema generated from them.
"""
