"""The dashboard's one adapter onto the scheduler interface: every call into
alchemist_jobs.scheduler, stacks, local_backend and kubernetes/ is made in this file, and
every answer leaves it as a model of alchemist_jobs/ui/models.py."""

from __future__ import annotations

import functools
import math
import os
import pwd
import re
import threading
from pathlib import Path
from typing import Any
from urllib.parse import quote

import yaml

from alchemist_jobs.errors import UserError
from alchemist_jobs.processes import alive
from alchemist_jobs.rundir import RunDir, check_home, default_root, read_json, runs_root
from alchemist_jobs.ui import models as m
from alchemist_jobs.ui.series import SeriesBook, scrape_rank0

LOCAL = "local"
# Run ids as new_run_id makes them (name-YYYYmmdd-HHMMSS-hex), or a prefix of one, like the
# CLI takes: no '/', '.', glob characters or upper case, so no id reaches outside the runs.
RUN_ID = re.compile(r"[a-z0-9](?:[-a-z0-9]{0,78})")
# Spec `env` keys whose values are shown as "***": secrets belong in `secret_env`, but a
# spec written before it existed may still carry one in `env`.
_SECRET_KEY = re.compile(r"TOKEN|SECRET|PASSW|KEY|CREDENTIAL|AUTH", re.IGNORECASE)
LOG_CHUNK_BYTES = 256 * 1024


class UnknownStack(LookupError):
    """A stack this dashboard does not serve (404)."""


def check_run_id(run_id: str) -> str:
    if not RUN_ID.fullmatch(run_id):
        shown = run_id if len(run_id) <= 80 else run_id[:80] + "..."
        raise UserError(
            f"run id {shown!r}: not a run id; accepted: lower-case letters, digits "
            "and '-' (a run id such as digits-20260101-120000-ab12, or a unique "
            "prefix of one)"
        )
    return run_id


def _finite(x: Any) -> float | None:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def _int(x: Any) -> int | None:
    v = _finite(x)
    return None if v is None else int(v)


class Stack:
    """One stack the dashboard serves: its facts and its scheduler."""

    def __init__(self, name: str, scheduler: Any, facts: m.StackFacts, local_root: Path | None):
        self.name, self.scheduler, self.facts, self.local_root = name, scheduler, facts, local_root

    @property
    def is_local(self) -> bool:
        return self.local_root is not None


