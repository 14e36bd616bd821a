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
"""

from __future__ import annotations

import re
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path
from typing import Iterable, Iterator

# detect-secrets' plugin class names (detect_secrets/plugins/*.py, version pinned in the lock).
DETECTORS = (
    "ArtifactoryDetector", "AWSKeyDetector", "AzureStorageKeyDetector", "BasicAuthDetector",
    "DiscordBotTokenDetector", "GitHubTokenDetector", "GitLabTokenDetector", "JwtTokenDetector",
    "KeywordDetector", "MailchimpDetector", "NpmDetector", "OpenAIDetector",
    "PrivateKeyDetector", "PypiTokenDetector", "SendGridDetector", "SlackDetector",
    "SquareOAuthDetector", "StripeDetector", "TelegramBotTokenDetector", "TwilioKeyDetector",
)
# Also left out: the IBM Cloud, Cloudant and SoftLayer detectors, password keywords near a
# vendor's name (KeywordDetector finds the same lines), whose patterns are the slowest.
# detect-secrets' default heuristics that drop false positives (templates, `$VAR` references,
# sequences, UUIDs, lock and binary files) and honour the inline allowlist marker.
FILTERS = (
    "detect_secrets.filters.heuristic.is_lock_file",
    "detect_secrets.filters.heuristic.is_non_text_file",
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
MAX_SCAN_BYTES = 8 << 20  # larger files are data, not code or configuration: not scanned


@contextmanager
def _settings(detectors: Iterable[str] = DETECTORS) -> Iterator[None]:
    from detect_secrets.settings import transient_settings

    with transient_settings({"plugins_used": [{"name": n} for n in detectors],
                             "filters_used": [{"path": f} for f in FILTERS]}):
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
                    re.compile(p.pattern, p.flags | re.MULTILINE) for p in plugin.denylist)
    return words, others


def _may_flag(text: str) -> list[str]:
    """The detectors that could flag `text`: those whose own pattern matches in it, and
    KeywordDetector where one of its words appears (it also reads files as configuration,
    whose parsed lines keep their keys but not their layout)."""
    words, others = _patterns()
    hits = [name for name, pats in others.items() if any(p.search(text) for p in pats)]
    return hits + ["KeywordDetector"] if words.search(text) else hits


def flagged_files(root: Path, files: Iterable[str]) -> dict[str, str]:
    """{file: the kinds of secret found, e.g. 'Private Key'} for each of `files` (relative to
    root) that detect-secrets flags."""
    root = Path(root)
    out: dict[str, str] = {}
    for rel in files:
        try:
            with open(root / rel, "rb") as f:
                data = f.read(MAX_SCAN_BYTES + 1)
        except OSError:
            continue
        detectors = _may_flag(data.decode("utf-8", "replace")) \
            if len(data) <= MAX_SCAN_BYTES else []
        if not detectors:
            continue
        from detect_secrets import SecretsCollection

        with _settings(detectors):  # the same verdict as all of them: no other can match
            found = SecretsCollection()
            found.scan_file(str(root / rel))
        kinds = sorted({s.type for name in found.files for s in found[name]})
        if kinds:
            out[rel] = ", ".join(kinds)
    return out


def value_looks_secret(name: str, value: str) -> str | None:
    """The kind of secret detect-secrets sees in `NAME=value` (as in an env file), or None."""
    lines = (f'{name}="{value}"', f"{name}={value}")
    detectors = _may_flag("\n".join(lines)) if value and "\n" not in value else []
    if not detectors:
        return None
    from detect_secrets.core.scan import scan_line

    with _settings(detectors):
        kinds = sorted({s.type for line in lines for s in scan_line(line)})
    return ", ".join(kinds) or None
