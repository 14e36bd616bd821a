"""Finding secrets in what a job ships or shows, with Yelp's detect-secrets: code snapshot files and `env:` values.

detect-secrets decides; this module only chooses its detectors and keeps it fast. The detectors
are those of known credential formats (private keys, cloud and service tokens, credentials in
URLs) and of password-like keywords (`password = "..."`, `API_KEY: ...`). Its high-entropy
detectors are left out: in ordinary code they flag hashes, ids and model names, and a snapshot
that silently lost a source file would break the job it was meant to protect. A line that is
meant to hold what looks like a secret is released with detect-secrets' own inline marker
`pragma: allowlist secret`.

detect-secrets runs each detector on each line through a generic call layer, which costs about
a second per hundred lines on a loaded machine; so each file is first searched once with the
same detectors' own patterns (a line a detector flags matches one of them), and only a file
where one matches is scanned line by line.

Some credentials detect-secrets has no detector for: a kubeconfig's client key or token, a
`docker login`'s config.json, a gcloud login, GitHub's fine-grained and Hugging Face's tokens.
TOKENS and DOCUMENTS recognise them by their content, whatever the file is called. Files are
judged by content, never by extension (a key saved as `logo.png` is a key). An archive (zip,
tar, gzip, bzip2, xz: torch checkpoints, `.npz`, wheels and documents are zips) is opened with
the standard library and each file inside judged as the same file outside would be; it is held
back for the first that holds a secret, naming it, or whole when it cannot be judged within
bounds (MAX_ARCHIVE_*: a zip bomb, nesting, an encrypted or unreadable file inside) or opened
at all (zstd, 7z, rar). An `env:` variable is also judged by its name (SECRET_NAME).
"""

from __future__ import annotations

import bz2
import gzip
import io
import json
import lzma
import re
import struct
import tarfile
import tempfile
import zipfile
import zlib
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path
from typing import Any

# detect-secrets' plugin class names (detect_secrets/plugins/*.py, version pinned in the lock).
DETECTORS = (
    "ArtifactoryDetector",
    "AWSKeyDetector",
    "AzureStorageKeyDetector",
    "BasicAuthDetector",
    "DiscordBotTokenDetector",
    "GitHubTokenDetector",
    "GitLabTokenDetector",
    "JwtTokenDetector",
    "KeywordDetector",
    "MailchimpDetector",
    "NpmDetector",
    "OpenAIDetector",
    "PrivateKeyDetector",
    "PypiTokenDetector",
    "SendGridDetector",
    "SlackDetector",
    "SquareOAuthDetector",
    "StripeDetector",
    "TelegramBotTokenDetector",
    "TwilioKeyDetector",
)
# Also left out: the IBM Cloud, Cloudant and SoftLayer detectors, password keywords near a
# vendor's name (KeywordDetector finds the same lines), whose patterns are the slowest.
# detect-secrets' default heuristics that drop false positives (templates, `$VAR` references,
# sequences, UUIDs, lock files) and honour the inline allowlist marker.
FILTERS = (
    "detect_secrets.filters.heuristic.is_lock_file",
    "detect_secrets.filters.heuristic.is_indirect_reference",
    "detect_secrets.filters.heuristic.is_prefixed_with_dollar_sign",
    "detect_secrets.filters.allowlist.is_line_allowlisted",
    "detect_secrets.filters.heuristic.is_not_alphanumeric_string",
    "detect_secrets.filters.common.is_invalid_file",
    "detect_secrets.filters.heuristic.is_sequential_string",
    "detect_secrets.filters.heuristic.is_potential_uuid",
    "detect_secrets.filters.heuristic.is_templated_secret",
    "detect_secrets.filters.heuristic.is_swagger_file",
    "detect_secrets.filters.heuristic.is_likely_id_string",
)
# Turned off, although a default: is_non_text_file, which skips a file by its extension (.png,
# .zip...). A file is judged by what it holds.
NOT_FILTERS = ("detect_secrets.filters.heuristic.is_non_text_file",)
MAX_SCAN_BYTES = 8 << 20  # larger files are data, not code or configuration: not scanned

