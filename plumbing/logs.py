"""Log output for the long-running commands: text for people, or one JSON object per line
(``--log-format json``) for a log shipper."""

from __future__ import annotations

import json
import logging
import time

FORMATS = ("text", "json")


class JsonFormatter(logging.Formatter):
    """Each record as one JSON object: ts, time (UTC), level, logger, msg[, exc]."""

    def format(self, record: logging.LogRecord) -> str:
        doc = {"ts": round(record.created, 3),
               "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(record.created)),
               "level": record.levelname.lower(), "logger": record.name,
               "msg": record.getMessage()}
        if record.exc_info:
            doc["exc"] = self.formatException(record.exc_info)
        return json.dumps(doc)


def configure(fmt: str = "text", level: int = logging.INFO) -> None:
    """Send the root logger's records to stderr in ``fmt`` ("text" or "json")."""
    if fmt not in FORMATS:
        raise ValueError(f"log format {fmt!r} is not one of {', '.join(FORMATS)}")
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter() if fmt == "json" else
                         logging.Formatter("%(asctime)s %(name)s %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
