"""The snapshot scan opens archives to judge the files inside, within bounds: an archive it
cannot judge without reading too much (a zip bomb: too many files, too many bytes once
decompressed), one nested too deep, one with an encrypted or unreadable file, or one of a
format the standard library cannot open is held back, with one line saying which and why; a
file inside that is large data (a model's tensor) is not read, as the same file outside would
not be."""

from __future__ import annotations

import gzip
import io
import tarfile
import zipfile
from pathlib import Path

import pytest

from alchemist_jobs import secret_scan
from tests.unit.test_secret_scan_formats import HF_TOKEN, PEM_KEY, tar_of, write, zip_of


def verdict(root: Path, rel: str, content: bytes) -> str | None:
    write(root, {rel: content})
    return secret_scan.flagged_files(root, [rel]).get(rel)


@pytest.fixture
def opened_members(monkeypatch) -> list[str]:
    """The zip members opened from now on (to show the scan decides from the zip's directory
    alone)."""
    opened: list[str] = []
    real_open = zipfile.ZipFile.open

    def spy(self, name, *a, **kw):
        opened.append(getattr(name, "filename", name))
        return real_open(self, name, *a, **kw)

    monkeypatch.setattr(zipfile.ZipFile, "open", spy)
    return opened


def test_a_zip_of_too_many_files_is_held_back_from_its_directory(tmp_path, opened_members):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for i in range(secret_scan.MAX_ARCHIVE_MEMBERS + 1):
            z.writestr(f"f/{i}", b"")
    opened_members.clear()  # zipfile writes through open() too
    why = verdict(tmp_path, "many.zip", buf.getvalue())
    assert why and why.startswith("it is a zip archive too large to scan"), why
    assert f"more than {secret_scan.MAX_ARCHIVE_MEMBERS} files" in why
    assert opened_members == []