class Backends:
    """Every stack `alchemist ui` was given, by name."""

    def __init__(
        self,
        stacks: list[str],
        home: Path | None = None,
        outputs: dict[str, Path] | None = None,
        spec_dir: Path | None = None,
        in_cluster: bool = False,
        local_links: m.Links | None = None,
    ):
        from alchemist_jobs.stacks import cluster_scheduler, local_scheduler, resolve

        outputs = outputs or {}
        unknown = sorted(set(outputs) - set(stacks))
        if unknown:
            raise UserError(
                f"--outputs {unknown[0]}=...: stack {unknown[0]!r} is not served; "
                f"accepted: one of --stack {', '.join(stacks)}"
            )
        self.spec_dir = Path(spec_dir or Path.cwd()).resolve()
        self.stacks: dict[str, Stack] = {}
        for name in dict.fromkeys(stacks):  # in order, once each
            if name == LOCAL:
                if home:  # checked before it is resolved: a symlink loop is one line too
                    check_home(Path(home).expanduser())
                root = Path(home).expanduser().resolve() if home else default_root()
                self.stacks[name] = Stack(name, local_scheduler(root), _local_facts(root, local_links), root)
                continue
            if in_cluster:
                from alchemist_jobs.ui.incluster import in_cluster_output

                out = in_cluster_output(name, outputs.get(name))
            else:  # one line and exit 2 if it is not a stack
                out = resolve(name, outputs.get(name))
            self.stacks[out.stack] = Stack(out.stack, cluster_scheduler(out), _cluster_facts(out), None)
        self.series = SeriesBook()
        self._ended: dict[str, m.RunSummary] = {}  # local runs that ended, by id
        self._live: dict[str, tuple[Any, threading.Thread]] = {}  # local runs started here
        self._lock = threading.Lock()

    def stack(self, name: str) -> Stack:
        s = self.stacks.get(name)
        if s is None:
            raise UnknownStack(
                f"stack {name!r}: not served by this dashboard; accepted: {', '.join(self.stacks)}"
            )
        return s

    # -- runs --------------------------------------------------------------------------------

    def runs(self, stack: str) -> list[m.RunSummary]:
        s = self.stack(stack)
        if not s.is_local:
            return [self._summary(s, st) for st in s.scheduler.list()]
        return self._local_runs(s)

    def warm(self) -> None:
        """Read every ended local run's summary once (a home may hold thousands)."""
        for s in self.stacks.values():
            if s.is_local:
                self._local_runs(s)

    def _local_runs(self, s: Stack) -> list[m.RunSummary]:
        """Every run under the local root. A run that ended (succeeded, failed, cancelled)
        never changes again, so its summary is read once and kept: the page polls the list
        every second or two, and a home holds thousands of runs."""
        from alchemist_jobs.scheduler import CANCELLED, FAILED, SUCCEEDED, decode_all

        base = runs_root(s.local_root)
        try:
            names = os.listdir(base)
        except FileNotFoundError:
            return []
        # Many unknown runs (the first request, or runs added by others): one listing, which
        # takes ended runs from the index of ended runs, beats one status read per run.
        listed = {}
        if sum(1 for name in names if name not in self._ended) > 32:
            listed = {doc["run_id"]: doc for doc in decode_all(r.json_text for r in s.scheduler.list_json())}
        out = []
        for name in names:
            summary = self._ended.get(name)
            if summary is None:
                doc = listed.get(name)
                if doc is None:
                    if not os.path.exists(os.path.join(base, name, "spec.yaml")):
                        continue
                    try:
                        doc = s.scheduler.status(name).as_json()
                    except UserError:  # removed between the listing and the read
                        continue
                summary = summary_of(doc, _owner(doc["run_dir"]))
                if doc["state"] in (SUCCEEDED, FAILED, CANCELLED):
                    self._ended[name] = summary
            out.append(summary)
        return out

    def detail(self, stack: str, run_id: str) -> m.RunDetail:
        s = self.stack(stack)
        st = s.scheduler.status(check_run_id(run_id))
        out = m.RunDetail(**self._summary(s, st).model_dump())
        out.links = self._links(s, st.name, st.run_id)
        out.requirements = st.requirements
        if s.is_local:
            run = RunDir(Path(st.run_dir))
            out.spec = _redact(yaml.safe_load(run.spec.read_text()) or {})
            out.ranks = _local_ranks(run, st)
            out.servers = _local_servers(run, st)
            out.checkpoints = _checkpoints(run.checkpoints)
            out.result = _dump(st.result) or None
            if st.failure:
                out.failed_rank = st.failure.get("rank")
                out.failure_lines = list(st.failure.get("lines") or [])
        else:
            out.ranks = _cluster_ranks(st)
        if out.accuracy is None:
            # The header agrees with the accuracy chart: its latest point where the result
            # names no test accuracy (a running run, a script's own loop).
            accuracy = self._series(s, st)["accuracy"]
            out.accuracy = accuracy[-1][1] if accuracy else None
        return out

    def metrics(self, stack: str, run_id: str) -> m.RunMetrics:
        s = self.stack(stack)
        st = s.scheduler.status(check_run_id(run_id))
        return m.RunMetrics(stack=s.name, run_id=st.run_id, **self._series(s, st))

    def _series(self, s: Stack, st: Any) -> dict[str, list[tuple[float, float]]]:
        key = f"{s.name}/{st.run_id}"
        tb_dir = Path(st.run_dir) / "tensorboard" if s.is_local else None
        return self.series.update(key, tb_dir, self._sample(s, st), final=st.finished)

    def _sample(self, s: Stack, st: Any) -> dict[str, float] | None:
        """The run's latest numbers: progress.json and rank 0's /metrics locally, rank 0's
        /metrics through the API server's pod proxy on a cluster."""
        if st.finished and not s.is_local:
            return None
        if s.is_local:
            prog = _dump(st.progress)
            if not st.finished:
                prog.update(scrape_rank0(Path(st.run_dir)) or {})
            elif prog:
                prog.update(_final_communication(Path(st.run_dir)))
            return prog or None
        prog = s.scheduler.progress(st)
        return prog

    def logs(self, stack: str, run_id: str, rank: int, offset: int) -> m.LogChunk:
        s = self.stack(stack)
        if rank < 0:
            raise UserError(f"rank {rank}: accepted: a rank >= 0")
        if offset < 0:
            raise UserError(f"offset {offset}: accepted: an offset >= 0")
        st = s.scheduler.status(check_run_id(run_id))
        offset, chunk, total = (_local_log if s.is_local else _scheduler_log)(s, st, rank, offset)
        shown = chunk.decode(errors="ignore")  # a character cut at the end comes next time
        return m.LogChunk(
            rank=rank,
            offset=offset,
            next_offset=offset + len(shown.encode()),
            text=shown,
            finished=st.finished and offset + len(chunk) >= total,
        )

    def cancel(self, stack: str, run_id: str) -> m.RunSummary:
        s = self.stack(stack)
        st = s.scheduler.cancel(check_run_id(run_id))
        return self._summary(s, st)

    def remove(self, stack: str, run_id: str, force: bool = False) -> m.RunSummary:
        s = self.stack(stack)
        st = s.scheduler.remove(check_run_id(run_id), force=force)
        return self._summary(s, st)

    # -- submit ------------------------------------------------------------------------------

    def check(self, body: m.SpecBody) -> tuple[Stack, Any, Any]:
        """The spec parsed and dry-run exactly as `alchemist run --dry-run` would: one
        UserError line on the first problem, nothing started or written."""
        from alchemist_jobs.spec import parse_spec

        s = self.stack(body.stack)
        source = _source_name(body.filename)
        try:
            raw = yaml.safe_load(body.spec)
        except yaml.YAMLError as e:
            mark = getattr(e, "problem_mark", None)
            where = f" line {mark.line + 1}, column {mark.column + 1}" if mark else ""
            problem = getattr(e, "problem", None) or "not valid YAML"
            raise UserError(f"{source}:{where}: {problem}; accepted: a YAML mapping") from None
        spec = parse_spec({} if raw is None else raw, source, self.spec_dir)
        request = s.scheduler.dryrun(spec, self.spec_dir)
        return s, spec, request

    def checked(self, body: m.SpecBody) -> m.Checked:
        s, spec, request = self.check(body)
        return m.Checked(
            stack=s.name, name=spec.name, workers=spec.world_size, plan=_redact_plan(request.describe())
        )

    def submit(self, body: m.SpecBody) -> m.Submitted:
        s, _spec, request = self.check(body)
        if not s.is_local:
            s.scheduler.schedule(request)
            return m.Submitted(stack=s.name, run_id=request.run_id)
        # A local run's agents are children of a launcher that waits on them, as under
        # `alchemist run`: here a thread of this server. The thread lives as long as the
        # run, because the agents' parent-death signal fires when the thread that started
        # them exits.
        started = threading.Event()
        failure: list[BaseException] = []

        def launch() -> None:
            try:
                handle = s.scheduler.schedule(request)
            except BaseException as e:  # reported to the request below
                failure.append(e)
                started.set()
                return
            with self._lock:
                self._live[request.run_id] = (handle, threading.current_thread())
            started.set()
            try:
                s.scheduler.wait(handle)
            finally:
                with self._lock:
                    self._live.pop(request.run_id, None)

        threading.Thread(target=launch, name=f"run-{request.run_id}", daemon=True).start()
        started.wait()
        if failure:
            raise failure[0]
        return m.Submitted(stack=s.name, run_id=request.run_id)

    def shutdown(self) -> None:
        """Stop the local runs this server started, as Ctrl-C on `alchemist run` does."""
        with self._lock:
            live = list(self._live.values())
        sched = self.stacks[LOCAL].scheduler if LOCAL in self.stacks else None
        for handle, thread in live:
            sched.interrupt(handle)
            thread.join(timeout=60)

    # -- shapes ------------------------------------------------------------------------------

    def _summary(self, s: Stack, st: Any) -> m.RunSummary:
        return summarize(st, local=s.is_local)

    def _links(self, s: Stack, name: str, run_id: str) -> m.Links:
        """The run in TensorBoard (its event files sit under the run's id) and in the job
        drill-down dashboard of monitoring/dashboards.py (uid alchemist-job-drilldown)."""
        mon = s.facts.monitoring
        return m.Links(
            tensorboard=f"{mon.tensorboard.rstrip('/')}/?regexInput={quote(run_id)}#scalars"
            if mon.tensorboard
            else None,
            grafana=f"{mon.grafana.rstrip('/')}/d/alchemist-job-drilldown?"
            f"var-job={quote(name)}&var-run={quote(run_id)}"
            if mon.grafana
            else None,
            prometheus=mon.prometheus,
        )


