"""A minimal reader of ELF shared objects: the symbols a built extension imports and the libraries it needs.

``imported_symbols`` lists the undefined dynamic symbols (``.dynsym``) of a file, ``needed_libraries`` its
``DT_NEEDED`` entries: what the dynamic linker will resolve from other libraries when the module loads, named as the
linker sees them (C++ names mangled), whatever the source spelled. No policy: which of them is a finding is
verifier/front/binary.py's question.

What it guarantees: the file is only read (never loaded, nothing run), with the standard library alone (no
binutils, no third-party package), so it runs wherever the verifier runs; a file it cannot read, or one that is not
a 64-bit little-endian ELF file (what the compilers here produce), gives [], and a malformed table gives what was read
before it. What it does not: symbols the module defines itself, static symbols, or what it fetches by name at run
time (``dlsym``) are not listed, and nothing here says which library will resolve an import.
"""

from __future__ import annotations

import struct
from pathlib import Path


def _elf_sections(so_path: str | Path) -> tuple[bytes, list[tuple]] | None:
    """The bytes of a 64-bit little-endian ELF file (what the compilers here produce) and its section headers, each
    ``(type, offset, size, link, entsize)``; None when the file cannot be read or is not such an ELF file. The one
    minimal reader behind ``imported_symbols`` and ``needed_libraries``: no binutils, no third-party package, so it
    runs wherever the verifier runs."""
    try:
        data = Path(so_path).read_bytes()
    except OSError:
        return None
    if len(data) < 0x40 or data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        return None
    try:
        shoff, = struct.unpack_from("<Q", data, 0x28)
        shentsize, shnum, _ = struct.unpack_from("<HHH", data, 0x3A)
        sections = []
        for i in range(shnum):
            _name, stype, _flags, _addr, soff, size, link, _info, _align, entsize = \
                struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize)
            sections.append((stype, soff, size, link, entsize))
    except struct.error:
        return None
    return data, sections


def _entries(so_path: str | Path, section_type: int, read) -> list:
    """``read(data, entry_offset, strings_offset)`` over the fixed-size entries of every section of
    ``section_type``, stopping a section where it returns ``StopIteration``; its non-None results, in order. A
    malformed table ends the walk: what was read so far is returned."""
    elf = _elf_sections(so_path)
    if elf is None:
        return []
    data, sections = elf
    out = []
    try:
        for stype, soff, size, link, entsize in sections:
            if stype != section_type or not entsize:
                continue
            str_off = sections[link][1]
            for j in range(size // entsize):
                got = read(data, soff + j * entsize, str_off)
                if got is StopIteration:
                    break
                if got is not None:
                    out.append(got)
    except (struct.error, IndexError, ValueError):
        pass
    return out


def _cstring(data: bytes, at: int) -> bytes:
    return data[at:data.index(b"\0", at)]


def _undefined_symbol(data: bytes, at: int, strings: int):
    st_name, _st_info, _other, st_shndx, _value, _size = struct.unpack_from("<IBBHQQ", data, at)
    return _cstring(data, strings + st_name) if st_shndx == 0 and st_name else None  # not defined here, not null


def imported_symbols(so_path: str | Path) -> list[bytes]:
    """The undefined (imported) dynamic symbols (.dynsym) of an ELF shared object; [] when it cannot be read."""
    return _entries(so_path, 11, _undefined_symbol)  # SHT_DYNSYM


def _needed_entry(data: bytes, at: int, strings: int):
    tag, val = struct.unpack_from("<qQ", data, at)
    if tag == 0:  # DT_NULL ends the table
        return StopIteration
    return _cstring(data, strings + val).decode(errors="replace") if tag == 1 else None  # DT_NEEDED


def needed_libraries(so_path: str | Path) -> list[str]:
    """The shared libraries an ELF shared object names as needed (its ``DT_NEEDED`` entries, in order); [] when it
    cannot be read."""
    return _entries(so_path, 6, _needed_entry)  # SHT_DYNAMIC

