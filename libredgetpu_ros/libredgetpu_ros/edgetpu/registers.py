"""Register map, USB ids, endpoints and bulk tags of the Edge TPU USB accelerator ("Beagle").

Offsets are taken from google-coral/libedgetpu ``driver/config/beagle/beagle_csr_offsets.h`` and cross-checked
against the control transfers libedgetpu made on a real device, as logged in geohot/edgetpuxray ``simple.py``.
Register access goes through vendor control transfers: wValue = offset & 0xFFFF, wIndex = offset >> 16,
bRequest 0 for a 64-bit CSR and 1 for a 32-bit CSR (``driver/usb/usb_ml_commands.cc``).
"""

# ruff: noqa: N815  (register names are spelled exactly as in libedgetpu, so they can be grepped there)
from __future__ import annotations

from enum import IntEnum

# --- USB identities (driver/usb/usb_driver.cc)
# ----------------------------------------------------------------
APP_VENDOR_ID = 0x18D1  # running firmware ("application mode")
APP_PRODUCT_ID = 0x9302
DFU_VENDOR_ID = 0x1A6E  # bootloader, waiting for firmware
DFU_PRODUCT_ID = 0x089A

ML_INTERFACE = 0

# --- endpoints (driver/usb/usb_ml_commands.h, single bulk-out endpoint mode)
# -------------------------------------
EP_BULK_OUT = 0x01  # instructions, input activations and parameters, each behind an 8-byte header
EP_BULK_IN_OUTPUT = 0x81  # output activations
EP_EVENT_IN = 0x82  # 16-byte event descriptors (scalar-core "host interrupt" = end of an executable)
EP_INTERRUPT_IN = 0x83  # 4-byte top-level interrupts (thermal, errors)

EVENT_PACKET_SIZE = 16
INTERRUPT_PACKET_SIZE = 4
HEADER_SIZE = 8

# libedgetpu's default --usb_max_bulk_out_transfer: payloads are written in pieces of at most 1 MiB.
MAX_BULK_OUT_CHUNK = 1 << 20
# Output reads always ask for at least this much: a smaller request can end in LIBUSB_ERROR_OVERFLOW when the
# device sends a full packet train (observed by libredgetpu on hardware).
BULK_IN_CHUNK = 32768


class DescriptorTag(IntEnum):
    """Low nibble of byte 4 of the bulk-out header, and of byte 12 of an event packet."""

    INSTRUCTIONS = 0
    INPUT_ACTIVATIONS = 1
    PARAMETERS = 2
    OUTPUT_ACTIVATIONS = 3
    INTERRUPT0 = 4
    INTERRUPT1 = 5
    INTERRUPT2 = 6
    INTERRUPT3 = 7


# --- control request types
# --------------------------------------------------------------------------------------
VENDOR_OUT = 0x40  # host-to-device, vendor, device
VENDOR_IN = 0xC0  # device-to-host, vendor, device
REQ_CSR64 = 0
REQ_CSR32 = 1

DFU_OUT = 0x21  # host-to-device, class, interface
DFU_IN = 0xA1  # device-to-host, class, interface
DFU_DNLOAD = 1
DFU_UPLOAD = 2
DFU_GETSTATUS = 3
DFU_STATE_IDLE = 2  # dfuIDLE
DFU_STATE_DNLOAD_IDLE = 5  # dfuDNLOAD-IDLE
DFU_STATUS_SIZE = 6
DFU_BLOCK_SIZE = 0x100  # the block size libedgetpu used on the wire (edgetpuxray's firmware log)


class Reg(IntEnum):
    """Named CSR offsets used by the driver."""

    # SCU (system control unit), 32-bit
    scu_ctrl_0 = 0x1A30C
    scu_ctrl_2 = 0x1A314
    scu_ctrl_3 = 0x1A318
    scu_ctr_7 = 0x1A33C
    # APEX misc, 32-bit
    omc0_00 = 0x1A000
    omc0_d4 = 0x1A0D4
    omc0_d8 = 0x1A0D8
    omc0_dc = 0x1A0DC
    efuse_00 = 0x1A200
    slv_abm_en = 0x1A500
    slv_err_resp_isr_mask = 0x1A558
    mst_abm_en = 0x1A600
    mst_err_resp_isr_mask = 0x1A658
    rambist_ctrl_1 = 0x1A704
    # CB bridge, 32-bit
    gcbb_credit0 = 0x1907C
    # scalar core, 64-bit
    scalarCoreRunControl = 0x44018
    avDataPopRunControl = 0x44158
    parameterPopRunControl = 0x44198
    infeedRunControl = 0x441D8
    outfeedRunControl = 0x44218
    # tiles (broadcast through tileconfig0), 64-bit
    deepSleep = 0x40020
    opRunControl = 0x400C0
    wideToNarrowRunControl = 0x40110
    narrowToWideRunControl = 0x40150
    ringBusConsumer0RunControl = 0x40190
    ringBusConsumer1RunControl = 0x401D0
    ringBusProducerRunControl = 0x40210
    meshBus0RunControl = 0x40250
    meshBus1RunControl = 0x40298
    meshBus2RunControl = 0x402E0
    meshBus3RunControl = 0x40328
    tileconfig0 = 0x48788
    # HIB user, 64-bit
    hib_error_status = 0x486F0
    hib_first_error_status = 0x48700
    # misc, 64-bit
    idleRegister = 0x4A000
    # USB block, 64-bit
    outfeed_chunk_length = 0x4C058
    fatal_err_int_control = 0x4C060
    top_level_int_0_control = 0x4C070
    top_level_int_1_control = 0x4C080
    top_level_int_2_control = 0x4C090
    top_level_int_3_control = 0x4C0A0
    descr_ep = 0x4C148
    multi_bo_ep = 0x4C160