# Credentials of formats detect-secrets has no detector for, by their content. Tokens, by
# their pattern: (kind, pattern).
TOKENS: tuple[tuple[str, str], ...] = (
    # client-go's clientcmd v1 Config (a kubeconfig): users[].user.client-key-data, as YAML or
    # JSON, wherever it lies.
    ("a kubeconfig's client key", r"""client-key-data["']?[ \t]*:[ \t]*["']?[A-Za-z0-9+/]{16,}"""),
    # GitHub's fine-grained personal access tokens (GitHubTokenDetector knows ghp_ and its
    # kin only) and Hugging Face's user access tokens.
    ("a GitHub fine-grained token", r"\bgithub_pat_[A-Za-z0-9_]{50,}"),
    ("a Hugging Face token", r"\bhf_[A-Za-z0-9]{30,}\b"),
)
# Credential files, by their parsed structure (a file of code that builds one is not one):
# (kind, a pattern a candidate holds, a check of the parsed document that returns the secret
# it holds or None).
MAX_PARSE_BYTES = 1 << 20


def _kubeconfig_secret(doc: Any) -> str | None:
    """A kubeconfig user's token, password, client key or OIDC tokens (clientcmd v1 AuthInfo;
    `client-key` and `tokenFile` are paths, not secrets)."""
    if not (isinstance(doc, dict) and doc.get("kind") == "Config" and isinstance(doc.get("users"), list)):
        return None
    for entry in doc["users"]:
        user = entry.get("user") if isinstance(entry, dict) else None
        if not isinstance(user, dict):
            continue
        provider = user.get("auth-provider")  # OIDC: its config's id and refresh tokens
        config = provider.get("config") if isinstance(provider, dict) else None
        for d, fields in (
            (user, ("token", "password", "client-key-data")),
            (
                config if isinstance(config, dict) else {},
                ("id-token", "refresh-token", "access-token", "client-secret"),
            ),
        ):
            for field in fields:
                if isinstance(d.get(field), str) and d[field]:
                    return d[field]
    return None


def _docker_login(doc: Any) -> str | None:
    """A `docker login` in a config.json (docker/cli configfile): auths.REGISTRY.auth (base64
    of user:password) or its identitytoken."""
    auths = doc.get("auths") if isinstance(doc, dict) else None
    for entry in auths.values() if isinstance(auths, dict) else ():
        for field in ("auth", "identitytoken", "registrytoken", "password"):
            if isinstance(entry, dict) and isinstance(entry.get(field), str) and entry[field]:
                return entry[field]
    return None


GOOGLE_TYPES = {
    "authorized_user",
    "service_account",
    "external_account_authorized_user",
    "impersonated_service_account",
}


def _google_credentials(doc: Any) -> str | None:
    """google-auth's credential files (`gcloud auth application-default login`, a service
    account's key): their refresh token, private key or client secret."""
    if not (isinstance(doc, dict) and doc.get("type") in GOOGLE_TYPES):
        return None
    inner = doc.get("source_credentials")  # impersonated_service_account
    for d in (doc, inner if isinstance(inner, dict) else {}):
        for field in ("refresh_token", "private_key", "client_secret"):
            if isinstance(d.get(field), str) and d[field]:
                return d[field]
    return None


DOCUMENTS = (  # the pattern picks the few files worth parsing
    (
        "a kubeconfig's credentials",
        re.compile(r"""(^|[{,])[ \t"']*kind["']?[ \t]*:[ \t]*["']?Config\b""", re.MULTILINE),
        _kubeconfig_secret,
    ),
    ("a docker login (config.json auths)", re.compile(r'"auths"\s*:'), _docker_login),
    (
        "Google Cloud credentials",
        re.compile(r'"type"\s*:\s*"({})"'.format("|".join(sorted(GOOGLE_TYPES)))),
        _google_credentials,
    ),
)
_ALLOWLISTED = re.compile(r"pragma:\s*allowlist[ -]secret", re.IGNORECASE)
# An archive's leading bytes (and tar's at offset 257) -> its kind.
ARCHIVES = (
    (b"PK\x03\x04", "zip"),
    (b"PK\x05\x06", "zip"),
    (b"PK\x07\x08", "zip"),
    (b"\x1f\x8b", "gzip"),
    (b"\xfd7zXZ\x00", "xz"),
    (b"\x28\xb5\x2f\xfd", "zstd"),
    (b"7z\xbc\xaf\x27\x1c", "7z"),
    (b"Rar!\x1a\x07", "rar"),
)
# Compressed streams (one file, or a tar) and their standard-library readers, whose read(n)
# decompresses no more than n bytes.
STREAMS: dict[str, Callable[[Any], Any]] = {
    "gzip": lambda f: gzip.GzipFile(fileobj=f, mode="rb"),
    "bzip2": bz2.BZ2File,
    "xz": lzma.LZMAFile,
}
# What one archive may take to be judged, over all its levels; beyond it, it is held back.
MAX_ARCHIVE_DEPTH = 2  # an archive inside an archive is opened, one inside that is not
MAX_ARCHIVE_MEMBERS = 10_000  # entries (a zip's, from its directory before anything is read)
MAX_ARCHIVE_BYTES = 64 << 20  # decompressed bytes read (a zip's, summed from its directory)
# What reading a damaged archive raises (zipfile, tarfile and the decompressors).
UNREADABLE = (
    OSError,
    EOFError,
    ValueError,
    RuntimeError,
    NotImplementedError,
    struct.error,
    zipfile.BadZipFile,
    tarfile.TarError,
    zlib.error,
    lzma.LZMAError,
)
# Printable ASCII runs: the text a binary file carries (a token or key is one).
_TEXT_RUNS = re.compile(rb"[\t\x20-\x7e]{6,}")


