"""What recording to a path that holds a file does, as `perf record` does
with perf.data: a gradtrace trace there is kept as PATH.old (an older
PATH.old is replaced) and recording goes on, saying so in one line; an empty
file is replaced; any other file is refused, with the option that overrides
the refusal named (overwrite=True from Python, --force from the command).
"""
import errno
import fcntl
import os
import sqlite3

# the files a trace may have beside it (the recorder's unlink_sidecars):
# SQLite's write-ahead log and its index, and the row log (rowlog.h)
SIDECARS = ("-wal", "-shm", "-gtlog")


def is_trace(path):
    """True if the file at path is a gradtrace trace: an SQLite database
    with a schema version (PRAGMA user_version) and a `run` table. False for
    anything else, an unreadable file included. Never raises."""
    try:
        with open(path, "rb") as f:
            if f.read(16) != b"SQLite format 3\x00":
                return False
        db = sqlite3.connect("file:%s?mode=ro" % _uri_path(path), uri=True)
        try:
            version = db.execute("PRAGMA user_version").fetchone()[0]
            run = db.execute("SELECT count(*) FROM sqlite_master"
                             " WHERE type = 'table' AND name = 'run'").fetchone()[0]
        finally:
            db.close()
    except (OSError, sqlite3.Error):
        return False
    return version > 0 and run == 1


def _uri_path(path):
    """path quoted for an SQLite file: URI."""
    from urllib.parse import quote
    return quote(os.path.abspath(path))


def _is_live(path):
    """True if a recording holds the trace at path (the recorder keeps an
    exclusive flock on it while recording)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        return e.errno in (errno.EWOULDBLOCK, errno.EAGAIN)
    finally:
        os.close(fd)
    return False


def _exists(msg):
    """FileExistsError whose str() is msg alone (with errno EEXIST)."""
    e = FileExistsError(msg)
    e.errno = errno.EEXIST
    return e


def keep(path, fix):
    """Make room for a new trace at path. Returns the path the previous
    trace was kept at (path + ".old"), or None when there was nothing to
    keep (no file, or an empty one, which is removed). Raises
    FileExistsError for a file that is not a trace, or a trace another
    recording is writing (the message names `fix`, the option that
    overrides), and OSError when the trace cannot be renamed. Leaves
    directories to the recorder, which refuses them."""
    try:
        st = os.stat(path)
    except OSError:
        return None  # nothing there, or a path the recorder says is unusable
    if not os.path.isfile(path):
        return None
    if _is_live(path):
        raise _exists("gradtrace: cannot replace trace %s: another "
                              "recording is writing it; choose another path" % path)
    if st.st_size == 0:
        os.unlink(path)
        return None
    if not is_trace(path):
        raise _exists("gradtrace: cannot create trace %s: the file "
                              "exists and is not a gradtrace trace; %s replaces it, or "
                              "choose another path" % (path, fix))
    old = path + ".old"
    for suffix in ("",) + SIDECARS:
        try:
            os.unlink(old + suffix)
        except FileNotFoundError:
            pass
    for suffix in SIDECARS + ("",):  # the trace itself last: it names the set
        try:
            os.replace(path + suffix, old + suffix)
        except FileNotFoundError:
            pass
    return old
