"""NCCL's network plugin, looked for the way NCCL looks for it, before NCCL starts.

Without a plugin NCCL silently falls back to TCP, many times slower on a fabric's nodes. A
worker whose pod asks for one (`ALCHEMIST_NCCL_NET_PLUGIN=required`: GPU pods of stacks with
`gpu.fabric`) finds it first, stops with one line when it is missing, and pins `NCCL_NET` to the
plugin's own net name so NCCL fails loudly rather than falls back. The search follows NCCL
2.29.7's src/plugin/net.cc and plugin_open.cc (library names, `ncclNetPlugin_v11`..`_v6`
symbols); the net's name is read from the plugin because plugins change it between versions.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass

from alchemist_jobs import environment as E
from alchemist_jobs.runtime.devices import DeviceError

NET_VERSIONS = (11, 10, 9, 8, 7, 6)  # ncclNetVersion in nccl src/plugin/net.cc, in order
DEFAULT_LIBRARY = "libnccl-net.so"


class NetPluginError(DeviceError):
    """The pod needs NCCL's network plugin and the image has none; one line, no traceback."""


@dataclass(frozen=True)
class NetPlugin:
    name: str  # the net's name, what NCCL_NET must equal
    version: int  # the ncclNetPlugin_v<N> symbol found
    library: str  # the name dlopen resolved (as NCCL would log it)


def library_names(setting: str | None) -> list[str]:
    """The names NCCL dlopens, in order, for a value of NCCL_NET_PLUGIN (None: unset)."""
    if setting is None:
        return [DEFAULT_LIBRARY]
    if setting.strip().lower() == "none":
        return []
    names: list[str] = []
    for entry in (e for e in setting.split(",") if e):
        names.append(entry)
        library_like = entry.startswith("lib") and entry.endswith(".so")
        if "/" not in entry and not library_like:
            names.append(f"libnccl-net-{entry}.so")
    return names


def find(environ: Mapping[str, str] | None = None) -> tuple[NetPlugin | None, list[str]]:
    """The plugin NCCL would load, and for each name tried without success, why."""
    env = os.environ if environ is None else environ
    tried: list[str] = []
    for lib in library_names(env.get("NCCL_NET_PLUGIN")):
        try:
            handle = ctypes.CDLL(lib, mode=os.RTLD_NOW | os.RTLD_LOCAL)
        except OSError as e:
            # ENOENT as NCCL tells it (plugin_open.cc tryOpenLib): the message names this
            # library; a missing dependency of a library that is there says more.
            text = str(e)
            missing = text.startswith(f"{lib}:") and "No such file or directory" in text
            tried.append(f"{lib}: not found" if missing else f"{lib}: {text.removeprefix(lib + ': ')}")
            continue
        for version in NET_VERSIONS:
            try:
                symbol = ctypes.c_char_p.in_dll(handle, f"ncclNetPlugin_v{version}")
            except ValueError:
                continue
            name = (symbol.value or b"").decode(errors="replace")
            return NetPlugin(name=name, version=version, library=lib), tried
        tried.append(f"{lib}: no ncclNetPlugin_v{NET_VERSIONS[-1]}..v{NET_VERSIONS[0]} symbol")
    return None, tried


def require(environ: MutableMapping[str, str] | None = None) -> NetPlugin | None:
    """Where the pod asks for a plugin: find it and pin NCCL_NET to it, or NetPluginError.
    A spec that sets NCCL_NET_PLUGIN=none chose NCCL's internal nets: nothing to check."""
    env = os.environ if environ is None else environ
    if E.NCCL_NET_PLUGIN.get(env) != "required":
        return None
    if env.get("NCCL_NET_PLUGIN", "").strip().lower() == "none":
        return None
    plugin, tried = find(env)
    if plugin is None:
        raise NetPluginError(
            "gpu.fabric: this stack's GPU nodes have a network fabric that NCCL reaches through a "
            f"net plugin, but the image has none ({'; '.join(tried) or 'nothing to try'}), so NCCL "
            "would use TCP sockets; use an image built with the fabric's libraries "
            "(docs/images.md), or set env.NCCL_NET_PLUGIN=none in the spec to run over TCP"
        )
    env.setdefault("NCCL_NET", plugin.name)
    return plugin
