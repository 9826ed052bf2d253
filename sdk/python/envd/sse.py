"""A server-sent events parser (the WHATWG event-stream format)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import BinaryIO, Iterator, Optional

__all__ = ["SSEvent", "parse"]


@dataclass
class SSEvent:
    """One dispatched event: its id (None when the event had no id line),
    type ("message" when none was given) and data (lines joined by \\n)."""

    id: Optional[str]
    event: str
    data: str


def parse(stream: BinaryIO) -> Iterator[SSEvent]:
    """Yield the events of stream (anything with readline()) until it ends.
    Comments (": keep-alive") and events without data are skipped, as a
    browser's EventSource does; an event cut off by the end of the stream
    is not dispatched."""
    ev_id: Optional[str] = None
    ev_type = ""
    data: list = []
    have_data = False
    while True:
        raw = stream.readline()
        if not raw:
            return
        if not raw.endswith(b"\n") and not raw.endswith(b"\r"):
            return  # a line cut off by the end of the stream
        line = raw.decode("utf-8", "replace").rstrip("\r\n")
        if line == "":
            if have_data:
                yield SSEvent(ev_id, ev_type or "message", "\n".join(data))
            ev_id, ev_type, data, have_data = None, "", [], False
            continue
        if line.startswith(":"):
            continue
        field, sep, value = line.partition(":")
        if sep and value.startswith(" "):
            value = value[1:]
        if field == "id":
            if "\0" not in value:
                ev_id = value
        elif field == "event":
            ev_type = value
        elif field == "data":
            data.append(value)
            have_data = True
        # retry and unknown fields are ignored
