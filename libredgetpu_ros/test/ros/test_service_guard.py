"""ros/services.py without a running node: the guard's answer for each of our srv types, coroutine handlers,
and that every service in the package is made through the guard (a node calling ``create_service`` itself
would bring back the failure of issue 30: one exception, a dead node)."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "libredgetpu_ros"


class _Logger:
    def __init__(self) -> None:
        self.errors: list[str] = []

    def error(self, text: str) -> None:
        self.errors.append(text)


class _Node:
    def __init__(self) -> None:
        self.logger = _Logger()

    def get_logger(self) -> _Logger:
        return self.logger


def _srv_types() -> list[type]:
    from std_srvs.srv import Trigger

    from libredgetpu_ros_interfaces import srv

    return [Trigger, *(getattr(srv, n) for n in dir(srv) if not n.startswith("_") and
                       hasattr(getattr(srv, n), "Request"))]


@pytest.mark.parametrize("srv_type", _srv_types(), ids=lambda t: t.__name__)
def test_an_exception_is_answered_as_a_refusal(srv_type) -> None:
    from libredgetpu_ros.ros.services import guard

    node = _Node()

    def handler(request, response):
        raise OverflowError("x" * 100_000)

    answer = guard(node, srv_type, "~/svc", handler)(srv_type.Request(), srv_type.Response())
    assert isinstance(answer, srv_type.Response)
    fields = answer.get_fields_and_field_types()
    assert any(f in fields for f in ("success", "accepted"))
    assert not getattr(answer, "success", getattr(answer, "accepted", None))
    assert answer.message.startswith("internal error (OverflowError): xxx") and len(answer.message) < 500
    assert "Traceback" in node.logger.errors[0] and len(node.logger.errors[0]) < 9000


def test_a_coroutine_handler_stays_a_coroutine_and_is_guarded() -> None:
    import inspect

    from libredgetpu_ros.ros.services import guard
    from std_srvs.srv import Trigger

    async def handler(request, response):
        raise KeyError("boom")

    guarded = guard(_Node(), Trigger, "~/svc", handler)
    assert inspect.iscoroutinefunction(guarded)
    answer = asyncio.run(guarded(Trigger.Request(), Trigger.Response()))
    assert not answer.success and answer.message.startswith("internal error (KeyError)")


def test_every_service_of_the_package_is_made_through_the_guard() -> None:
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name == "services.py" and path.parent.name == "ros":
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if re.search(r"\.create_service\(", line):
                offenders.append(f"{path.relative_to(PACKAGE)}:{number}: {line.strip()}")
    assert not offenders, ("services made without ros/services.create_guarded_service:\n"
                           + "\n".join(offenders))
