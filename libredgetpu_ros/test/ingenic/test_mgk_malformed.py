"""Malformed .mgk input: not ELF, wrong machine / endianness / class, truncated or misplaced section tables,
sections and weights past the end, >= 5,000 fuzzed mutations -> ModelFormatError naming what is wrong,
never a traceback or a hang; the CLI prints one error line and exits 2."""

from __future__ import annotations

import json
import platform
import shutil
import subprocess
import sys

import pytest
from libredgetpu_ros.cli.main import main
from libredgetpu_ros.errors import InputError, ModelFormatError
from libredgetpu_ros.ingenic import load_mgk, parse_table

from .._helpers import one_error_line

builder = sys.modules["_mgk_builder"]    # both loaded by this folder's conftest.py
harness = sys.modules["_fuzz_harness"]

FUZZ_CASES = 5000


def test_not_elf():
    for data in (b"", b"\x7fEL", b"MZ\x90\x00" + b"\0" * 60, b"\x89PNG\r\n\x1a\n" + b"\0" * 100):
        with pytest.raises(ModelFormatError, match="not an ELF file"):
            load_mgk(data)


def test_big_endian_mips_from_the_real_toolchain(mips_toolchain, tmp_path):
    record = builder.Record(0.1, 0.2, 0, 0, (1, 2, 3, 4))
    data = builder.build_shared_object(tmp_path, ["layer_1_QuantizeFeature"], [record], endian="EB")
    assert data[5] == 2   # binutils made a big-endian ELF
    with pytest.raises(ModelFormatError, match=r"big-endian ELF; an \.mgk is little-endian"):
        load_mgk(data)


def test_wrong_machine_from_the_host_toolchain(tmp_path):
    """The host's own shared object (ELF64 on a 64-bit host) and, on x86-64, an i386 ELF32 one (host
    binutils, installed with g++). An ELF32 LE object of another machine is also made by patch_elf32."""
    if shutil.which("as") is None or shutil.which("ld") is None:
        pytest.fail("host binutils (as, ld) not found; they come with g++, which the build needs anyway")
    (tmp_path / "x.s").write_text(".text\n.globl f\nf: ret\n")
    variants = [([], [], "ELF64 file")]
    if platform.machine() == "x86_64":
        variants.append((["--32"], ["-m", "elf_i386"], "e_machine is EM_386"))
    for flags, ld_flags, message in variants:
        subprocess.run(["as", *flags, "-o", str(tmp_path / "x.o"), str(tmp_path / "x.s")], check=True)
        subprocess.run(["ld", *ld_flags, "-shared", "-o", str(tmp_path / "x.so"), str(tmp_path / "x.o")],
                       check=True)
        with pytest.raises(ModelFormatError, match=message):
            load_mgk(tmp_path / "x.so")


def test_patched_header_fields(synthetic):
    data = synthetic.data
    size = len(data)
    shoff, shnum = builder.elf32_field(data, "e_shoff"), builder.elf32_field(data, "e_shnum")
    rodata = load_mgk(data).elf.section(".rodata").index
    assert builder.elf32_field(data, "e_shstrndx") == shnum - 1     # ld puts .shstrtab last
    cases = {
        "e_machine is EM_ARM": builder.patch_elf32(data, e_machine=40),
        "truncated section header table": builder.patch_elf32(data, e_shoff=size - 100),
        "truncated section header table: 65535 entries": builder.patch_elf32(data, e_shnum=65535),
        "section header table entry size 64": builder.patch_elf32(data, e_shentsize=64),
        "section header table at offset 8 overlaps the ELF header": builder.patch_elf32(data, e_shoff=8),
        "truncated program header table": builder.patch_elf32(data, e_phoff=size - 8, e_phnum=3),
        f"e_shstrndx {shnum + 3} is past": builder.patch_elf32(data, e_shstrndx=shnum + 3),
        "ends past the end of the file": builder.patch_section(data, rodata, sh_size=size),
        f"section name table \\(section {shnum - 1}\\) is SHT_PROGBITS, not SHT_STRTAB":
            builder.patch_section(data, shnum - 1, sh_type=1),
        "extended section count": builder.patch_elf32(builder.patch_section(data, 0, sh_size=70000),
                                                      e_shnum=0),
    }
    for message, bad in cases.items():
        with pytest.raises(ModelFormatError, match=message):
            load_mgk(bad)
    # The section table cut off by truncating the file itself.
    with pytest.raises(ModelFormatError, match="truncated section header table"):
        load_mgk(synthetic.so_bytes[:shoff + 40 * shnum - 1])
    with pytest.raises(ModelFormatError, match="ELF64 file"):
        load_mgk(data[:4] + b"\x02" + data[5:])
    with pytest.raises(ModelFormatError, match="unknown EI_DATA 7"):
        load_mgk(data[:5] + b"\x07" + data[6:])


