"""Distributed training: which rank a process is, where its trace goes, the
collectives' writes, and recording the workers torch.multiprocessing spawns.

Naming. Under a launcher that sets RANK (torchrun, torch.distributed.run,
SLURM wrappers that export it), or once the default process group is
initialised, each rank writes its own trace: the path's
file name gets `.rank<RANK>` before its extension (run.db -> run.rank0.db,
traces/run -> traces/run.rank0), or `{rank}` in the path is replaced by the
rank (traces/{rank}.db -> traces/0.db). A worker started by
torch.multiprocessing.spawn / start_processes while a recording is on
records into the same name with its process index as the rank. Files are
created exclusively, so two processes never write one trace: the second
fails to start recording ("another recording is writing it").

Run metadata. rank, local_rank, world_size and launcher_run_id come from the
environment torch.distributed reads (RANK, LOCAL_RANK, WORLD_SIZE,
TORCHELASTIC_RUN_ID); once init_process_group returns, the default process
group's rank, size and backend replace them.

Collectives. c10d's in-place collectives (allreduce_, broadcast_,
allgather_, reduce_scatter_, ...) write into their first tensor argument
but their schemas carry no alias information and PyTorch does not bump the
written tensors' versions. collective_writes() names those arguments so
that the recorder records them as written ("mutated" op arguments) without
predicting a version bump: a write whose version did not move.
"""
import os
import re

__all__ = ["env_info", "rank_path", "trace_path", "collective_writes"]

_RANK_FIELD = "{rank}"


def _int_env(environ, name):
    v = environ.get(name, "").strip()
    return int(v) if re.fullmatch(r"[0-9]+", v) else None


def env_info(environ=None):
    """The launcher's view of this process: a dict with rank, local_rank,
    world_size and launcher_run_id (None where unset), or None when RANK is
    not set (not a launched rank)."""
    environ = os.environ if environ is None else environ
    rank = _int_env(environ, "RANK")
    if rank is None:
        return None
    return {
        "rank": rank,
        "local_rank": _int_env(environ, "LOCAL_RANK"),
        "world_size": _int_env(environ, "WORLD_SIZE"),
        "launcher_run_id": environ.get("TORCHELASTIC_RUN_ID") or None,
    }


def rank_path(path, rank):
    """The trace path of rank `rank` for the user's `path`: `{rank}`
    replaced, else `.rank<N>` inserted before the file name's extension."""
    path = os.fspath(path)
    if _RANK_FIELD in path:
        return path.replace(_RANK_FIELD, str(rank))
    head, tail = os.path.split(path)
    stem, ext = os.path.splitext(tail)
    if not stem:  # ".db": a name that is all extension
        stem, ext = ext, ""
    return os.path.join(head, "%s.rank%d%s" % (stem, rank, ext))


def trace_path(path, per_rank=None):
    """Where a recording asked for at `path` writes: rank_path() when
    per_rank is True, or None (automatic) and the process is a rank (RANK in
    the environment, or an initialised default process group, as in a
    worker that recording starts after init_process_group); path itself
    otherwise."""
    path = os.fspath(path)
    if per_rank is False:
        return path
    info = env_info()
    rank = info["rank"] if info is not None else None
    if rank is None:
        pg = _process_group()
        rank = pg[0] if pg is not None else None
    if rank is None:
        return path.replace(_RANK_FIELD, "0") if per_rank else path
    return rank_path(path, rank)


def _process_group():
    """(rank, world_size, backend) of the default process group, or None if
    torch.distributed is missing or not initialised."""
    try:
        import torch.distributed as dist
        if not dist.is_available() or not dist.is_initialized():
            return None
        return dist.get_rank(), dist.get_world_size(), str(dist.get_backend())
    except Exception:
        return None


def run_fields(spawn_index=None):
    """The distributed keyword arguments of Recorder.set_run for this process
    now: the process group's rank, size and backend if it is initialised,
    else the launcher's environment, else the spawn index. Empty-valued
    (rank -1, world_size 0) when the process is not a rank."""
    fields = {"rank": -1, "world_size": 0, "local_rank": -1, "backend": None,
              "launcher_run_id": None}
    info = env_info()
    if info is not None:
        fields["rank"] = info["rank"]
        fields["world_size"] = info["world_size"] or 0
        if info["local_rank"] is not None:
            fields["local_rank"] = info["local_rank"]
        fields["launcher_run_id"] = info["launcher_run_id"]
    elif spawn_index is not None:
        fields["rank"] = fields["local_rank"] = spawn_index
    pg = _process_group()
    if pg is not None:
        fields["rank"], fields["world_size"], fields["backend"] = pg
    if fields["world_size"] <= 0 and fields["rank"] >= 0:
        fields["world_size"] = 0  # a rank whose world is not known yet
    return fields


# -- collectives ---------------------------------------------------------