@contextmanager
def _settings(detectors: Iterable[str] = DETECTORS) -> Iterator[None]:
    from detect_secrets.settings import transient_settings

    with transient_settings(
        {"plugins_used": [{"name": n} for n in detectors], "filters_used": [{"path": f} for f in FILTERS]}
    ) as settings:
        settings.disable_filters(*NOT_FILTERS)  # on by default: off only when named
        yield


@lru_cache(maxsize=1)
def _patterns() -> tuple[re.Pattern[str], dict[str, tuple[re.Pattern[str], ...]]]:
    """The detectors' own patterns: (any of KeywordDetector's words, {each other detector:
    its patterns, made to match at every line of a whole text as on each line alone})."""
    from detect_secrets.plugins import keyword
    from detect_secrets.plugins.base import RegexBasedDetector
    from detect_secrets.settings import get_plugins

    words = re.compile("|".join(keyword.DENYLIST), re.IGNORECASE)
    others = {}
    with _settings():
        for plugin in get_plugins():
            if isinstance(plugin, RegexBasedDetector) and type(plugin).__name__ != "KeywordDetector":
                others[type(plugin).__name__] = tuple(
                    re.compile(p.pattern, p.flags | re.MULTILINE) for p in plugin.denylist
                )
    return words, others


def _may_flag(text: str) -> list[str]:
    """The detectors that could flag `text`: those whose own pattern matches in it, and
    KeywordDetector where one of its words appears (it also reads files as configuration,
    whose parsed lines keep their keys but not their layout)."""
    words, others = _patterns()
    hits = [name for name, pats in others.items() if any(p.search(text) for p in pats)]
    return hits + ["KeywordDetector"] if words.search(text) else hits


def _allowlisted(text: str, start: int, end: int) -> bool:
    """Whether the lines from `start` to `end` carry detect-secrets' allowlist marker."""
    a, b = text.rfind("\n", 0, start) + 1, text.find("\n", end)
    return bool(_ALLOWLISTED.search(text[a : None if b < 0 else b]))


def _document(text: str) -> Any:
    """The JSON or YAML document `text` holds, or None."""
    import yaml

    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        pass
    try:
        return yaml.safe_load(text)
    except (yaml.YAMLError, ValueError, RecursionError):
        return None


def signature_kinds(text: str) -> list[str]:
    """The TOKENS and DOCUMENTS `text` holds (one on an allowlisted line does not count)."""
    out = [
        kind
        for kind, pattern in TOKENS
        if any(not _allowlisted(text, m.start(), m.end()) for m in re.finditer(pattern, text, re.MULTILINE))
    ]
    candidates = [(kind, check) for kind, hint, check in DOCUMENTS if hint.search(text)]
    if candidates and len(text) <= MAX_PARSE_BYTES:
        doc = _document(text)
        for kind, check in candidates:
            secret = check(doc)
            where = text.find(secret) if secret else -1
            if secret and not (where >= 0 and _allowlisted(text, where, where + len(secret))):
                out.append(kind)
    return out


def archive_kind(head: bytes) -> str | None:
    """'zip', 'tar', 'gzip'... when a file starting with `head` (its first 512 bytes or
    more) is an archive or a compressed stream, else None."""
    if head[257:262] == b"ustar":
        return "tar"
    if head.startswith(b"BZh") and head[4:10] == b"1AY&SY":
        return "bzip2"
    return next((kind for magic, kind in ARCHIVES if head.startswith(magic)), None)