def test_sections_without_file_bytes_do_not_move_the_weight_region(synthetic):
    """A NULL section with a garbage offset/size is not checked nor counted; nor is a NOBITS one."""
    so_len = len(synthetic.so_bytes)
    patched = builder.patch_section(synthetic.data, 0, sh_offset=0xFFFFFF00, sh_size=0xFFFF)
    assert load_mgk(patched).weights_offset == so_len
    got = load_mgk(synthetic.data).elf.section(".got").index
    patched = builder.patch_section(synthetic.data, got, sh_type=8, sh_offset=0xFFFFFF00)   # -> NOBITS
    assert load_mgk(patched).weights_offset == so_len


def test_every_truncation_of_the_elf_part(synthetic):
    """Cut the shared object at every length: a typed error or (past the ELF data) a valid read."""
    so = synthetic.so_bytes
    for n in range(len(so) + 1):
        try:
            load_mgk(so[:n])
        except ModelFormatError:
            continue
        assert n == len(so), f"a file cut at {n} of {len(so)} bytes was accepted"


def _consume(table):
    def run(data: bytes) -> None:
        model = load_mgk(data, table)
        model.describe()
        model.extract("oihw")
    return run


def test_fuzzed_mutations_give_typed_errors_never_a_traceback_or_hang(synthetic):
    """>= 5,000 seeded mutations (headers, section table, .rodata and weights mutated most), each under a
    per-case time limit in a memory-capped worker."""
    table = parse_table(synthetic.table)
    so_len = len(synthetic.so_bytes)
    shoff = builder.elf32_field(synthetic.data, "e_shoff")
    rodata = load_mgk(synthetic.data).elf.section(".rodata")      # layer names, scale records, runs
    target = harness.FuzzTarget(
        name="mgk", seeds=[synthetic.data, synthetic.so_bytes], run=_consume(table), allowed=(InputError,),
        hot=lambda seed: [(0, 64), (shoff, so_len), (rodata.offset, rodata.offset + rodata.size),
                          (so_len, so_len + 2000)])
    report = harness.fuzz(target, cases=FUZZ_CASES, seed=15, time_limit_s=2.0, memory_limit_mb=512)
    print(report.summary())
    assert report.cases >= FUZZ_CASES
    assert report.ok, report.summary()
    assert report.counts["refused"] > FUZZ_CASES // 10      # the mutations reach the checks
    assert report.counts["accepted"] > 0                    # and not everything is refused


@pytest.mark.parametrize("argv_tail", [["inspect"], ["inspect", "--json"], ["extract", "OUT"]])
def test_cli_prints_one_error_line_and_exits_2(synthetic, tmp_path, capsys, argv_tail):
    bad = tmp_path / "bad.mgk"
    bad.write_bytes(builder.patch_elf32(synthetic.data, e_machine=62))
    out = tmp_path / "out.npz"
    argv = ["mgk", argv_tail[0], str(bad), *[str(out) if a == "OUT" else a for a in argv_tail[1:]]]
    code = main(argv)
    captured = capsys.readouterr()
    assert captured.out == ""
    one_error_line(code, captured.err, "EM_X86_64")
    assert not out.exists()


def test_cli_subprocess_exit_code(synthetic, tmp_path):
    """The installed entry point end to end: a non-ELF file -> exit 2, one 'error:' line."""
    bad = tmp_path / "notes.mgk"
    bad.write_text("not a model\n")
    proc = subprocess.run([sys.executable, "-m", "libredgetpu_ros.cli.main", "mgk", "inspect", str(bad)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines() == [f"error: {bad}: not an ELF file (no \\x7fELF magic); an .mgk is a "
                                        "MIPS32 ELF"]
    good = subprocess.run([sys.executable, "-m", "libredgetpu_ros.cli.main", "mgk", "inspect", "--json",
                           str(synthetic.path)], capture_output=True, text=True, timeout=60)
    assert good.returncode == 0, good.stderr
    assert len(json.loads(good.stdout)["scale_records"]) == len(synthetic.layers)
