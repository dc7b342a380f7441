"""Attention: tell the person when an agent needs them (docs/notifications.md).

``presence`` keeps what clients report (``client.presence``); ``detect`` turns the hub's
committed events into notices (a permission waits, a long turn ended, a turn failed, a terminal
took or gave back a session); ``notifier`` decides by presence, rate-limits and folds, and hands
each notice to the channels (``channels``: Apprise URLs) and to Web Push (``webpush``), whose
deliveries run on threads, off the event loop.
"""