def _detect_secrets_kinds(name: str, text: str, data: bytes, path: Path | None, binary: bool) -> list[str]:
    """What detect-secrets finds in a file called `name` (at `path`, or only in memory, as a
    file inside an archive is) whose content is `data`, read as `text`."""
    detectors = _may_flag(text)
    if not detectors:
        return []
    from detect_secrets import SecretsCollection
    from detect_secrets.core.scan import scan_line

    with _settings(detectors):  # the same verdict as all of them: no other can match
        if binary:
            # detect-secrets skips a file that is not text; its line detectors still judge
            # the text a binary file carries (a key appended to an image).
            return sorted({s.type for line in text.splitlines() if _may_flag(line) for s in scan_line(line)})
        found = SecretsCollection()
        if path is not None:
            found.scan_file(str(path))
        else:  # detect-secrets reads files by name (and parses them by their extension)
            with tempfile.TemporaryDirectory(prefix="alchemist-scan-") as private:
                copy = Path(private) / _file_name(name)
                copy.write_bytes(data)
                found.scan_file(str(copy))
    return sorted({s.type for name in found.files for s in found[name]})


def _is_text(data: bytes) -> bool:
    try:
        data.decode()
    except UnicodeDecodeError:
        return False
    return True


def _file_name(name: str) -> str:
    """A safe file name for the file inside an archive called `name` (its last part)."""
    base = "".join(
        c if c.isprintable() and c not in "/\\" else "_" for c in name.rstrip("/").rsplit("/", 1)[-1]
    )[-100:]
    return base if base.strip(".") else "file"


def _content_kinds(name: str, data: bytes, path: Path | None = None) -> list[str]:
    """The kinds of secret the content `data` of a file called `name` holds. The text of a file
    that is not UTF-8 is its runs of printable ASCII (a token or key is one), not the whole
    file decoded: the detectors' patterns take seconds on megabytes of binary (a tensor)."""
    binary = not _is_text(data)
    text = b"\n".join(_TEXT_RUNS.findall(data)).decode("ascii") if binary else data.decode()
    return _detect_secrets_kinds(name, text, data, path, binary) + signature_kinds(text)


class _Unjudged(Exception):
    """An archive the scan cannot judge; the message completes 'it is a zip archive ...'."""


class _Budget:
    """What is left of one archive's bounds (MAX_ARCHIVE_*), over all its levels."""

    def __init__(self) -> None:
        self.members, self.bytes = MAX_ARCHIVE_MEMBERS, MAX_ARCHIVE_BYTES

    def take(self, members: int = 0, nbytes: int = 0) -> None:
        self.members -= members
        self.bytes -= nbytes
        if self.members < 0:
            raise _Unjudged(f"too large to scan (more than {MAX_ARCHIVE_MEMBERS} files)")
        if self.bytes < 0:
            raise _Unjudged(f"too large to scan (more than {MAX_ARCHIVE_BYTES >> 20} MiB to read)")


class _Counted:
    """A file whose reads (not its seeks) are taken from the budget; `head` was read before."""

    def __init__(self, f: Any, budget: _Budget, head: bytes = b"") -> None:
        self.f, self.budget, self.head = f, budget, head

    def read(self, n: int | None = -1) -> bytes:
        if n is None or n < 0:
            n = max(self.budget.bytes, 0) + 1  # never unbounded
        out, self.head = self.head[:n], self.head[n:]
        if len(out) < n:
            out += self.f.read(n - len(out))
        self.budget.take(nbytes=len(out))
        return out

    def seek(self, *args: int) -> int:
        return self.f.seek(*args)

    def tell(self) -> int:
        return self.f.tell()


Found = tuple[tuple[str, ...], list[str]]  # (the path of the file inside, the kinds it holds)
UNOPENED = ("zstd", "7z", "rar")  # archives the standard library cannot read


def _shown(where: tuple[str, ...]) -> str:
    """'c.pem in b/inner.zip' for the file c.pem inside b/inner.zip: printable, one line."""
    return " in ".join("".join(c if c.isprintable() else "?" for c in w)[:200] for w in reversed(where))


