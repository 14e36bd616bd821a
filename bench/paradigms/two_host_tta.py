"""Experiment 3: time to a target accuracy for sync, async, bmuf and easgd on two hosts
joined by a 100 Mbit/s link, with a model of about a million parameters.

    .venv/bin/python bench/paradigms/two_host_tta.py [--epochs 6] [--rate 100]

Two network namespaces (tests/netns.py) with a token-bucket limit on each host's
egress; one worker per host (nodes: 2), the parameter server (async) in host 0. The task is
`synthetic` (8 features, 8192 samples) with an MLP of ~1M parameters (8-991-991-10), batch
64 per worker, lr 0.02, momentum 0.9 for every algorithm; bmuf and easgd exchange every
tau = 8 steps (bmuf: block momentum 1 - 1/N = 0.5, Nesterov, block lr 1; easgd: alpha =
0.9 / N = 0.45, the paper's beta = 0.9). Time runs from the workers' start; accuracy is rank
0's at each epoch end (the global model for bmuf, the centre for easgd). Needs root.

Writes bench/results/paradigms/two_host_tta.{md,png}.
"""

from __future__ import annotations

import argparse
import subprocess
import sys

from common import curve, figure, home, run_job, save_figure, time_to, write_markdown

from tests.netns import Hosts, NetnsScheduler, unavailable

TASK = {"builtin": "synthetic",
        "synthetic": {"params": 1_000_000, "samples": 8192, "features": 8}}
TARGET = 0.82
ALGOS = {
    "sync": {"name": "sync"},
    "async": {"name": "async"},
    "bmuf": {"name": "bmuf", "tau": 8},
    "easgd": {"name": "easgd", "tau": 8, "alpha": 0.45},
}


def job(name: str, algo: dict, epochs: float) -> dict:
    return dict(name=f"tta-{name}", task=TASK, nodes=2, procs_per_node=1, algorithm=algo,
                hyper=dict(batch_size=64, lr=0.02, momentum=0.9, epochs=epochs, seed=0),
                checkpoint={"every_steps": 1_000_000}, data={"path": "data"}, max_restarts=0)


def link_mbit(hosts: Hosts, megabytes: int = 4) -> float:
    """Measure the link once: host 0 sends `megabytes` to host 1."""
    recv = ("import socket,time;s=socket.socket();s.bind(('%s',5001));s.listen();"
            "c,_=s.accept();n=0;t=None\n"
            "while True:\n b=c.recv(65536)\n if not b: break\n"
            " t=t or time.perf_counter();n+=len(b)\n"
            "print(n*8/(time.perf_counter()-t)/1e6)") % hosts[1].addr
    send = ("import socket,time\nfor i in range(100):\n try: s=socket.create_connection("
            "('%s',5001));break\n except OSError: time.sleep(0.05)\n"
            "s.sendall(b'x'*%d);s.close()") % (hosts[1].addr, megabytes * 1_000_000)
    rx = subprocess.Popen([*hosts[1].exec_prefix, sys.executable, "-c", recv],
                          stdout=subprocess.PIPE, text=True)
    subprocess.run([*hosts[0].exec_prefix, sys.executable, "-c", send], check=True, timeout=120)
    return float(rx.communicate(timeout=120)[0])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=float, default=6)
    ap.add_argument("--rate", type=float, default=100, help="link limit, Mbit/s")
    ap.add_argument("--only", nargs="*", default=list(ALGOS), help="subset of algorithms")
    args = ap.parse_args()
    reason = unavailable()
    if reason:
        sys.exit(f"two_host_tta: {reason}")
    root = home("two_host_tta")
    out = {}
    with Hosts(2, rate_mbit=args.rate) as hosts:
        measured = link_mbit(hosts)
        print(f"link: limit {args.rate:g} Mbit/s, measured {measured:.1f} Mbit/s", flush=True)
        sched = NetnsScheduler(root, hosts)
        for name in args.only:
            out[name] = o = run_job(root, job(name, ALGOS[name], args.epochs), scheduler=sched)
            c = curve(o)
            print(f"{name:>6}: accuracy {o['result']['test_accuracy']:.4f}, time to {TARGET}: "
                  f"{time_to(c, TARGET)}, wall {o['result']['wall_s']:.1f} s", flush=True)

    base = time_to(curve(out["sync"]), TARGET) if "sync" in out else None
    sync_acc = out["sync"]["result"]["test_accuracy"] if "sync" in out else None
    rows = []
    for name, o in out.items():
        res, c = o["result"], curve(o)
        t = time_to(c, TARGET)
        w0 = o["workers"][0]
        rows.append([name, res["test_accuracy"],
                     None if sync_acc is None else round(100 * (res["test_accuracy"] - sync_acc), 2),
                     t, None if (t is None or base is None) else round(base / t, 2),
                     round(res["communication"]["sent_bytes"] / res["steps"]),
                     round(w0["train_steps"] / w0["train_s"], 2), round(res["wall_s"], 1)])
    write_markdown(
        "two_host_tta", f"Time to {TARGET} accuracy on two hosts over a {args.rate:g} Mbit/s link",
        f"Two network-namespace hosts, one worker each, link limited to {args.rate:g} Mbit/s "
        f"per direction (measured {measured:.1f} Mbit/s); `synthetic` with a "
        f"~1M-parameter MLP, batch 64 per worker, lr 0.02, momentum 0.9, {args.epochs:g} "
        "epochs; bmuf and easgd exchange every 8 steps.",
        ["algorithm", "final accuracy", "vs sync (points)", f"time to {TARGET} (s)",
         "speed-up vs sync", "rank 0 bytes sent/step", "rank 0 steps/s", "wall (s)"], rows,
        [f"time to {TARGET}: wall seconds from the workers' start to the first end-of-epoch "
         "evaluation at or above it (epoch granularity)",
         "bytes: ring all-reduce accounting for collectives, bytes on the wire for the "
         "parameter server"])

    fig, ax = figure(1, 2, (12, 4.5))
    for name, o in out.items():
        c = curve(o)
        ax[0][0].plot([p["wall_s"] for p in c], [p["accuracy"] for p in c], marker="o", label=name)
    ax[0][0].axhline(TARGET, color="grey", ls=":", lw=1)
    ax[0][0].set(xlabel="wall time (s)", ylabel="test accuracy",
                 title=f"accuracy against time, {args.rate:g} Mbit/s link")
    ax[0][0].legend()
    names = list(out)
    ax[0][1].bar(names, [time_to(curve(out[n]), TARGET) or 0 for n in names])
    ax[0][1].set(ylabel="seconds", title=f"time to {TARGET} (0 = not reached)")
    save_figure(fig, "two_host_tta")


if __name__ == "__main__":
    main()
