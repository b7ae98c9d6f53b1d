"""Register bring-up and firmware upload, checked transfer by transfer against the recording double."""

from __future__ import annotations

import hashlib
import struct

import pytest
from libredgetpu_ros.edgetpu import registers as r
from libredgetpu_ros.edgetpu.chip import ChipDriver
from libredgetpu_ros.edgetpu.firmware import ENV_VAR, find_firmware, upload_firmware
from libredgetpu_ros.edgetpu.simulated import SimulatedAccelerator, SimulatedBootloader
from libredgetpu_ros.edgetpu.transport import RecordingTransport
from libredgetpu_ros.errors import ConfigError, DeviceLostError, FirmwareNotFoundError

# Every CSR write libedgetpu makes while opening a USB accelerator, in order: (offset, width in bytes, value).
# Sources: S = libedgetpu beagle_top_level_handler.cc / usb_driver.cc / run_controller.cc /
# beagle_top_level_interrupt_manager.cc (order and fields); X = value seen on a real device in
# geohot/edgetpuxray
# simple.py (its replayed writes and its `setup` log of libedgetpu's control transfers).
EXPECTED_WRITES = [
    (0x1A30C, 4, 0x000F0059),  # Open: scu_ctrl_0, PHY inactive modes cleared (S; X value)
    (0x1A314, 4, 0x00190000),  # DisableHardwareClockGate: scu_ctrl_2.rg_gated_gcb = 2 (S)
    (0x1A318, 4, 0x00C5005C),  # EnableReset: scu_ctrl_3.rg_force_sleep = 3 (S)
    (0x1907C, 4, 0xF),  # EnableReset: pulse gcbb_credit0 (S)
    (0x1907C, 4, 0x0),
    (
        0x1A318,
        4,
        0x5085025C,
    ),  # QuitReset: force_sleep = 2, 250 MHz GCB, 125 MHz AXI, 500 MHz 8051 (S; X value)
    (0x4A000, 8, 0x1),  # QuitReset: idleRegister (S; X)
    (0x48788, 8, 0x7F),  # QuitReset: tileconfig0 broadcast (S; X)
    (0x40020, 8, 0x1E02),  # QuitReset: deepSleep to_sleep 2, to_wake 30 (S; X)
    (0x1A314, 4, 0x00150000),  # EnableHardwareClockGate: rg_gated_gcb = 1 (S; X value)
    (0x4C148, 8, 0xF0),  # InitializeChip: descr_ep (S; X)
    (0x4C160, 8, 0x0),  # InitializeChip: multi_bo_ep = single endpoint (S; X)
    (0x4C058, 8, 0x80),  # InitializeChip: outfeed_chunk_length 1 KiB on USB3 (S; X)
    (0x44018, 8, 1),  # DoRunControl: scalarCoreRunControl (S; not in X's log excerpt)
    (0x44158, 8, 1),  # avDataPopRunControl (S; X)
    (0x44198, 8, 1),  # parameterPopRunControl (S; X)
    (0x441D8, 8, 1),  # infeedRunControl (S; X)
    (0x44218, 8, 1),  # outfeedRunControl (S; X)
    (0x48788, 8, 0x7F),  # tileconfig0 (S; X)
    (0x400C0, 8, 1),  # opRunControl (S; X)
    (0x40150, 8, 1),  # narrowToWideRunControl (S; X)
    (0x40110, 8, 1),  # wideToNarrowRunControl (S; X)
    (0x40250, 8, 1),  # meshBus0..3RunControl (S; X)
    (0x40298, 8, 1),
    (0x402E0, 8, 1),
    (0x40328, 8, 1),
    (0x40190, 8, 1),  # ringBusConsumer0/1RunControl (S; X)
    (0x401D0, 8, 1),
    (0x40210, 8, 1),  # ringBusProducerRunControl (S; X)
    (0x4C060, 8, 1),  # fatal_err_int_control (S; X)
    (0x4C070, 8, 1),  # top_level_int_0..3_control (S; X)
    (0x4C080, 8, 1),
    (0x4C090, 8, 1),
    (0x4C0A0, 8, 1),
    (0x1A0D4, 4, 0x80000001),  # omc0_d4 thermal warning enable (S; X)
    (0x1A704, 4, 0x7F),  # rambist_ctrl_1 unmask (S; X)
    (0x1A33C, 4, 0x3F),  # scu_ctr_7 unmask (S; X)
    (0x1A500, 4, 1),  # slv_abm_en (S; X)
    (0x1A600, 4, 1),  # mst_abm_en (S; X)
    (0x1A558, 4, 3),  # slv_err_resp_isr_mask (S; X)
    (0x1A658, 4, 3),  # mst_err_resp_isr_mask (S; X)
    (0x1A0D8, 4, 0x80000000),  # omc0_d8 thermal shutdown enable (S; X)
]


def _writes(transport: RecordingTransport) -> list[tuple[int, int, int]]:
    out = []
    for call in transport.calls:
        if call.kind == "control_write":
            assert call.request_type == 0x40
            assert call.request == (1 if call.length == 4 else 0)  # 32-bit CSR: request 1, 64-bit: 0
            out.append(((call.index << 16) | call.value, call.length, int.from_bytes(call.data, "little")))
    return out