def _member(where: tuple[str, ...], read: Any, size: int | None, depth: int, budget: _Budget) -> Found | None:
    """Judge the file inside an archive at `where` (of `size` bytes, None when unknown) as the
    same file outside would be; `read(n)` gives its first n bytes. A nested archive is opened
    (to MAX_ARCHIVE_DEPTH); a file over MAX_SCAN_BYTES is data, not read beyond its head."""
    big = size is not None and size > MAX_SCAN_BYTES
    try:
        data = read(512 if big else MAX_SCAN_BYTES + 1)
    except UNREADABLE:
        raise _Unjudged(f"that cannot be scanned ({_shown(where)} cannot be read)") from None
    inner = archive_kind(data[:512])
    big = big or len(data) > MAX_SCAN_BYTES
    if inner is None:
        kinds = [] if big else _content_kinds(where[-1], data)
        return (where, kinds) if kinds else None
    if inner in UNOPENED:
        raise _Unjudged(f"that cannot be scanned ({_shown(where)} is a {inner} archive)")
    if depth >= MAX_ARCHIVE_DEPTH:
        raise _Unjudged(f"too deeply nested to scan ({_shown(where)} is an archive {depth} levels down)")
    if big:
        raise _Unjudged(
            f"too large to scan ({_shown(where)} is a {inner} archive over {MAX_SCAN_BYTES >> 20} MiB)"
        )
    try:
        return _archive(io.BytesIO(data), inner, where[-1], where, depth + 1, budget)
    except UNREADABLE:
        raise _Unjudged(f"that cannot be scanned ({_shown(where)} cannot be read)") from None


def _archive(
    f: Any, kind: str, name: str, where: tuple[str, ...], depth: int, budget: _Budget
) -> Found | None:
    """The first file inside the archive `f` (of `kind`, called `name`, at `where` inside the
    archives above it) that holds a secret, or None."""
    if kind == "zip":
        return _zip(f, where, depth, budget)
    if kind == "tar":  # seekable: the data of a file not read is skipped, not read
        # type: ignore: typeshed's _Fileobj also asks for write() and close(), which a TarFile
        # reading a fileobj it was given never calls.
        tar = tarfile.open(fileobj=_Counted(f, budget), mode="r:")  # type: ignore[call-overload]
        return _tar(tar, where, depth, budget)
    stream = STREAMS[kind](f)
    head = stream.read(512)
    counted = _Counted(stream, budget, head)
    if archive_kind(head) == "tar":  # a .tar.gz: one archive, read in order
        tar = tarfile.open(fileobj=counted, mode="r|")  # type: ignore[call-overload]  # as above
        return _tar(tar, where, depth, budget)
    stem = name.rstrip("/").rsplit("/", 1)[-1]  # one compressed file: notes.txt.gz -> notes.txt
    stem = stem.rsplit(".", 1)[0] if "." in stem.lstrip(".") else stem
    return _member((*where, stem), counted.read, None, depth, budget)


def _tar(tar: tarfile.TarFile, where: tuple[str, ...], depth: int, budget: _Budget) -> Found | None:
    for entry in tar:
        budget.take(members=1)
        if entry.isfile():
            member = tar.extractfile(entry)
            assert member is not None  # extractfile gives None only for what is not a file
            found = _member((*where, entry.name), member.read, entry.size, depth, budget)
            if found:
                return found
    return None


def _zip_entries(f: Any) -> int | None:
    """The number of entries a zip's end record declares, read before its whole directory."""
    end = getattr(zipfile, "_EndRecData", None)  # zipfile's own reader of that record
    record = end(f) if end else None
    return record[getattr(zipfile, "_ECD_ENTRIES_TOTAL", 4)] if record else None


def _zip_read(z: zipfile.ZipFile, info: zipfile.ZipInfo, budget: _Budget, n: int) -> bytes:
    with z.open(info) as member:
        data = member.read(n)  # zipfile stops at the size the directory declares
    budget.take(nbytes=len(data))
    return data


