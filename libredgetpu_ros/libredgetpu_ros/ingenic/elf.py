"""The ELF side of an ``.mgk`` file, read with pyelftools: checks, sections, the data appended after them.

An ``.mgk`` is a MIPS32 little-endian ELF shared object; its weights are appended after everything the ELF
headers describe. Every size and offset is checked against the file size before pyelftools is asked to read
it, and every exception pyelftools (or the ``construct`` parser inside it) raises on malformed input becomes
a :class:`ModelFormatError` naming the step that failed.
"""

from __future__ import annotations

import contextlib
import io
import struct
from collections.abc import Iterator
from dataclasses import dataclass

from elftools.common.exceptions import ELFError, ELFParseError
from elftools.construct import ConstructError
from elftools.elf.elffile import ELFFile

from libredgetpu_ros.errors import LibrEdgeTpuError, ModelFormatError

ELF32_HEADER_BYTES = 52
ELF32_SHDR_BYTES = 40
ELF32_PHDR_BYTES = 32
_MAX_SECTIONS = 65535
# EF_MIPS_ARCH (the top four bits of e_flags) -> architecture level (binutils' include/elf/mips.h).
MIPS_ARCH = {0: "mips1", 1: "mips2", 2: "mips3", 3: "mips4", 4: "mips5", 5: "mips32", 6: "mips64",
             7: "mips32r2", 8: "mips64r2", 9: "mips32r6", 10: "mips64r6"}

# What pyelftools raises on malformed bytes (its own types, the construct parser's, and plain Python
# errors from decoding garbage). Anything else is a bug of ours and must surface as such.
_PARSER_ERRORS = (ELFError, ELFParseError, ConstructError, struct.error, ValueError, KeyError, IndexError,
                  TypeError, UnicodeDecodeError, OverflowError, AttributeError, EOFError, AssertionError)


@contextlib.contextmanager
def parser_errors(source: str, step: str) -> Iterator[None]:
    """Turn pyelftools' exceptions during ``step`` into one :class:`ModelFormatError`."""
    try:
        yield
    except LibrEdgeTpuError:
        raise
    except _PARSER_ERRORS as exc:
        raise ModelFormatError(f"{source}: malformed ELF while {step}: {type(exc).__name__}: {exc}") from exc


@dataclass(frozen=True)
class Section:
    index: int
    name: str
    type: str        # pyelftools' name, e.g. "SHT_PROGBITS"
    offset: int      # in the file
    size: int
    addr: int

    @property
    def end(self) -> int:
        """End of the section's bytes in the file; NOBITS (.bss) and NULL sections occupy none, and their
        offsets are not checked against the file, so they do not count."""
        return 0 if self.type in ("SHT_NOBITS", "SHT_NULL") else self.offset + self.size


@dataclass(frozen=True)
class ElfView:
    """What an ``.mgk``'s ELF headers say, plus where the appended data starts."""

    source: str
    file_size: int
    e_type: str
    sections: tuple[Section, ...]
    section_table: tuple[int, int]      # (offset, bytes)
    program_table: tuple[int, int]
    tail_offset: int                    # first byte after every section, header table and the ELF header
    machine: str = "EM_MIPS"
    flags: int = 0                      # e_flags (MIPS: architecture level, ABI, PIC)

    @property
    def identity(self) -> dict:
        """Class, byte order, machine and MIPS architecture level (from e_flags), as checked at load."""
        return {"class": "ELF32", "endianness": "little", "machine": self.machine,
                "flags": f"0x{self.flags:08x}",
                "arch": MIPS_ARCH.get(self.flags >> 28, f"unknown (EF_MIPS_ARCH {self.flags >> 28:#x})")}

    @property
    def tail_size(self) -> int:
        return self.file_size - self.tail_offset

    def section(self, name: str) -> Section | None:
        return next((s for s in self.sections if s.name == name), None)


def _check_ident(data: bytes, source: str) -> None:
    """e_ident alone, before pyelftools: the three ways a file is "not ours" deserve plain words."""
    if len(data) < 16 or data[:4] != b"\x7fELF":
        raise ModelFormatError(f"{source}: not an ELF file (no \\x7fELF magic); an .mgk is a MIPS32 ELF")
    if data[4] != 1:
        kind = {2: "ELF64"}.get(data[4], f"unknown EI_CLASS {data[4]}")
        raise ModelFormatError(f"{source}: {kind} file; an .mgk is ELF32 (EI_CLASS 1)")
    if data[5] != 1:
        kind = {2: "big-endian"}.get(data[5], f"unknown EI_DATA {data[5]}")
        raise ModelFormatError(f"{source}: {kind} ELF; an .mgk is little-endian (EI_DATA 1)")
    if len(data) < ELF32_HEADER_BYTES:
        raise ModelFormatError(f"{source}: truncated ELF header: {len(data)} bytes, "
                               f"need {ELF32_HEADER_BYTES}")