# --- helpers -----------------------------------------------------------------------------------


def _dump(model: Any) -> dict:
    """A run file's typed model (run_files.Progress, Result) as a plain dict; {} when absent."""
    return {} if model is None else model.model_dump()


def summarize(st: Any, local: bool) -> m.RunSummary:
    """A scheduler's RunStatus as the API's RunSummary."""
    return summary_of(st.as_json(), _owner(st.run_dir) if local else st.extra.get("owner"))


def summary_of(doc: dict[str, Any], owner: str | None) -> m.RunSummary:
    """A run's `--json` document (RunStatus.as_json) as the API's RunSummary."""
    prog, res = doc["progress"] or {}, doc["result"] or {}
    step, total = _int(doc["step"]), _int(doc["total_steps"])
    metrics = {k: v for k, v in _metrics_of(doc).items() if _finite(v) is not None}
    return m.RunSummary(
        stack=doc["stack"],
        run_id=doc["run_id"],
        name=doc["name"],
        state=doc["state"],
        reason=doc["message"],
        owner=owner,
        workers=doc["workers"],
        restarts=doc["restarts"],
        step=step,
        total_steps=total,
        progress=min(1.0, step / total) if step is not None and total else None,
        loss=_finite(res.get("final_loss", prog.get("loss"))),
        samples_per_s=_finite(res.get("samples_per_s", prog.get("samples_per_s"))),
        accuracy=_finite(res.get("test_accuracy", metrics.get("accuracy"))),
        algorithm=doc.get("algorithm"),
        metrics=metrics,
        duration_s=_duration(doc),
        created=_finite(doc["created"]),
        ended=_finite(doc["ended"]),
    )