def test_a_zip_bomb_of_large_files_is_held_back_without_decompressing_them(tmp_path,
                                                                           opened_members):
    """Each file small enough to be scanned, together more than the scan reads (72 MiB of
    zeros in a 0.3 MB zip)."""
    size = secret_scan.MAX_SCAN_BYTES
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as z:
        for i in range(secret_scan.MAX_ARCHIVE_BYTES // size + 1):
            z.writestr(f"zeros/{i}.bin", bytes(size))
    opened_members.clear()
    why = verdict(tmp_path, "bomb.zip", buf.getvalue())
    assert why and why.startswith("it is a zip archive too large to scan"), why
    assert f"more than {secret_scan.MAX_ARCHIVE_BYTES >> 20} MiB" in why
    assert opened_members == []


def test_a_tar_gz_bomb_is_read_only_up_to_the_bound(tmp_path, monkeypatch):
    """A gzip stream of 1 GiB of zeros in 1 MB (concatenated gzip members, which gzip readers
    join): a tar can only be read in order, so the scan stops at its bound."""
    header = tarfile.TarInfo("zeros.bin")
    header.size = 1 << 30
    bomb = (gzip.compress(header.tobuf(), compresslevel=1)
            + gzip.compress(bytes(1 << 20), compresslevel=1) * 1024
            + gzip.compress(bytes(1024), compresslevel=1))
    decompressed = [0]
    real_read = gzip.GzipFile.read

    def counting(self, *a):
        data = real_read(self, *a)
        decompressed[0] += len(data)
        return data

    monkeypatch.setattr(gzip.GzipFile, "read", counting)
    why = verdict(tmp_path, "bomb.tar.gz", bomb)
    assert why and why.startswith("it is a gzip archive too large to scan"), why
    assert decompressed[0] <= secret_scan.MAX_ARCHIVE_BYTES + (1 << 20), decompressed[0]


def test_an_archive_nested_too_deep_is_held_back_naming_it(tmp_path):
    inner = zip_of({"c.zip": zip_of({"token.txt": "nothing here\n"})})
    why = verdict(tmp_path, "a.zip", zip_of({"b/b.zip": inner}))
    assert why and why.startswith("it is a zip archive too deeply nested to scan"), why
    assert "c.zip in b/b.zip" in why


def test_an_encrypted_file_inside_is_held_back_naming_it(tmp_path):
    """zipfile writes no encryption: set the encrypted flag (APPNOTE 4.4.4, general purpose
    bit 0) in the file's local and central headers, as `zip -e` leaves it."""
    data = bytearray(zip_of({"keys/notes.txt": "x" * 40}))
    for header, flag_at in ((b"PK\x03\x04", 6), (b"PK\x01\x02", 8)):
        at = data.find(header) + flag_at
        data[at] |= 1
    assert zipfile.ZipFile(io.BytesIO(bytes(data))).infolist()[0].flag_bits & 1
    why = verdict(tmp_path, "locked.zip", bytes(data))
    assert why == "it is a zip archive that cannot be scanned (keys/notes.txt is encrypted)"


def test_a_zip_file_compressed_with_bzip2_is_held_back_unread(tmp_path, opened_members):
    """zipfile hands a bzip2 file's 4 KB chunks to the decompressor whole, with no bound on
    what comes out (100 MiB of zeros is 113 bytes of bzip2)."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_BZIP2) as z:
        z.writestr("zeros.bin", bytes(1 << 20))
    opened_members.clear()
    assert verdict(tmp_path, "b.zip", buf.getvalue()) == (
        "it is a zip archive that cannot be scanned (zeros.bin is compressed with bzip2 or "
        "LZMA, which the scan does not decompress in a zip)")
    assert opened_members == []
    assert verdict(tmp_path, "b.tar.bz2", tar_of({"zeros.bin": bytes(1 << 20)}, "w:bz2")) is None


def test_a_corrupt_archive_is_held_back(tmp_path):
    stored = io.BytesIO()
    with zipfile.ZipFile(stored, "w") as z:  # stored: a flipped byte is a bad CRC
        z.writestr("data/a.txt", "hello world\n" * 20)
    flipped = bytearray(stored.getvalue())
    flipped[30 + len("data/a.txt") + 3] ^= 0xFF
    assert verdict(tmp_path, "flipped.zip", bytes(flipped)) == \
        "it is a zip archive that cannot be scanned (data/a.txt cannot be read)"
    whole = zip_of({"a.txt": "hello\n"})
    why = verdict(tmp_path, "cut.zip", whole[: len(whole) // 2])
    assert why and why.startswith("it is a zip archive that cannot be scanned"), why
    why = verdict(tmp_path, "cut.tar.gz", tar_of({"a.txt": "hi\n" * 999}, "w:gz")[:60])
    assert why and why.startswith("it is a gzip archive that cannot be scanned"), why


def test_formats_the_standard_library_cannot_open_are_still_held_back(tmp_path):
    zstd_frame = b"\x28\xb5\x2f\xfd\x24\x05\x29\x00\x00hello\x8f\x2b\x1c\x07"
    why = verdict(tmp_path, "data.tar.zst", zstd_frame)
    assert why and why.startswith("it is a zstd archive") and "cannot" in why, why


def test_a_large_tensor_inside_a_checkpoint_is_data_and_ships(tmp_path):
    """A file inside over MAX_SCAN_BYTES is not read, as the same file outside is not: a
    checkpoint with a 12 MB tensor ships, its small tensors and pickle scanned."""
    import torch

    buf = io.BytesIO()
    torch.save({"embedding": torch.zeros(3_000_000), "bias": torch.ones(8)}, buf)
    assert verdict(tmp_path, "big.pt", buf.getvalue()) is None


def test_a_gzipped_file_is_judged_by_what_it_holds(tmp_path):
    assert verdict(tmp_path, "data/train.csv.gz", gzip.compress(b"a,b\n1,2\n" * 1000)) is None
    why = verdict(tmp_path, "notes/hub.txt.gz", gzip.compress(f"token: {HF_TOKEN}\n".encode()))
    assert why == "it holds a Hugging Face token in hub.txt inside the gzip archive"


def test_a_name_inside_cannot_break_the_warning_line(tmp_path):
    why = verdict(tmp_path, "x.zip", zip_of({"a\nwarning: all clear\r.pem": PEM_KEY}))
    assert why and "\n" not in why and "\r" not in why and "Private Key" in why, why
