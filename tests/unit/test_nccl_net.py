"""NCCL's library names for each NCCL_NET_PLUGIN value, as NCCL 2.29.7 derives them. (A worker
finding real compiled plugins, or stopping, is tests/integration/test_nccl_net_plugins.py.)"""

from __future__ import annotations

from alchemist_jobs.runtime import nccl_net


def test_nccls_library_names_for_each_nccl_net_plugin_value():
    # src/plugin/net.cc initPluginLibsOnceFunc and src/plugin/plugin_open.cc openPluginLib
    assert nccl_net.library_names(None) == ["libnccl-net.so"]
    assert nccl_net.library_names("ofi") == ["ofi", "libnccl-net-ofi.so"]
    assert nccl_net.library_names("none") == []
    assert nccl_net.library_names("libfoo.so") == ["libfoo.so"]
    assert nccl_net.library_names("/opt/x/libnccl-net-ofi.so") == ["/opt/x/libnccl-net-ofi.so"]
    assert nccl_net.library_names("a,b") == ["a", "libnccl-net-a.so", "b", "libnccl-net-b.so"]
