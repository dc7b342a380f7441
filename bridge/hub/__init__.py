"""The session hub: one state machine per session, ordered durable events, fan-out.

``Hub`` (``hub.py``) is what the server and the daemon use; the stages below it are
``parking.py``, ``turns.py``, ``fanout.py`` and ``state.py`` (see docs/architecture.md).
"""

from bridge.hub.hub import Hub
from bridge.hub.state import HubError, Session, Subscriber, Subscription, Turn

__all__ = ["Hub", "HubError", "Session", "Subscriber", "Subscription", "Turn"]
