"""Typed errors shared by every layer.

Each error carries an ``exit_code`` used by the CLI: 2 for bad input (a file, an image, weights or a
configuration the user gave us), 3 for device problems, 1 for anything else.
"""

from __future__ import annotations

import traceback

CLIP = 160  # characters of user text kept in a message


def clip(text: object, limit: int = CLIP) -> str:
    """``str(text)`` cut to ``limit`` characters, saying how long it was (``textdata`` re-exports it)."""
    s = text if isinstance(text, str) else str(text)
    return s if len(s) <= limit else f"{s[:limit]}... ({len(s)} characters)"


def traceback_text(exc: BaseException) -> str:
    """``exc``'s traceback with its chained causes, as Python prints it, without the last newline: the text
    the nodes log for an exception nothing foresaw (a service, a timer, a session thread, an activate)."""
    return "".join(traceback.format_exception(exc)).rstrip()


class LibrEdgeTpuError(Exception):
    """Base class of every error this package raises on purpose."""

    exit_code = 1


class InputError(LibrEdgeTpuError):
    """Something the caller handed us is wrong (file, image, weights, config)."""

    exit_code = 2


class ModelFormatError(InputError):
    """A model file is malformed or is not the kind of model the caller expected."""


class ImageError(InputError):
    """An image cannot be decoded or has an unsupported encoding, size or channel count."""


class WeightsError(InputError):
    """Weights have the wrong shape or dtype, contain NaN/inf, or do not fit the template."""


class ConfigError(InputError):
    """A configuration file or parameter value is invalid."""


class ProtocolError(InputError):
    """A network packet is malformed, truncated, oversized or names a field value out of bounds."""


class TextDataError(InputError):
    """A user's YAML / JSON file cannot be read within its budgets (textdata.py).

    ``kind`` is the parser's exception class ("ScannerError", "JSONDecodeError", "UnicodeDecodeError"...) or
    "limit" for a refused size, depth or alias expansion; ``origin`` names the file; ``detail`` is the
    parser's full message."""

    def __init__(self, message: str, *, kind: str, origin: str = "", detail: str = "") -> None:
        super().__init__(message)
        self.kind, self.origin, self.detail = kind, origin, detail


class IOSpecError(InputError):
    """A Femtosense IOSpec file or a vector given for it is invalid.

    ``kind`` is the exception class femtorun 4.1.2 raises for the same input ("ValueError", "TypeError", ...),
    ``femtorun_message`` its ``str(e)``; ``key`` / ``value`` name the offending field."""

    def __init__(self, message: str, *, kind: str = "ValueError", femtorun_message: str = "",
                 key: str | None = None, value: object = None) -> None:
        super().__init__(message)
        self.kind, self.femtorun_message, self.key, self.value = kind, femtorun_message, key, value


class SpuSequenceError(InputError):
    """An input or output event breaks an IOSpec sequence rule (femtorun's checks or the SPU firmware's).

    ``kind`` is the exception class femtorun raises ("KeyError", "AssertionError", "RuntimeError"; "strict"
    for the SPU library's declared-order rules femtorun does not check), ``rule`` a short rule id."""

    def __init__(self, message: str, *, kind: str, rule: str, femtorun_message: str = "") -> None:
        super().__init__(message)
        self.kind, self.rule, self.femtorun_message = kind, rule, femtorun_message


class BackendError(LibrEdgeTpuError):
    """A backend cannot load or run a model."""


class OutputError(InputError):
    """An output file cannot be written where the caller asked: missing folder, no permission, disk full.

    The previous file of that name is left as it was (see libredgetpu_ros.atomicio)."""


class ModelFetchError(LibrEdgeTpuError):
    """A catalogue model could not be fetched or imported: network, truncated transfer, wrong checksum."""


class ModelSourceError(ModelFetchError):
    """What a server or an import folder offered is malformed or not the pinned file (a broken HTTP reply,
    more bytes than announced or allowed, a checksum mismatch), or the fetch was asked something impossible:
    bad input (exit 2), where an unreachable server or a cut transfer stays a ModelFetchError (exit 1)."""

    exit_code = 2


class DeviceError(LibrEdgeTpuError):
    """Base class of accelerator device problems."""

    exit_code = 3


class DeviceNotFoundError(DeviceError):
    """No accelerator matches the request."""


class DevicePermissionError(DeviceError):
    """The accelerator exists but this user may not open it (see the udev rule in docs/edgetpu.md)."""


class DeviceLostError(DeviceError):
    """The accelerator disappeared or stopped answering in the middle of an operation."""


class DeviceTimeoutError(DeviceError):
    """A transfer did not complete in time."""


class FirmwareNotFoundError(DeviceError):
    """The firmware file needed to boot an accelerator in bootloader mode is missing."""