def _metrics_of(doc: dict[str, Any]) -> dict[str, Any]:
    """A run document's metrics (one indexed before they were kept: from its progress)."""
    if isinstance(doc.get("metrics"), dict):
        return doc["metrics"]
    prog = doc["progress"] or {}
    return dict(prog.get("metrics") or {}) if isinstance(prog.get("metrics"), dict) else {}


def _duration(doc: dict[str, Any]) -> float | None:
    created, ended = _finite(doc["created"]), _finite(doc["ended"])
    if created is not None and ended is not None:
        return max(0.0, ended - created)
    return _finite(doc.get("duration_s"))


def _final_communication(run_dir: Path) -> dict[str, float]:
    """Rank 0's communication seconds at its end, from the counters it left in its record
    (`final_metrics`, as its /metrics said them last): an ended run's chart shows them."""
    final = (read_json(run_dir / "workers" / "rank-0.json") or {}).get("final_metrics") or {}
    seconds = _finite(final.get("alchemist_communication_seconds_total"))
    return {} if seconds is None else {"communication_s": seconds}


def _source_name(filename: str | None) -> str:
    """How errors name the spec: the uploaded file's base name, else `spec`."""
    if not filename:
        return "spec"
    base = re.sub(r"[^A-Za-z0-9_.-]", "_", os.path.basename(filename.replace("\\", "/")))
    return base[:80] or "spec"


