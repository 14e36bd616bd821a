"""The dashboard's one adapter onto the scheduler interface: every call into
alchemist_jobs.scheduler and stacks is made in this file, and every answer leaves it as a
model of alchemist_jobs/ui/models.py. It asks a stack's scheduler what it can do (its
`capabilities`, `read_log`, `placements`, `artifacts`, `sample`), never which kind it is."""

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
from alchemist_jobs.rundir import check_home, default_root
from alchemist_jobs.stack_kinds import LOCAL, kind_of
from alchemist_jobs.ui import models as m
from alchemist_jobs.ui.series import SeriesBook

# Run ids as new_run_id makes them (name-YYYYmmdd-HHMMSS-hex), or a prefix of one, like the
# CLI takes: no '/', '.', glob characters or upper case, so no id reaches outside the runs.
RUN_ID = re.compile(r"[a-z0-9](?:[-a-z0-9]{0,78})")
# Spec `env` keys whose values are shown as "***": secrets belong in `secret_env`, but a
# spec written before it existed may still carry one in `env`.
_SECRET_KEY = re.compile(r"TOKEN|SECRET|PASSW|KEY|CREDENTIAL|AUTH", re.IGNORECASE)


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

    def __init__(self, name: str, scheduler: Any, facts: m.StackFacts):
        self.name, self.scheduler, self.facts = name, scheduler, facts


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
            if kind_of(name).runs_here:
                if home:  # checked before it is resolved: a symlink loop is one line too
                    check_home(Path(home).expanduser())
                root = Path(home).expanduser().resolve() if home else default_root()
                self.stacks[name] = Stack(name, local_scheduler(root), _local_facts(root, local_links))
                continue
            if in_cluster:
                from alchemist_jobs.ui.incluster import in_cluster_output

                out = in_cluster_output(name, outputs.get(name))
            else:  # one line and exit 2 if it is not a stack
                out = resolve(name, outputs.get(name))
            self.stacks[out.stack] = Stack(out.stack, cluster_scheduler(out), _cluster_facts(out))
        self.series = SeriesBook()
        self._ended: dict[str, m.RunSummary] = {}  # runs read by id that ended, by stack/id
        # runs started here whose processes are this server's (not runs_on_its_own)
        self._live: dict[str, tuple[Any, Any, threading.Thread]] = {}
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
        names = s.scheduler.run_ids()
        if names is None:
            return [self._summary(s, st) for st in s.scheduler.list()]
        return self._runs_by_id(s, names)

    def warm(self) -> None:
        """Read every ended run's summary once where runs are read by id (a home may hold
        thousands)."""
        for s in self.stacks.values():
            names = s.scheduler.run_ids()
            if names is not None:
                self._runs_by_id(s, names)

    def _runs_by_id(self, s: Stack, names: list[str]) -> list[m.RunSummary]:
        """Every run of a scheduler that names its runs cheaply (`run_ids`). A run that ended
        (succeeded, failed, cancelled) never changes again, so its summary is read once and
        kept: the page polls the list every second or two, and a home holds thousands."""
        from alchemist_jobs.scheduler import CANCELLED, FAILED, SUCCEEDED, decode_all

        # Many unknown runs (the first request, or runs added by others): one listing, which
        # takes ended runs from the index of ended runs, beats one status read per run.
        listed = {}
        ended = self._ended
        if sum(1 for name in names if f"{s.name}/{name}" not in ended) > 32:
            listed = {doc["run_id"]: doc for doc in decode_all(r.json_text for r in s.scheduler.list_json())}
        out = []
        for name in names:
            summary = ended.get(f"{s.name}/{name}")
            if summary is None:
                doc = listed.get(name)
                if doc is None:
                    try:
                        st = s.scheduler.status(name)
                    except UserError:  # no run (yet), or removed between listing and read
                        continue
                    doc, owner = st.as_json(), s.scheduler.owner(st)
                else:
                    owner = _owner(doc["run_dir"])
                summary = summary_of(doc, owner)
                if doc["state"] in (SUCCEEDED, FAILED, CANCELLED):
                    ended[f"{s.name}/{name}"] = summary
            out.append(summary)
        return out

    def detail(self, stack: str, run_id: str) -> m.RunDetail:
        s = self.stack(stack)
        st = s.scheduler.status(check_run_id(run_id))
        out = m.RunDetail(**self._summary(s, st).model_dump())
        out.links = self._links(s, st.name, st.run_id)
        out.requirements = st.requirements
        files = s.scheduler.artifacts(st)
        if files.spec_file is not None:
            out.spec = _redact(yaml.safe_load(files.spec_file.read_text()) or {})
        if files.checkpoints_dir is not None:
            out.checkpoints = _checkpoints(files.checkpoints_dir)
        placed = s.scheduler.placements(st)
        out.ranks = [_rank(p) for p in placed if p.role == "worker"]
        out.servers = [_server(p) for p in placed if p.role == "server"]
        out.result = _dump(st.result) or None
        if st.failure:
            out.failed_rank = st.failure.get("rank")
            out.failure_lines = list(st.failure.get("lines") or [])
        if out.accuracy is None:
            # The header agrees with the accuracy chart: its latest point where the result
            # names no test accuracy (a running run, a script's own loop).
            accuracy = self._series(s, st)["accuracy"]
            out.accuracy = accuracy[-1][1] if accuracy else None
        return out

    def metrics(self, stack: str, run_id: str) -> m.RunMetrics:
        s = self.stack(stack)
        st = s.scheduler.status(check_run_id(run_id))
        return m.RunMetrics.model_validate({"stack": s.name, "run_id": st.run_id, **self._series(s, st)})

    def _series(self, s: Stack, st: Any) -> dict[str, list[tuple[float, float]]]:
        key = f"{s.name}/{st.run_id}"
        tb_dir = s.scheduler.artifacts(st).tensorboard_dir
        return self.series.update(key, tb_dir, s.scheduler.sample(st), final=st.finished)

    def logs(self, stack: str, run_id: str, rank: int, offset: int) -> m.LogChunk:
        s = self.stack(stack)
        if rank < 0:
            raise UserError(f"rank {rank}: accepted: a rank >= 0")
        if offset < 0:
            raise UserError(f"offset {offset}: accepted: an offset >= 0")
        st = s.scheduler.status(check_run_id(run_id))
        offset, chunk, total = s.scheduler.read_log(st, rank, offset)
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
        if s.scheduler.capabilities.runs_on_its_own:
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
                self._live[request.run_id] = (s.scheduler, handle, threading.current_thread())
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
        for sched, handle, thread in live:
            sched.interrupt(handle)
            thread.join(timeout=60)

    # -- shapes ------------------------------------------------------------------------------

    def _summary(self, s: Stack, st: Any) -> m.RunSummary:
        return summary_of(st.as_json(), s.scheduler.owner(st))

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
    if run_dir is None:
        return None
    try:
        return _user(os.stat(run_dir).st_uid)
    except (KeyError, OSError):
        return None


@functools.lru_cache(maxsize=256)
def _user(uid: int) -> str:
    """The user name of `uid` (a home of 10,000 runs has a few owners)."""
    return pwd.getpwuid(uid).pw_name


def _rank(p: Any) -> m.RankState:
    """A scheduler's Placement of a rank as the API's RankState."""
    return m.RankState(
        rank=p.index, state=p.state, restarts=p.restarts, node=p.node, pid=p.pid, started=p.started
    )


def _server(p: Any) -> m.ServerState:
    """A scheduler's Placement of a parameter-server shard as the API's ServerState."""
    return m.ServerState(
        shard=p.index,
        state=p.state,
        restarts=p.restarts,
        node=p.node,
        pid=p.pid,
        started=p.started,
        updates=p.updates,
    )


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
        fabric=out.gpu.fabric.name if out.gpu.fabric else None,
        fabric_per_node=out.gpu.fabric.per_node if out.gpu.fabric else 0,
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
        cluster=out.auth.cluster if out.auth else None,
        cluster_label=out.auth.label if out.auth else None,
        region=out.auth.region if out.auth else None,
    )
