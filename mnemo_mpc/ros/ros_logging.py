"""The library's Python log records (`mnemo_mpc.*`: warm-start model, infeasible goals, dropped messages, world
loading) forwarded to a node's ROS logger, so they reach the console and /rosout like the node's own lines."""

from __future__ import annotations

import logging
from typing import Any


class RosLogHandler(logging.Handler):
    """A `logging.Handler` writing to an rclpy logger (anything with debug/info/warning/error methods)."""

    def __init__(self, ros_logger: Any) -> None:
        super().__init__()
        self.ros_logger = ros_logger

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = f"[{record.name}] {record.getMessage()}"
            if record.levelno >= logging.ERROR:
                self.ros_logger.error(text)
            elif record.levelno >= logging.WARNING:
                self.ros_logger.warning(text)
            elif record.levelno >= logging.INFO:
                self.ros_logger.info(text)
            else:
                self.ros_logger.debug(text)
        except Exception:  # logging must never raise into the code that logged
            self.handleError(record)


def forward_library_logs(ros_logger: Any) -> RosLogHandler:
    """Route `mnemo_mpc.*` records at INFO and above to `ros_logger` only (no second copy on stderr)."""
    handler = RosLogHandler(ros_logger)
    lib = logging.getLogger("mnemo_mpc")
    lib.setLevel(logging.INFO)
    lib.propagate = False
    lib.handlers = [handler]
    return handler
