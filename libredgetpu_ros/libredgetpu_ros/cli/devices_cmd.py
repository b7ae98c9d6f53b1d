"""``libredgetpu-ros devices``: list attached Edge TPU accelerators and their state."""

from __future__ import annotations

import argparse
import json

HELP = "list attached Edge TPU USB accelerators (running or in bootloader mode)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print a JSON list")


def run(args: argparse.Namespace) -> int:
    from libredgetpu_ros.edgetpu.device import list_devices

    devices = list_devices()  # libusb missing -> DeviceError -> "error: ..." and exit code 3
    if args.json:
        print(json.dumps([d.to_dict() for d in devices], indent=2))
        return 0
    if not devices:
        print("no Edge TPU accelerators found (`libredgetpu-ros doctor` checks the USB bus, udev rule and "
              "permissions; nodes with backend auto run on the CPU)")
        return 0
    for d in devices:
        note = "" if d.mode == "running" else "  (firmware is uploaded when it is opened)"
        print(
            f"[{d.index}] {d.bus_path}  {d.vendor_id:04x}:{d.product_id:04x}  {d.mode}  {d.speed} speed{note}"
        )
    return 0
