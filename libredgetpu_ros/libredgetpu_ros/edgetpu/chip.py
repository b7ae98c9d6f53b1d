"""Chip driver: CSR access over control transfers and libedgetpu's bring-up sequence.

The phases mirror libedgetpu's ``UsbDriver::DoOpen``: Open, (DisableHardwareClockGate), EnableReset,
QuitReset,
EnableHardwareClockGate, InitializeChip, DoRunControl, Interrupts, Misc (the top-level interrupt manager:
thermal warning, memory BIST, PCIe error and thermal shutdown enables). Read-modify-write steps keep the other
fields of a register, as libedgetpu does.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Callable

from libredgetpu_ros.edgetpu import registers as r
from libredgetpu_ros.edgetpu.registers import Reg
from libredgetpu_ros.edgetpu.transport import DEFAULT_TIMEOUT_MS, Transport
from libredgetpu_ros.errors import ConfigError, DeviceLostError, DeviceTimeoutError

POLL_TIMEOUT_S = 2.0

INIT_PHASES = (
    "Open",
    "EnableReset",
    "QuitReset",
    "EnableHardwareClockGate",
    "InitializeChip",
    "DoRunControl",
    "Interrupts",
    "Misc",
)


class ChipDriver:
    """Register-level control of one accelerator in application mode."""

    def __init__(
        self,
        transport: Transport,
        timeout_ms: int = DEFAULT_TIMEOUT_MS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.transport = transport
        self.timeout_ms = timeout_ms
        self._clock = clock
        self.hardware_clock_gated = False
        self.efuse_revision: int | None = None

    # --- CSR access
    # ------------------------------------------------------------------------------------------
    def read32(self, offset: int) -> int:
        raw = self.transport.control_read(
            r.VENDOR_IN, r.REQ_CSR32, offset & 0xFFFF, offset >> 16, 4, self.timeout_ms
        )
        if len(raw) != 4:
            raise DeviceLostError(f"CSR 0x{offset:05x}: expected 4 bytes, got {len(raw)}")
        return struct.unpack("<I", raw)[0]

    def read64(self, offset: int) -> int:
        raw = self.transport.control_read(
            r.VENDOR_IN, r.REQ_CSR64, offset & 0xFFFF, offset >> 16, 8, self.timeout_ms
        )
        if len(raw) != 8:
            raise DeviceLostError(f"CSR 0x{offset:05x}: expected 8 bytes, got {len(raw)}")
        return struct.unpack("<Q", raw)[0]

    def write32(self, offset: int, value: int) -> None:
        self.transport.control_write(
            r.VENDOR_OUT,
            r.REQ_CSR32,
            offset & 0xFFFF,
            offset >> 16,
            struct.pack("<I", value & 0xFFFFFFFF),
            self.timeout_ms,
        )

    def write64(self, offset: int, value: int) -> None:
        self.transport.control_write(
            r.VENDOR_OUT,
            r.REQ_CSR64,
            offset & 0xFFFF,
            offset >> 16,
            struct.pack("<Q", value & 0xFFFFFFFFFFFFFFFF),
            self.timeout_ms,
        )

    def _poll(self, read: Callable[[], int], done: Callable[[int], bool], what: str) -> int:
        deadline = self._clock() + POLL_TIMEOUT_S
        while True:
            value = read()
            if done(value):
                return value
            if self._clock() > deadline:
                raise DeviceTimeoutError(
                    f"{what} not reached within {POLL_TIMEOUT_S:.0f} s (last 0x{value:x})"
                )

    def poll64(self, offset: Reg, expected: int) -> int:
        return self._poll(
            lambda: self.read64(offset), lambda v: v == expected, f"{offset.name} == 0x{expected:x}"
        )

    def _poll_power_state(self, state: int) -> None:
        self._poll(
            lambda: self.read32(Reg.scu_ctrl_3),
            lambda v: r.field(v, *r.SCU3_CUR_PWR_STATE) == state,
            f"scu_ctrl_3.cur_pwr_state == {state}",
        )

    # --- phases
    # ------------------------------------------------------------------------------------------------
    def open_phase(self) -> None:
        """Disable the PHY inactive modes; learn whether the GCB is hardware clock gated."""
        scu0 = self.read32(Reg.scu_ctrl_0)
        scu0 = r.with_field(scu0, *r.SCU0_PCIE_INACT_PHY_MODE, 0)
        scu0 = r.with_field(scu0, *r.SCU0_USB_INACT_PHY_MODE, 0)
        self.write32(Reg.scu_ctrl_0, scu0)
        scu2 = self.read32(Reg.scu_ctrl_2)
        self.hardware_clock_gated = r.field(scu2, *r.SCU2_RG_GATED_GCB) == 1

    def set_hardware_clock_gate(self, enabled: bool) -> None:
        if self.hardware_clock_gated == enabled:
            return
        scu2 = self.read32(Reg.scu_ctrl_2)
        self.write32(Reg.scu_ctrl_2, r.with_field(scu2, *r.SCU2_RG_GATED_GCB, 1 if enabled else 2))
        self.hardware_clock_gated = enabled

    def enable_reset(self) -> None:
        """Force sleep (reset), wait for power state 2, clear bulk credits by pulsing gcbb_credit0."""
        scu3 = self.read32(Reg.scu_ctrl_3)
        if r.field(scu3, *r.SCU3_RG_FORCE_SLEEP) == 3:
            return  # already in reset; HIB CSRs would not answer
        self.write32(Reg.scu_ctrl_3, r.with_field(scu3, *r.SCU3_RG_FORCE_SLEEP, 3))
        self._poll_power_state(2)
        self.write32(Reg.gcbb_credit0, 0xF)
        self.write32(Reg.gcbb_credit0, 0x0)

    def quit_reset(self, performance: str) -> None:
        """Leave sleep with the clock rates of the performance level; wait until the cores answer."""
        try:
            clkdiv, axi125, c8051_250 = r.CLOCKS_BY_PERFORMANCE[performance]
        except KeyError:
            raise ConfigError(
                f"performance {performance!r} is not one of {sorted(r.CLOCKS_BY_PERFORMANCE)}"
            ) from None
        scu3 = self.read32(Reg.scu_ctrl_3)
        scu3 = r.with_field(scu3, *r.SCU3_RG_FORCE_SLEEP, 2)
        scu3 = r.with_field(scu3, *r.SCU3_GCB_CLKDIV, clkdiv)
        scu3 = r.with_field(scu3, *r.SCU3_AXI_CLK_125M, axi125)
        scu3 = r.with_field(scu3, *r.SCU3_8051_CLK_250M, c8051_250)
        self.write32(Reg.scu_ctrl_3, scu3)
        self._poll_power_state(0)
        self.poll64(Reg.scalarCoreRunControl, 0)
        self.write64(Reg.idleRegister, r.IDLE_REGISTER_VALUE)
        self.write64(Reg.tileconfig0, r.TILECONFIG_BROADCAST)
        self.poll64(Reg.tileconfig0, r.TILECONFIG_BROADCAST)  # later tile writes are not ordered after it
        self.write64(Reg.deepSleep, r.DEEP_SLEEP_VALUE)

    def initialize_chip(self) -> None:
        """e-fuse revision, event descriptors, single bulk-out endpoint mode, bulk-in chunk length."""
        omc = self.read32(Reg.omc0_00)
        self.efuse_revision = r.field(omc, *r.OMC0_00_EFUSE_REVISION)
        self.write64(Reg.descr_ep, r.DESCR_EP_SC_HOST_ONLY)
        self.write64(Reg.multi_bo_ep, 0)
        chunk = r.OUTFEED_CHUNK_256B if self.transport.speed == "high" else r.OUTFEED_CHUNK_1K
        self.write64(Reg.outfeed_chunk_length, chunk)

    def run_control(self, state: int) -> None:
        for reg in r.SCALAR_RUN_CONTROLS:
            self.write64(reg, state)
        self.write64(Reg.tileconfig0, r.TILECONFIG_BROADCAST)
        self.poll64(Reg.tileconfig0, r.TILECONFIG_BROADCAST)
        for reg in r.TILE_RUN_CONTROLS:
            self.write64(reg, state)

    def enable_interrupts(self) -> None:
        self.write64(Reg.fatal_err_int_control, 1)
        for reg in r.TOP_LEVEL_INT_CONTROLS:
            self.write64(reg, 1)

    def enable_top_level_monitors(self) -> None:
        """Thermal warning, memory BIST, PCIe error and thermal shutdown (BeagleTopLevelInterruptManager)."""
        self.write32(Reg.omc0_d4, r.with_field(self.read32(Reg.omc0_d4), *r.OMC0_D4_THM_WARN_EN, 1))
        bist = self.read32(Reg.rambist_ctrl_1)
        bist = r.with_field(bist, *r.RAMBIST_INT_STATUS, 0)  # write-1-to-clear: write 0 to keep
        bist = r.with_field(bist, *r.RAMBIST_INT_MASK, 0)
        self.write32(Reg.rambist_ctrl_1, bist)
        scu7 = self.read32(Reg.scu_ctr_7)
        for fld in (r.SCU7_PLL_LOCK_FAILURE, r.SCU7_USB_SEL_FAILURE, r.SCU7_BOOT_FAILURE_MASK):
            scu7 = r.with_field(scu7, *fld, 0)
        self.write32(Reg.scu_ctr_7, scu7)
        self.write32(Reg.slv_abm_en, 1)
        self.write32(Reg.mst_abm_en, 1)
        self.write32(Reg.slv_err_resp_isr_mask, 0x3)
        self.write32(Reg.mst_err_resp_isr_mask, 0x3)
        self.write32(Reg.omc0_d8, r.with_field(self.read32(Reg.omc0_d8), *r.OMC0_D8_SD_EN, 1))

    def initialize(self, performance: str = "high") -> None:
        """The whole bring-up, in libedgetpu's order."""
        self.open_phase()
        self.set_hardware_clock_gate(False)
        self.enable_reset()
        self.quit_reset(performance)
        self.set_hardware_clock_gate(True)
        self.initialize_chip()
        self.run_control(r.RUN_STATE_RUN)
        self.enable_interrupts()
        self.enable_top_level_monitors()

    def hib_error(self) -> int:
        """hib_error_status (0 = no host-interface fatal error)."""
        return self.read64(Reg.hib_error_status)
