"""One link's use of the remote service: serve backend jobs from it, publish local results to it.

Both modes first look each job's action up in the action cache (GetActionResult).
remote_mode = cache: a job it lacks is compiled locally and its result published
(UpdateActionResult), for every other machine.
remote_mode = execute: for the jobs it lacks, upload the inputs the CAS lacks (each
shared module once), then Execute the jobs the executor sends through execute.Workers
(jobs/remoteside.py decides which: the local slots compile the others at the same time).

Never worse than local: a job the service cannot serve (unreachable, too slow, a failed
action, an output that is missing, empty or not an object) is compiled locally and
counted in remote_errors. The first sign that the service is down stops all further
requests for this link, so a dead server costs one failed request, not one per job.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from operator import itemgetter
from typing import TYPE_CHECKING, Any

from .. import cachekey
from ..formats import bitcode
from ..fsutil import read_bytes
from ..stages import backend
from ..stages.backend import PLACEHOLDERS, Job
from ..stats import Stats
from . import action, protos
from .client import Client, Endpoint, Key, RemoteError, Running, digest_message, key_of

if TYPE_CHECKING:
    from ..config import Settings


# What a published result carries inline of its compile's stderr; more goes in a blob.
INLINE_STDERR = 16 * 1024


@dataclass(frozen=True)
class Work:
    job: Job
    argv_for: Callable[[str, str, str], list[str]]  # (module, shard, output) -> backend argv


@dataclass(frozen=True)
class Served:
    obj: bytes
    executed: bool  # ran on a worker; else it came from the remote action cache
    stderr: str = ""  # what the compile printed (diagnostics), as the worker or the publisher left it
    worker: str = ""  # the worker it ran on, as the server names it
    queued: float | None = None  # seconds it waited in the server's queue, as the server timed it


@dataclass(frozen=True)
class Execution:
    """A job sent to the workers: its answer comes in `future` (session.taken reads it)."""

    action: action.BackendAction
    future: Future
    running: Running

    def cancel(self) -> None:
        """Stop waiting for it (the first result won elsewhere): the server is asked to drop it."""
        self.running.cancel()
        self.future.cancel()


@dataclass
class Reply:
    action: str = ""  # the action digest, for the log
    served: Served | None = None
    error: str = ""


@dataclass
class Asked:
    """Lookups under way (Session.ask): a reply per job, each to be filled from its request."""

    replies: list[Reply]
    futures: list[tuple[int, Future]]  # (the job's place, its lookup)

    @property
    def done(self) -> bool:
        return all(f.done() for _, f in self.futures)


@dataclass
class Session:
    client: Client
    mode: str  # "cache" | "execute"
    platform: dict[str, str]
    stats: Stats
    digest_of: Callable[[str], str]
    jobs: int
    toolchain: str = ""  # clang's version line: in every Command, so in every key
    compiler: str = ""  # clang's path on the workers ('' = this machine's)
    down: str = ""  # why the service is not asked again during this link
    actions: dict[str, action.BackendAction] = field(default_factory=dict)  # job output -> its action
    _pool: ThreadPoolExecutor | None = None  # executions, and results being published
    _ask_pool: ThreadPoolExecutor | None = None  # lookups and uploads: never behind executions that wait for them
    _publishing: list[Future] = field(default_factory=list)
    _inputs: dict[str, Future] = field(default_factory=dict)  # job output -> the upload of its inputs (prepare)
    _uploads: Future | None = None  # the last upload asked for: each waits for the one before it
    _known: set[Key] = field(default_factory=set)  # blobs an earlier upload found in the CAS or put there
    _capable: bool = False  # the server answered GetCapabilities
    _fastest: float | None = None  # the quickest dispatch seen (Running.dispatched), seconds
    deduplicated: int = 0  # input bytes those jobs name that were not uploaded (shared by jobs, or in the CAS)

    def __post_init__(self) -> None:
        self._actions = action.Actions(self.digest_of, action.Files(read_bytes), self.platform,
                                       int(self.client.endpoint.exec_timeout), self.toolchain, self.compiler)

    def _executor(self) -> ThreadPoolExecutor:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=max(1, self.jobs), thread_name_prefix="ltowrap-remote")
        return self._pool

    def _ask_executor(self) -> ThreadPoolExecutor:
        if self._ask_pool is None:
            self._ask_pool = ThreadPoolExecutor(max_workers=max(1, self.jobs), thread_name_prefix="ltowrap-ask")
        return self._ask_pool

    def _give_up(self, error: RemoteError) -> None:
        if error.unreachable and not self.down:
            self.down = str(error)
            print(f"ltowrap: remote {self.client.endpoint.url}: {error}; compiling locally", file=sys.stderr)

    def ask(self, work: list[Work]) -> Asked:
        """Start asking the action cache for each job: their actions are built here, the
        requests go out in the background; answers() gives one reply per job, in order,
        served or not (error says why).

        In cache mode a job it lacks is counted a miss there; in execute mode the executor
        then send()s it (counted when taken), or compiles it here (remote_local).
        """
        replies = [Reply() for _ in work]
        if not work:
            return Asked(replies, [])
        if not self._capable and not self.down:
            try:
                self.client.capabilities()
                self._capable = True
            except RemoteError as e:
                self._give_up(RemoteError(str(e), unreachable=True))
        ready: list[tuple[int, action.BackendAction]] = []
        for i, w in enumerate(work):
            if self.down:
                replies[i].error = self.down
                continue
            try:
                a = self._actions.build(w.job, w.argv_for, self._identity(w))
            except (bitcode.BadBitcode, OSError) as e:
                replies[i].error = f"cannot build the action: {e}"
                continue
            self.actions[w.job.output] = a
            replies[i].action = a.name
            ready.append((i, a))
        # The action cache first, in both modes: a hit costs one small request, and an
        # Execute (even one the server answers from its cache) goes through its scheduler.
        return Asked(replies, [(i, self._ask_executor().submit(self._lookup, a)) for i, a in ready])

    def answers(self, asked: Asked) -> list[Reply]:
        """The replies of ask(), once they are all in (counted in the stats here)."""
        replies = asked.replies
        for i, future in asked.futures:
            replies[i].served, replies[i].error = future.result()
        for r in replies:
            if r.served is not None or r.error:
                self._count(r)
            elif self.mode != "execute":
                self.stats.add("remote_misses")
        return replies

    def _count(self, reply: Reply) -> None:
        if reply.served is None:
            self.stats.add("remote_errors")
        else:
            self.stats.add("remote_executed" if reply.served.executed else "remote_hits")

    # --- execute mode: the executor decides which jobs go to the workers (execute.py) ----

    def prepare(self, work: list[Work]) -> None:
        """Upload, in the background, the inputs the CAS lacks of the jobs that may be sent
        (each shared module once): one FindMissingBlobs for them all, after the uploads
        asked for before, less the blobs those found or sent. Sent jobs wait for theirs."""
        actions = [self.actions[w.job.output] for w in work if w.job.output in self.actions]
        if actions and not self.down:
            self._uploads = self._ask_executor().submit(self._upload_inputs, actions, self._uploads)
            self._inputs.update((w.job.output, self._uploads) for w in work if w.job.output in self.actions)

    def room(self, out: int, sent: Iterable[Execution], queue: bool) -> bool:
        """May one more job be sent, `out` being out (`sent`, looked at only when jobs may not
        queue)? At most as many as requests may be in flight; and unless
        jobs may `queue` (no local side to give them to), none while a sent job waits in the
        server's queue: the workers are all busy then, and it would only wait there.

        Every job spends some time in that queue, free workers or not: the server's dispatch
        (BuildGrid: its assigner's round, a database write, the bot's long poll; 0.1-0.2 s on
        loopback). So a job counts as waiting for a worker only once it has been queued for
        twice the quickest dispatch this link has seen (any queued job, before one is seen);
        else a large cluster would get one job per dispatch time (bench/cluster.py)."""
        if self.down or not self._inputs or out >= max(1, int(self.client.pressure.limit)):
            return False
        if queue:
            return True
        running = [e.running for e in sent]
        for r in running:
            if r.dispatched is not None and (self._fastest is None or r.dispatched < self._fastest):
                self._fastest = r.dispatched
        grace = 2 * self._fastest if self._fastest is not None else 0.0
        return not any(r.waiting(grace) for r in running)

    def send(self, w: Work, done: Callable[[], None], moved: Callable[[], None] | None = None) -> Execution:
        """Have the job executed on the workers, in the background; `done` is called (from
        another thread) once its answer is in, or it is cancelled, and `moved` when it leaves
        the server's queue (what room() looks at when jobs may not queue)."""
        a = self.actions[w.job.output]
        running = Running(moved)
        answer: Future = Future()
        answer.add_done_callback(lambda _: done())
        self._executor().submit(self._execute, a, running, self._inputs[w.job.output], answer)
        return Execution(a, answer, running)

    def taken(self, execution: Execution) -> Reply:
        """The answer of a finished execution the executor uses (counted in the stats here)."""
        try:
            served, error = execution.future.result()
        except Exception as e:  # noqa: BLE001 - a bug in a worker thread must not fail the link
            served, error = None, f"remote execution failed: {e!r}"
        reply = Reply(execution.action.name, served, error)
        self._count(reply)
        return reply

    def _identity(self, w: Work) -> str:
        """cachekey.remote_key of a job: what every machine's identity Action for it names."""
        job = w.job
        shard = job.shard_identity or cachekey.shard_identity(job.shard, self.digest_of, job.module.path)
        return cachekey.remote_key(self.platform, self.toolchain, w.argv_for(*PLACEHOLDERS), job.module.digest,
                                  shard)

    def _upload_inputs(self, actions: list[action.BackendAction], before: Future | None) -> str:
        """Why the inputs could not be uploaded ('' once they are in the CAS)."""
        failed = before.result() if before is not None else ""
        if failed:
            return failed
        blobs: dict[Key, bytes] = {}
        named = 0
        for a in actions:  # most of a job's blobs are modules known already: the difference is a set's
            blobs.update((k, a.blobs[k]) for k in a.blobs.keys() - self._known)
            named += sum(map(itemgetter(1), a.blobs))
        try:
            missing = self.client.find_missing(blobs)  # none to look for: no request
            self.deduplicated += named - sum(k[1] for k in missing)
            self.client.upload({k: blobs[k] for k in missing})
        except RemoteError as e:
            self._give_up(e)
            return str(e)
        self._known.update(blobs)
        return ""

    def _lookup(self, a: action.BackendAction) -> tuple[Served | None, str]:
        if self.down:
            return None, self.down
        try:
            result = self.client.get_action_result(a.identity)
            if result is None:
                return None, ""
            return self._output(result, executed=False)
        except RemoteError as e:
            self._give_up(e)
            return None, str(e)

    def _execute(self, a: action.BackendAction, running: Running, inputs: Future, answer: Future) -> None:
        """Run the job and put its answer, (served, why not), in `answer` (unless it was cancelled
        before it started); then, on the same thread, share an executed result under the identity
        every machine asks for, where this client may write the action cache. A failure to share
        it costs other machines a hit, not this object. After the answer: the object is this
        link's then, and two more round trips before it is handed over would hold its place
        among the executions in flight; on this thread, not another: a hand-off costs more CPU
        than the share's own Python."""
        if not answer.set_running_or_notify_cancel():
            return
        try:
            served, why, result = self._executed(a, running, inputs)
        except BaseException as e:  # noqa: BLE001 - a bug here must reach taken(), not end the thread unseen
            answer.set_exception(e)
            return
        answer.set_result((served, why))
        if result is not None and self.client.can_update:
            self._share(a, result)

    def _executed(self, a: action.BackendAction, running: Running, inputs: Future) -> tuple[Served | None, str, Any]:
        """(served, why not, the ActionResult (a protos.ActionResult) to share: None if there is none)."""
        failed = inputs.result()
        if failed or self.down:
            return None, failed or self.down, None
        try:
            response = self.client.execute(a.key, running)
            served, why = self._output(response.result, executed=not response.cached_result)
        except RemoteError as e:
            self._give_up(e)
            return None, str(e), None
        return served, why, response.result if served is not None else None

    def _output(self, result, executed: bool) -> tuple[Served | None, str]:
        if result.exit_code != 0:
            return None, f"the remote compile exited {result.exit_code}"
        files = [f for f in result.output_files if f.path == action.OUTPUT]
        if not files:
            return None, "the remote result has no object"
        data = self.client.read((files[0].digest.hash, files[0].digest.size_bytes))
        stderr = result.stderr_raw.decode("utf-8", "replace")
        if not stderr and result.stderr_digest.size_bytes:
            stderr = self.client.read((result.stderr_digest.hash, result.stderr_digest.size_bytes)).decode(
                "utf-8", "replace")
        why = backend.unusable(0, data, stderr)
        if why:
            return None, f"rejected the remote result: {why}"
        meta = result.execution_metadata
        queued = None
        if executed and meta.queued_timestamp.seconds and meta.worker_start_timestamp.seconds:
            queued = max(0.0, (meta.worker_start_timestamp.ToNanoseconds() - meta.queued_timestamp.ToNanoseconds()) / 1e9)
        return Served(data, executed, stderr, meta.worker if executed else "", queued), ""

    def publish(self, job: Job, obj: bytes, printed: str = "") -> None:
        """Share a locally compiled object, and what its compile printed, through the action
        cache (in the background)."""
        a = self.actions.get(job.output)
        if a is None or self.down or not self.client.can_update:  # a read-only cache for this client
            return
        self._publishing.append(self._executor().submit(self._publish, a, obj, printed))

    def _publish(self, a: action.BackendAction, obj: bytes, printed: str) -> bool:
        if self.down:
            return False
        out = key_of(obj)
        blobs = {out: obj}
        result = protos.ActionResult(exit_code=0)
        result.output_files.add(path=action.OUTPUT, digest=digest_message(out))
        stderr = printed.encode("utf-8", "surrogateescape")
        if len(stderr) <= INLINE_STDERR:
            result.stderr_raw = stderr
        else:  # a long one (remarks) as a blob of its own: an action result has a size limit
            key = key_of(stderr)
            blobs[key] = stderr
            result.stderr_digest.CopyFrom(digest_message(key))
        return self._share(a, result, blobs)

    def _share(self, a: action.BackendAction, result, blobs: dict[Key, bytes] | None = None) -> bool:
        """Put `result` in the action cache under `a`'s identity, after its blobs and the identity's own
        (those an upload of this link put in the CAS or found there already are not sent again: an
        executed job's went with its inputs)."""
        try:
            self.client.upload({**(blobs or {}), **{k: a.blobs[k] for k in a.small if k not in self._known}})
            self.client.update_action_result(a.identity, result)
            return True
        except RemoteError as e:
            self._give_up(e)
            return False

    @property
    def retries(self) -> int:
        """Requests asked again after the server said "not now" (client.Pressure)."""
        return self.client.pressure.retries

    def close(self) -> None:
        """Wait for the results being published or shared (the pools' threads), then let go of
        the connection."""
        for f in self._publishing:  # counted here: Stats belongs to this thread
            self.stats.add("remote_uploads" if f.result() else "remote_upload_errors")
        for pool in (self._pool, self._ask_pool):
            if pool is not None:
                pool.shutdown()
        if self.retries:
            self.stats.add("remote_retries", self.retries)
        self.client.close()


def open_session(settings: Settings, stats: Stats, platform: dict[str, str], toolchain: str,
                 digest_of: Callable[[str], str]) -> Session:
    """A session from the remote_* settings (RemoteError if they do not make sense)."""
    return Session(Client(Endpoint.from_settings(settings)), settings.remote_mode, platform, stats, digest_of,
                   settings.remote_jobs, toolchain=toolchain, compiler=settings.remote_compiler)