def _zip(f: Any, where: tuple[str, ...], depth: int, budget: _Budget) -> Found | None:
    """A zip is judged from its directory before anything is decompressed: its entries,
    encryption and the bytes its files would take to read."""
    entries = _zip_entries(f)
    budget.take(members=entries or 0)
    z = zipfile.ZipFile(f)
    if entries is None:
        budget.take(members=len(z.infolist()))
    files = [i for i in z.infolist() if not i.is_dir()]
    locked = next((i for i in files if i.flag_bits & 0x1), None)
    if locked is not None:
        raise _Unjudged(f"that cannot be scanned ({_shown((*where, locked.filename))} is encrypted)")
    # zipfile decompresses a bzip2 or LZMA file's chunks whole (4 KB of bzip2 can be gigabytes)
    unbounded = next((i for i in files if i.compress_type in (zipfile.ZIP_BZIP2, zipfile.ZIP_LZMA)), None)
    if unbounded is not None:
        raise _Unjudged(
            f"that cannot be scanned ({_shown((*where, unbounded.filename))} is "
            "compressed with bzip2 or LZMA, which the scan does not decompress in a "
            "zip)"
        )
    if sum(512 if i.file_size > MAX_SCAN_BYTES else i.file_size for i in files) > budget.bytes:
        budget.take(nbytes=budget.bytes + 1)
    for info in files:
        found = _member(
            (*where, info.filename),
            lambda n, i=info: _zip_read(z, i, budget, n),
            info.file_size,
            depth,
            budget,
        )
        if found:
            return found
    return None


def _archive_verdict(f: Any, kind: str, name: str) -> str | None:
    """Why the archive `f` (of `kind`, called `name`) must not ship, or None."""
    if kind in UNOPENED:
        return f"it is a {kind} archive, which the scan cannot open (it reads zip, tar, gzip, bzip2 and xz)"
    try:
        found = _archive(f, kind, name, (), 1, _Budget())
    except _Unjudged as e:
        return f"it is a {kind} archive {e}"
    except UNREADABLE:
        return f"it is a {kind} archive that cannot be scanned (it cannot be read)"
    if found is None:
        return None
    where, kinds = found
    return f"it holds {', '.join(kinds)} in {_shown(where)} inside the {kind} archive"


def why_held_back(path: Path) -> str | None:
    """Why the file at `path` must not ship (what it holds, or in which file inside an archive,
    or that an archive cannot be judged), or None. Judged by content, whatever its name."""
    path = Path(path)
    try:
        with open(path, "rb") as f:
            head = f.read(512)
            kind = archive_kind(head)
            if kind is not None:
                f.seek(0)
                return _archive_verdict(f, kind, path.name)
            data = head + f.read(MAX_SCAN_BYTES + 1 - len(head))
    except OSError:
        return None
    if len(data) > MAX_SCAN_BYTES:
        return None
    kinds = _content_kinds(path.name, data, path)
    return f"it holds {', '.join(kinds)}" if kinds else None


def flagged_files(root: Path, files: Iterable[str]) -> dict[str, str]:
    """{file: why it is held back, e.g. 'it holds Private Key'} for each of `files` (relative
    to root) that must not ship (why_held_back)."""
    out = {}
    for rel in files:
        why = why_held_back(Path(root) / rel)
        if why is not None:
            out[rel] = why
    return out


# `env:` names that hold secrets by convention (HF_TOKEN, GITHUB_TOKEN, OPENAI_API_KEY,
# AWS_SECRET_ACCESS_KEY, DB_PASSWORD...); a name ending in _FILE, _PATH or _DIR names where a
# secret lies, not the secret.
SECRET_NAME = re.compile(
    r"(^|_)(TOKEN|SECRET|PASSWORD|PASSWD|PASSPHRASE|API_?KEY|ACCESS_KEY|"
    r"SECRET_ACCESS_KEY|SECRET_KEY|PRIVATE_KEY|AUTH_KEY|CREDENTIALS?)$",
    re.IGNORECASE,
)


def value_looks_secret(name: str, value: str) -> str | None:
    """Why `NAME=value` (as in an env file) looks like a secret: the kinds detect-secrets
    and TOKENS or DOCUMENTS see in it, or a name that holds secrets by convention; else None."""
    if not value:
        return None
    kinds: list[str] = []
    lines = (f'{name}="{value}"', f"{name}={value}")
    detectors = _may_flag("\n".join(lines)) if "\n" not in value else []
    if detectors:
        from detect_secrets.core.scan import scan_line

        with _settings(detectors):
            kinds = sorted({s.type for line in lines for s in scan_line(line)})
    kinds += [k for k in signature_kinds(value) if k not in kinds]
    if not kinds and SECRET_NAME.search(name):
        kinds = ["a name that holds a secret by convention"]
    return ", ".join(kinds) or None