def _redact(spec: dict) -> dict:
    env = spec.get("env")
    if isinstance(env, dict):
        spec["env"] = {k: ("***" if _SECRET_KEY.search(str(k)) else v) for k, v in env.items()}
    return spec


def _redact_plan(text: str) -> str:
    """The dry run's text with secret-looking environment values hidden."""
    return re.sub(
        r"\b(\w*(?:TOKEN|SECRET|PASSW|KEY|CREDENTIAL|AUTH)\w*)=('[^']*'|\S+)",
        r"\1=***",
        text,
        flags=re.IGNORECASE,
    )


def _owner(run_dir: str | None) -> str | None:
    try:
        return _user(os.stat(run_dir).st_uid)
    except (KeyError, OSError, TypeError):
        return None


@functools.lru_cache(maxsize=256)
def _user(uid: int) -> str:
    """The user name of `uid` (a home of 10,000 runs has a few owners)."""
    return pwd.getpwuid(uid).pw_name


def _process_state(rec: dict, st: Any) -> str:
    if rec.get("finished"):
        return "finished"
    if st.finished:
        return st.state
    return "running" if alive(rec.get("pid")) else "exited"


def _local_ranks(run: Any, st: Any) -> list[m.RankState]:
    out = []
    for rec in run.worker_records():
        if rec.get("role", "worker") != "worker":
            continue
        state = _process_state(rec, st)
        out.append(
            m.RankState(
                rank=int(rec.get("rank", 0)),
                state=state,
                restarts=int(rec.get("restart", 0)),
                node=str(rec.get("node", "")),
                pid=rec.get("pid"),
                started=_finite(rec.get("started")),
            )
        )
    return out


def _local_servers(run: Any, st: Any) -> list[m.ServerState]:
    """The parameter-server shards (workers/server-<K>.json, written by
    runtime/parameter_server.py), by shard."""
    out = []
    for path in sorted(run.workers.glob("server-*.json")):
        rec = read_json(path) or {}
        if rec.get("role") != "server" or _int(rec.get("shard")) is None:
            continue
        out.append(
            m.ServerState(
                shard=_int(rec["shard"]),
                state=_process_state(rec, st),
                restarts=_int(rec.get("restart")) or 0,
                node=str(rec.get("node", "")),
                pid=_int(rec.get("pid")),
                started=_finite(rec.get("started")),
                updates=_int(rec.get("version")),
            )
        )
    return sorted(out, key=lambda x: x.shard)


def _local_log(s: Stack, st: Any, rank: int, offset: int) -> tuple[int, bytes, int]:
    """(offset, up to LOG_CHUNK_BYTES from it, the log's size), read from the rank's file at
    `offset`: a long log is not reread at every poll."""
    n = st.workers
    if not 0 <= rank < max(n, 1):
        raise UserError(f"rank {rank}: run {st.run_id} has ranks 0..{n - 1}")
    path = Path(st.run_dir) / "logs" / f"rank-{rank}.log"
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if offset > size:  # the log was replaced: start over
                offset = 0
            f.seek(offset)
            return offset, f.read(LOG_CHUNK_BYTES), size
    except FileNotFoundError:  # no line written yet
        return 0, b"", 0