# Run-control registers in the order libedgetpu's RunController::DoRunControl writes them; tileconfig0 is
# set to
# broadcast (and polled) between the scalar-core group and the tile group.
SCALAR_RUN_CONTROLS = (
    Reg.scalarCoreRunControl,
    Reg.avDataPopRunControl,
    Reg.parameterPopRunControl,
    Reg.infeedRunControl,
    Reg.outfeedRunControl,
)
TILE_RUN_CONTROLS = (
    Reg.opRunControl,
    Reg.narrowToWideRunControl,
    Reg.wideToNarrowRunControl,
    Reg.meshBus0RunControl,
    Reg.meshBus1RunControl,
    Reg.meshBus2RunControl,
    Reg.meshBus3RunControl,
    Reg.ringBusConsumer0RunControl,
    Reg.ringBusConsumer1RunControl,
    Reg.ringBusProducerRunControl,
)
TOP_LEVEL_INT_CONTROLS = (
    Reg.top_level_int_0_control,
    Reg.top_level_int_1_control,
    Reg.top_level_int_2_control,
    Reg.top_level_int_3_control,
)
RUN_STATE_RUN = 1
RUN_STATE_HALT = 2  # RunControl::kMoveToHalt

TILECONFIG_BROADCAST = 0x7F  # TileConfig<7>::set_broadcast()
DEEP_SLEEP_VALUE = (30 << 8) | 2  # toWakeDelay = 30, toSleepDelay = 2 -> 0x1E02 (observed)
IDLE_REGISTER_VALUE = 1  # enable + counter 1 (observed value 0x1)
DESCR_EP_SC_HOST_ONLY = 0xF0  # only scalar-core host interrupt descriptors come back on the event endpoint
OUTFEED_CHUNK_1K = 0x80
OUTFEED_CHUNK_256B = 0x20  # USB2 high speed work-around (b/73181174)


def field(value: int, lsb: int, width: int) -> int:
    """Bits [lsb, lsb+width) of value."""
    return (value >> lsb) & ((1 << width) - 1)


def with_field(value: int, lsb: int, width: int, new: int) -> int:
    """value with bits [lsb, lsb+width) replaced by new."""
    mask = ((1 << width) - 1) << lsb
    return (value & ~mask) | ((new << lsb) & mask)


# Bit fields (lsb, width) from libedgetpu driver/config/beagle_csr_helper.h.
SCU0_PCIE_INACT_PHY_MODE = (8, 3)
SCU0_USB_INACT_PHY_MODE = (11, 3)
SCU2_RG_GATED_GCB = (18, 2)  # 1 = hardware clock gated, 2 = no clock gating
SCU3_CUR_PWR_STATE = (8, 2)
SCU3_RG_FORCE_SLEEP = (22, 2)
SCU3_GCB_CLKDIV = (28, 2)  # 0: 500 MHz, 1: 250 MHz, 2: 125 MHz, 3: 63 MHz
SCU3_AXI_CLK_125M = (30, 1)
SCU3_8051_CLK_250M = (31, 1)
SCU7_PLL_LOCK_FAILURE = (16, 1)
SCU7_USB_SEL_FAILURE = (17, 1)
SCU7_BOOT_FAILURE_MASK = (18, 2)
OMC0_D4_THM_WARN_EN = (31, 1)
OMC0_D8_SD_EN = (31, 1)  # observed: 0x80000000 written on a device that read 0
RAMBIST_INT_STATUS = (16, 3)
RAMBIST_INT_MASK = (20, 3)
OMC0_00_EFUSE_REVISION = (24, 8)

# (gcb clkdiv, axi 125 MHz bit, 8051 250 MHz bit) per libedgetpu PerformanceExpectation over USB.
CLOCKS_BY_PERFORMANCE: dict[str, tuple[int, int, int]] = {
    "low": (3, 1, 1),
    "medium": (2, 1, 0),
    "high": (1, 1, 0),
    "max": (0, 0, 0),
}
