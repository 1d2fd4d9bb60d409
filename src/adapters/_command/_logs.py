"""Log set-up for the command line: ``--log-level`` (any case) and ``--log-format text|json``.

Log lines may carry structured fields as ``extra={"fields": {...}}``: the text format shows
only the message (which already says what the fields say), the JSON format adds each field,
so a log shipper can filter on ``session`` or ``peer`` without parsing prose.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any

LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
FORMATS = ("text", "json")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time (UTC, ISO 8601), level, logger, message, the fields."""

    def format(self, record: logging.LogRecord) -> str:
        moment = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        out: dict[str, Any] = {
            "time": f"{moment}.{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            out.update({key: value for key, value in fields.items() if key not in out})
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


def json_line(level: str, message: str) -> str:
    """``message`` as one line of the JSON format, for what is said before (or instead of)
    the logging set-up: a command line that cannot be used."""
    record = logging.makeLogRecord({"name": "execproto", "levelname": level, "msg": message,
                                    "levelno": logging.getLevelName(level)})
    return JsonFormatter().format(record)


def set_up(level: str, form: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if form == "json" else logging.Formatter(TEXT_FORMAT))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)


def level_name(text: str) -> str:
    """``--log-level``'s type: any case, so ``debug`` and ``DEBUG`` are the same."""
    return text.upper()
