"""Every class of bad stack config stops the program with one line naming key, value and what is accepted.

The tests here render a stack, start a process or take over a second; the in-process ones
are in `tests/unit/infra/test_infra_config.py`."""

from __future__ import annotations

import json
import subprocess
import sys

from infra_helpers import REPO
from test_infra_config import BAD, engine_config

# Runs the real entry point (infra/__main__.py) under Pulumi's mocks for each bad config in one
# process: a config error raises before any registration, so the mocks stay clean between cases.
PROGRAM = r"""
import json, runpy, sys
import pulumi
from infra.render import Recorder
rec = Recorder()
pulumi.runtime.set_mocks(rec.mocks, project="alchemist", stack="aws-us-west-2", preview=False, monitor=rec.monitor)
results = []
for config in json.loads(sys.stdin.read()):
    pulumi.runtime.set_all_config(config, [])
    try:
        runpy.run_path("infra/__main__.py", run_name="__main__")
        results.append({"error": None, "registered": len(rec.resources)})
    except pulumi.RunError as e:
        results.append({"error": str(e), "registered": len(rec.resources)})
print(json.dumps(results))
"""


def test_program_stops_before_registering_anything():
    cases = list(BAD)
    configs = [engine_config(BAD[c][0], BAD[c][1]) for c in cases]
    proc = subprocess.run([sys.executable, "-c", PROGRAM], input=json.dumps(configs), cwd=REPO,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads(proc.stdout)
    for case, result in zip(cases, results):
        assert result["registered"] == 0, f"{case}: resources were registered"
        assert result["error"] and result["error"].startswith(
            f"stacks/Pulumi.aws-us-west-2.yaml: {BAD[case][2]}"
        ), (case, result)
        assert "\n" not in result["error"]


def test_render_reports_a_bad_config_with_exit_2(tmp_path):
    from infra_helpers import STACKS, render

    result = render(STACKS / "Pulumi.dev.yaml", sets={"alchemist:podSecurity": "open"})
    assert result["_returncode"] == 2 and result["resources"] == []
    assert result["error"] == ("stacks/Pulumi.dev.yaml: alchemist:podSecurity = 'open' is not accepted; "
                               "accepted: 'restricted', 'baseline' or 'privileged'")  # fmt: skip
