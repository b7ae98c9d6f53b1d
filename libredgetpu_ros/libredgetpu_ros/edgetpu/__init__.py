"""Edge TPU USB accelerator driver: transport -> chip -> executor -> device (see docs/edgetpu.md).

Import ``libredgetpu_ros.edgetpu.device`` for the public API; libusb is only loaded when a device is used.
"""
