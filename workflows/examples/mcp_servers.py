"""Local MCP stand-ins for the examples, written with the ``mcp`` SDK, served over stdio.

    python workflows/examples/mcp_servers.py calendar    # google-calendar: create_event
    python workflows/examples/mcp_servers.py pagerduty   # pagerduty: create_incident

You do not start them yourself: an example's ``<name>.lattice.toml`` declares them
(``command = "python"``, ``args = ["workflows/examples/mcp_servers.py", "calendar"]``)
and ``lattice run`` starts each one the first time a node needs it and stops it when the
run ends. The paths are relative, so run the examples from the repository root, with the
virtual environment active (its ``python`` has the ``mcp`` SDK).

The tools keep nothing between runs and call nothing outside this process: answers are
computed from the arguments, so the same arguments always give the same result.
"""

from __future__ import annotations

import hashlib
import sys
from datetime import datetime, timedelta
from typing import Annotated, Literal

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import BaseModel, Field

ON_CALL = {
    "security-response": "Dana Whitfield",
    "billing-api": "Omar Haddad",
    "checkout": "Lena Vogt",
    "search": "Kenji Mori",
}
"""PagerDuty services this stand-in knows, with who is on call for each."""


def short_id(prefix: str, *parts: str) -> str:
    return prefix + hashlib.sha256("\n".join(parts).encode()).hexdigest()[:10]


class Event(BaseModel):
    id: str
    status: str
    summary: str
    start: str
    end: str
    attendees: list[str]
    location: str | None
    description: str | None
    html_link: str


class Incident(BaseModel):
    id: str
    status: str
    title: str
    service: str
    urgency: str
    body: str | None
    assigned_to: str
    html_url: str


def calendar() -> MCPServer:
    server = MCPServer("google-calendar (local stand-in)", log_level="WARNING")

    @server.tool(description="Create a calendar event and invite attendees.")
    def create_event(
        summary: Annotated[str, Field(min_length=1, max_length=200, description="Event title")],
        start: Annotated[str, Field(description="ISO 8601 start time with a UTC offset")],
        durationMinutes: Annotated[
            int, Field(ge=5, le=480, description="Length in minutes")
        ],  # the tool's argument name
        attendees: Annotated[list[str], Field(min_length=1, description="Email addresses")],
        location: Annotated[str | None, Field(description="Room or video call")] = None,
        description: Annotated[str | None, Field(description="Agenda, one item per line")] = None,
    ) -> Event:
        try:
            begins = datetime.fromisoformat(start)
        except ValueError:
            raise ToolError(f"start {start!r} is not an ISO 8601 date and time") from None
        if begins.tzinfo is None:
            raise ToolError(f"start {start!r} has no UTC offset (write e.g. +01:00)")
        bad = [a for a in attendees if "@" not in a]
        if bad:
            raise ToolError(f"not email addresses: {', '.join(bad)}")
        event_id = short_id("evt_", summary, start)
        return Event(
            id=event_id,
            status="confirmed",
            summary=summary,
            start=begins.isoformat(),
            end=(begins + timedelta(minutes=durationMinutes)).isoformat(),
            attendees=attendees,
            location=location,
            description=description,
            html_link=f"https://calendar.example.com/event/{event_id}",
        )

    return server


def pagerduty() -> MCPServer:
    server = MCPServer("pagerduty (local stand-in)", log_level="WARNING")

    @server.tool(description="Create an incident and page the escalation policy of a service.")
    def create_incident(
        title: Annotated[str, Field(min_length=1, max_length=255, description="Incident title")],
        service: Annotated[str, Field(description="PagerDuty service name")],
        urgency: Annotated[Literal["high", "low"], Field(description="high pages at once")],
        body: Annotated[str | None, Field(description="Details for responders")] = None,
    ) -> Incident:
        if service not in ON_CALL:
            raise ToolError(f"no service {service!r}; services: {', '.join(sorted(ON_CALL))}")
        incident_id = short_id("P", title, service).upper()
        return Incident(
            id=incident_id,
            status="triggered",
            title=title,
            service=service,
            urgency=urgency,
            body=body,
            assigned_to=ON_CALL[service],
            html_url=f"https://pagerduty.example.com/incidents/{incident_id}",
        )

    return server


SERVERS = {"calendar": calendar, "pagerduty": pagerduty}

if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1] not in SERVERS:
        sys.exit(f"usage: python {sys.argv[0]} {{{'|'.join(SERVERS)}}}")
    SERVERS[sys.argv[1]]().run("stdio")