_TENSOR_TYPE = re.compile(r"(Optional\[)?(List\[)*Tensor\b")


def _is_tensor_type(t):
    """Tensor, Tensor?, Tensor[], Tensor[][] (List[List[Tensor]]), ..."""
    return _TENSOR_TYPE.match(str(t)) is not None


def collective_writes(schema):
    """The schema positions a c10d collective writes without
    saying so in its schema (no alias info, no version bump): the first
    tensor argument of an in-place collective (name ending in '_'), barriers
    aside; none for every other op. Ops whose schema marks the write (the
    functional collectives' all_reduce_) go through the ordinary path."""
    if not schema.name.startswith("c10d::"):
        return []
    name = schema.name[len("c10d::"):]
    if not name.endswith("_") or "barrier" in name:
        return []
    for i, arg in enumerate(schema.arguments):
        if arg.alias_info is not None:
            return []
        if _is_tensor_type(arg.type):
            return [i]
    return []


# -- patches while recording ------------------------------------------------

class Patches:
    """While a recording is on: init_process_group updates the run row
    with the process group's rank, size and backend once it returns, and
    torch.multiprocessing's spawn/start_processes record each worker into
    its own rank's trace."""

    def __init__(self, recording):
        self._recording = recording
        self._saved = []

    def install(self):
        try:
            import sys
            import torch.distributed as dist
            c10d = sys.modules["torch.distributed.distributed_c10d"]
        except Exception:
            dist = c10d = None
        if dist is not None and hasattr(c10d, "init_process_group"):
            wrapped = self._wrap_init(c10d.init_process_group)
            for owner in (c10d, dist):
                self._set(owner, "init_process_group", wrapped)
        try:
            import sys
            import torch.multiprocessing as tmp
            # the module, not the function torch.multiprocessing.spawn
            tspawn = sys.modules["torch.multiprocessing.spawn"]
        except Exception:
            return
        if hasattr(tspawn, "start_processes"):
            wrapped = self._wrap_start(tspawn.start_processes)
            for owner in (tspawn, tmp):
                if hasattr(owner, "start_processes"):
                    self._set(owner, "start_processes", wrapped)

    def remove(self):
        for owner, attr, orig in reversed(self._saved):
            setattr(owner, attr, orig)
        self._saved = []

    def _set(self, owner, attr, value):
        self._saved.append((owner, attr, owner.__dict__[attr]))
        setattr(owner, attr, value)

    def _wrap_init(self, orig):
        import functools
        recording = self._recording

        @functools.wraps(orig)
        def init_process_group(*args, **kwargs):
            result = orig(*args, **kwargs)
            if recording.is_on():
                try:
                    recording._set_dist()
                except Exception:
                    pass  # bookkeeping never raises into the run
            return result

        return init_process_group

    def _wrap_start(self, orig):
        import functools
        recording = self._recording

        @functools.wraps(orig)
        def start_processes(fn, *args, **kwargs):
            if recording.is_on() and not isinstance(fn, SpawnWorker):
                fn = SpawnWorker(fn, recording)
            return orig(fn, *args, **kwargs)

        return start_processes


class SpawnWorker:
    """A torch.multiprocessing worker function that records: pickled into
    each worker process with the recording's path and options, it records
    fn(i, *args) into rank_path(path, i) and ends the trace the way the
    worker ends (returns, raises, exits), re-raising as the worker would."""

    def __init__(self, fn, recording):
        self.fn = fn
        self.template = recording.template
        self.options = {"overwrite": recording.overwrite,
                        "max_size": recording.max_size,
                        "backward_calls": recording.backward_calls,
                        "keep_last": recording.keep_last,
                        "argv": recording.argv}
        self.announce = recording.announce

    def __call__(self, index, *args):
        import sys
        from gradtrace import _recording as gradtrace
        if gradtrace._current is not None or not isinstance(index, int):
            return self.fn(index, *args)  # already recording (a fork's parent)
        path = rank_path(self.template, index)
        rec = gradtrace.Recording(path, per_rank=False, **self.options)
        rec.spawn_index = index
        try:
            rec.start()
        except Exception as e:
            sys.stderr.write("%s\n" % e)
            return self.fn(index, *args)  # record nothing, change nothing
        try:
            result = self.fn(index, *args)
        except BaseException as e:
            rec.__exit__(type(e), e, e.__traceback__)
            failed = not (isinstance(e, SystemExit) and not gradtrace._exit_code(e))
            self._announce(rec, failed)
            raise
        rec.stop("ok", 0)
        self._announce(rec, False)
        return result

    def _announce(self, rec, failed):
        """The line `gradtrace record` prints for its own trace, for this
        worker's (announce is set when the recording came from it)."""
        if self.announce:
            import sys
            from . import _report
            sys.stderr.write(_report.written_line(rec.path, failed) + "\n")
            sys.stderr.flush()