def _check_table(source: str, what: str, offset: int, count: int, entsize: int, expected: int,
                 file_size: int) -> tuple[int, int]:
    if count == 0:
        return (offset, 0)
    if entsize != expected:
        raise ModelFormatError(f"{source}: {what} entry size {entsize}, ELF32 uses {expected}")
    end = offset + count * entsize
    if end > file_size:
        raise ModelFormatError(f"{source}: truncated {what}: {count} entries at offset {offset} end at "
                               f"{end}, file has {file_size} bytes")
    if offset < ELF32_HEADER_BYTES:
        raise ModelFormatError(f"{source}: {what} at offset {offset} overlaps the ELF header")
    return (offset, count * entsize)


def read_elf(data: bytes, source: str = "<bytes>") -> ElfView:
    """Check that ``data`` is a MIPS32 LE ELF and list its sections; raises :class:`ModelFormatError`."""
    _check_ident(data, source)
    size = len(data)
    with parser_errors(source, "reading the ELF header"):
        elf = ELFFile(io.BytesIO(data))
        header = elf.header
        machine, e_type, flags = header["e_machine"], header["e_type"], header["e_flags"]
        shoff, shnum, shentsize = header["e_shoff"], header["e_shnum"], header["e_shentsize"]
        phoff, phnum, phentsize = header["e_phoff"], header["e_phnum"], header["e_phentsize"]
    if machine != "EM_MIPS":
        raise ModelFormatError(f"{source}: e_machine is {machine}; an .mgk is a MIPS (EM_MIPS, 8) object")
    if shnum == 0 and shoff != 0:
        # Extended numbering keeps the real count in section 0's sh_size: read it only once it fits.
        _check_table(source, "section header table", shoff, 1, shentsize, ELF32_SHDR_BYTES, size)
        with parser_errors(source, "reading the extended section count"):
            shnum = elf.num_sections()
        if not 0 < shnum <= _MAX_SECTIONS:
            raise ModelFormatError(f"{source}: extended section count {shnum} out of range")
    section_table = _check_table(source, "section header table", shoff, shnum, shentsize,
                                 ELF32_SHDR_BYTES, size)
    program_table = _check_table(source, "program header table", phoff, phnum, phentsize,
                                 ELF32_PHDR_BYTES, size)
    shstrndx = 0
    if shnum:
        with parser_errors(source, "reading e_shstrndx"):
            shstrndx = elf.get_shstrndx()  # SHN_XINDEX keeps the real index in section 0's sh_link
        if shstrndx >= shnum:
            raise ModelFormatError(f"{source}: e_shstrndx {shstrndx} is past the {shnum} sections")
    sections = _read_sections(elf, source, shnum, size, shstrndx)
    tail = max([ELF32_HEADER_BYTES, sum(section_table), sum(program_table)] + [s.end for s in sections])
    return ElfView(source=source, file_size=size, e_type=str(e_type), sections=tuple(sections),
                   section_table=section_table, program_table=program_table, tail_offset=tail,
                   machine=str(machine), flags=int(flags))


def _read_sections(elf: ELFFile, source: str, count: int, file_size: int, shstrndx: int) -> list[Section]:
    sections = []
    for index in range(count):
        with parser_errors(source, f"reading section header {index}"):
            # The header only (pyelftools' public get_section() also resolves the name, which needs the
            # string table checked first).
            header = elf._get_section_header(index)
            sh_type, offset = header["sh_type"], header["sh_offset"]
            size, addr = header["sh_size"], header["sh_addr"]
        if sh_type != "SHT_NOBITS" and sh_type != "SHT_NULL" and offset + size > file_size:
            raise ModelFormatError(f"{source}: section {index} ({sh_type}) at offset {offset} with {size} "
                                   f"bytes ends past the end of the file ({file_size} bytes)")
        sections.append((index, header, str(sh_type), offset, size, addr))
    if shstrndx and sections[shstrndx][2] != "SHT_STRTAB":
        raise ModelFormatError(f"{source}: the section name table (section {shstrndx}) is "
                               f"{sections[shstrndx][2]}, not SHT_STRTAB")
    names = _section_names(elf, source, [s[1] for s in sections], shstrndx)
    return [Section(index=i, name=names[i], type=t, offset=o, size=s, addr=a)
            for (i, _, t, o, s, a) in sections]


def _section_names(elf: ELFFile, source: str, headers: list, shstrndx: int) -> list[str]:
    """Names from the section-name string table (bounds and type checked above); none without one."""
    if not shstrndx:
        return [""] * len(headers)
    with parser_errors(source, "reading the section name string table"):
        table = elf.get_section(shstrndx)
        return [table.get_string(header["sh_name"]) or "" for header in headers]