def _scheduler_log(s: Stack, st: Any, rank: int, offset: int) -> tuple[int, bytes, int]:
    """The same from the scheduler's `logs` (a cluster's pod log), which starts at 0."""
    try:
        data = "".join(s.scheduler.logs(st.run_id, rank=rank, follow=False)).encode()
    except UserError as e:
        if "has written no log yet" not in str(e):
            raise
        data = b""
    if offset > len(data):
        offset = 0
    return offset, data[offset : offset + LOG_CHUNK_BYTES], len(data)


def _cluster_ranks(st: Any) -> list[m.RankState]:
    """Each rank with the pod that runs it (several ranks share a pod on a multi-process
    node); a rank whose pod is not there yet waits."""
    from alchemist_jobs.kubernetes.scheduler import rank_pod_index

    pods = st.extra.get("pods") or {}
    nodes, per = st.extra.get("nodes") or 1, st.extra.get("procs_per_node") or 1
    out = []
    for rank in range(min(st.workers, nodes * per)):
        pod = pods.get(rank_pod_index(rank, nodes, per))
        out.append(
            m.RankState(
                rank=rank, state=st.state if pod else "pending", node=str(pod or ""), restarts=st.restarts
            )
        )
    return out


# Checkpoint files as runtime/checkpoint.py names them: `step` (a collective strategy's, one
# for every rank), `rank<N>` (an async worker's own), `server<K>` (a parameter-server shard's).
_CHECKPOINT = re.compile(
    r"(?P<prefix>step|rank(?P<rank>\d+)|server(?P<server>\d+))-"
    r"(?P<step>\d+)\.pt"
)


def _checkpoints(folder: Path) -> list[m.Checkpoint]:
    out = []
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    for name in names:
        found = _CHECKPOINT.fullmatch(name)
        if found is None:  # checksums, partial writes, snapshots
            continue
        try:
            info = (folder / name).stat()
        except OSError:  # removed by the rotation between listing and stat
            continue
        holder = (
            f"rank {found['rank']}"
            if found["rank"] is not None
            else f"server {found['server']}"
            if found["server"] is not None
            else "every rank"
        )
        out.append(
            m.Checkpoint(
                name=name, step=int(found["step"]), holder=holder, bytes=info.st_size, modified=info.st_mtime
            )
        )
    return sorted(out, key=lambda c: (c.step or 0, c.name))


def _local_facts(root: Path, links: m.Links | None) -> m.StackFacts:
    return m.StackFacts(
        name=LOCAL,
        provider=LOCAL,
        gpus_per_node=_local_gpus(),
        shared_fs={"kind": "directory", "mount_path": str(root)},
        monitoring=links or m.Links(),
    )


def _local_gpus() -> int:
    try:
        return len([d for d in os.listdir("/dev") if re.fullmatch(r"nvidia\d+", d)])
    except OSError:
        return 0


def _cluster_facts(out: Any) -> m.StackFacts:
    """Only the named, non-secret fields of the output: never `kubeconfig`, never a token."""
    fs = out.shared_fs
    return m.StackFacts(
        name=out.stack,
        provider=out.provider,
        namespace=out.namespace,
        queue=out.queue,
        gpu_resource=out.gpu.resource,
        gpus_per_node=out.gpu.per_node,
        efa_per_node=out.gpu.efa.per_node if out.gpu.efa else 0,
        shared_fs={
            "kind": fs.kind,
            "mount_path": fs.mount_path,
            "pvc": fs.pvc,
            "uid": str(fs.uid),
            "gid": str(fs.gid),
        },
        images={"train": out.images.train, "interactive": out.images.interactive},
        monitoring=m.Links(
            prometheus=out.monitoring.prometheus_url,
            grafana=out.monitoring.grafana_url,
            tensorboard=out.monitoring.tensorboard_url,
        ),
        eks_cluster=out.eks.cluster_name if out.eks else None,
        region=out.eks.region if out.eks else None,
    )