def test_init_writes_match_libedgetpu_and_observed_device() -> None:
    transport = RecordingTransport(SimulatedAccelerator())
    chip = ChipDriver(transport)
    chip.initialize("high")
    assert _writes(transport) == EXPECTED_WRITES
    assert chip.efuse_revision == 1
    reads = [c for c in transport.calls if c.kind == "control_read"]
    assert all(c.request_type == 0xC0 for c in reads)
    # polls: power state after reset, scalarCoreRunControl == 0, tileconfig0 echo (twice)
    polled = [(c.index << 16) | c.value for c in reads]
    assert polled.count(0x44018) == 1 and polled.count(0x48788) == 2


def test_usb2_high_speed_uses_256_byte_outfeed_chunks() -> None:
    transport = RecordingTransport(SimulatedAccelerator(), speed="high")
    ChipDriver(transport).initialize()
    assert (0x4C058, 8, 0x20) in _writes(transport)


def test_already_in_reset_skips_force_sleep_and_max_performance_clocks() -> None:
    sim = SimulatedAccelerator()
    sim.registers[r.Reg.scu_ctrl_3] = r.with_field(0x0005005C, *r.SCU3_RG_FORCE_SLEEP, 3)
    transport = RecordingTransport(sim)
    ChipDriver(transport).initialize("max")
    writes = _writes(transport)
    assert (0x1907C, 4, 0xF) not in writes  # EnableReset returned early
    scu3 = [v for off, _, v in writes if off == 0x1A318]
    assert len(scu3) == 1 and r.field(scu3[0], *r.SCU3_GCB_CLKDIV) == 0 and r.field(scu3[0], 30, 1) == 0


def test_unknown_performance_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="turbo"):
        ChipDriver(RecordingTransport(SimulatedAccelerator())).initialize("turbo")


def test_power_state_that_never_settles_times_out() -> None:
    sim = SimulatedAccelerator()
    sim._read_register = lambda offset: 0  # scu_ctrl_3 never reaches power state 2
    ticks = iter(range(100000))
    chip = ChipDriver(RecordingTransport(sim), clock=lambda: float(next(ticks)))
    from libredgetpu_ros.errors import DeviceTimeoutError

    with pytest.raises(DeviceTimeoutError, match="cur_pwr_state"):
        chip.enable_reset()


def test_firmware_upload_sequence(fixture_path) -> None:
    image = fixture_path("firmware/apex_latest_single_ep.bin").read_bytes()
    boot = SimulatedBootloader()
    transport = RecordingTransport(boot)
    upload_firmware(transport, image)
    calls = transport.calls
    n_blocks = -(-len(image) // 0x100)
    downloads = [c for c in calls if c.kind == "control_write"]
    assert [(c.request_type, c.request, c.value) for c in downloads] == [
        (0x21, 1, i) for i in range(n_blocks + 1)
    ]
    assert [c.length for c in downloads] == [0x100] * (n_blocks - 1) + [len(image) % 0x100 or 0x100, 0]
    # each download is followed by a 6-byte DFU_GETSTATUS
    for i, c in enumerate(calls[: 2 * (n_blocks + 1)]):
        assert (c.kind, c.request) == (("control_write", 1) if i % 2 == 0 else ("control_read", 3))
    uploads = [c for c in calls if c.kind == "control_read" and c.request == 2]
    assert [c.value for c in uploads] == list(range(len(uploads))) and len(uploads) == n_blocks
    assert calls[-1].kind == "reset"
    assert bytes(boot.image) == image and boot.reset_called


def test_firmware_verification_mismatch_is_detected(fixture_path) -> None:
    image = fixture_path("firmware/apex_latest_single_ep.bin").read_bytes()
    boot = SimulatedBootloader()

    def corrupt(call):
        reply = boot(call)
        if call.kind == "control_read" and call.request == 2 and call.value == 3:
            return bytes(b ^ 0xFF for b in reply)
        return reply

    with pytest.raises(DeviceLostError, match="verification"):
        upload_firmware(RecordingTransport(corrupt), image)


def test_firmware_sha256_matches_docs(fixture_path) -> None:
    image = fixture_path("firmware/apex_latest_single_ep.bin").read_bytes()
    digest = hashlib.sha256(image).hexdigest()
    from pathlib import Path

    docs = (Path(__file__).resolve().parents[3] / "docs" / "edgetpu.md").read_text()
    assert digest in docs


def test_missing_firmware_names_places_and_source(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv(ENV_VAR, str(tmp_path / "nope.bin"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    with pytest.raises(FirmwareNotFoundError) as info:
        find_firmware()
    message = str(info.value)
    assert str(tmp_path / "nope.bin") in message and "google-coral/libedgetpu" in message
    good = tmp_path / "fw.bin"
    good.write_bytes(struct.pack("<I", 1))
    assert find_firmware(good) == good


def test_missing_firmware_hint_is_followable(fixture_path, tmp_path, monkeypatch) -> None:
    """The hint names no command-line option (there is none) and its folder is where the firmware is found."""
    from libredgetpu_ros.edgetpu.firmware import SOURCE_HINT

    assert "--" not in SOURCE_HINT and f"{ENV_VAR}=PATH" in SOURCE_HINT
    monkeypatch.delenv(ENV_VAR, raising=False)
    monkeypatch.delenv("XDG_DATA_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert "~/.local/share/libredgetpu/" in SOURCE_HINT
    folder = tmp_path / ".local" / "share" / "libredgetpu"
    folder.mkdir(parents=True)
    image = fixture_path("firmware/apex_latest_single_ep.bin")
    (folder / image.name).write_bytes(image.read_bytes())
    assert find_firmware() == folder / image.name
