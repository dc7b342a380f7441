"""``sessions.search`` and ``usage.summary``: reads of what the store derived from the events
(bridge/store/search.py, bridge/store/spend.py), with the requests' fields checked here."""

from __future__ import annotations

from datetime import UTC, datetime

from bridge.api.dispatch import Routes
from bridge.hub import Hub, HubError
from bridge.server.connection import Connection
from bridge.wire.protocol import SessionsSearch, UsageSummary
from bridge.wire.results import SessionsSearchResult, UsageSummaryResult

#: A query longer than this is refused (a search field, not a document).
MAX_QUERY_CHARS = 1000
#: Hits per answer: the default and the most.
DEFAULT_LIMIT = 50
MAX_LIMIT = 500


def parse_time(value: str | None, field: str) -> float | None:
    """An ISO 8601 time (``Z`` or an offset; a date alone is midnight UTC) as Unix time."""
    if value is None:
        return None
    try:
        at = datetime.fromisoformat(value)
    except ValueError:
        raise HubError(
            "bad_request", f"`{field}` must be an ISO 8601 time, such as 2026-01-31T09:00:00Z"
        ) from None
    if at.tzinfo is None:
        at = at.replace(tzinfo=UTC)
    return at.timestamp()


class SearchApi:
    def __init__(self, hub: Hub) -> None:
        self.hub = hub

    def register(self, routes: Routes) -> None:
        routes.add(SessionsSearch, self.sessions_search, SessionsSearchResult)
        routes.add(UsageSummary, self.usage_summary, UsageSummaryResult)

    async def sessions_search(self, _conn: Connection, req: SessionsSearch) -> SessionsSearchResult:
        if len(req.query) > MAX_QUERY_CHARS:
            raise HubError("bad_request", f"`query` is longer than {MAX_QUERY_CHARS} characters")
        limit = DEFAULT_LIMIT if req.limit is None else req.limit
        if limit < 1:
            raise HubError("bad_request", "`limit` must be 1 or more")
        hits = await self.hub.store.search(
            req.query,
            limit=min(limit, MAX_LIMIT),
            agent=req.agent,
            cwd=req.cwd,
            since=parse_time(req.since, "since"),
        )
        return SessionsSearchResult(hits=hits)

    async def usage_summary(self, _conn: Connection, req: UsageSummary) -> UsageSummaryResult:
        since = parse_time(req.since, "since")
        until = parse_time(req.until, "until")
        rows = await self.hub.store.usage_summary(since, until, req.group_by)
        return UsageSummaryResult(group_by=req.group_by, rows=rows)
