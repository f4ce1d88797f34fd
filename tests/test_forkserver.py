"""forkserver: backend compiles forked from one clang a link (ltowrap/_forkserver.c preloaded).

A forked compile must be what a started one is, to the program and to anyone watching it:
its command line, environment, working directory, signal mask, descriptors and standard
input as the program sees them; its exit code or signal; its command line in /proc; stopped
when asked. A probe program prints what it sees, started both ways. Then real links, with the
server on and off: the same binary, every backend forked or none.
"""

from __future__ import annotations

import os
import select
import signal
from pathlib import Path

import pytest

from helpers import cmdline, link_all, links, ltowrap_env, many_modules, run, wait_until, wrapper, write

from ltowrap import proc
from ltowrap.jobs import forkserver
from ltowrap.jobs.forkserver import Forks

PROBE = r"""
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
extern char **environ;

static void target(const char *what, int fd) {
    char path[64], to[4096];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(path, to, sizeof to - 1);
    to[n < 0 ? 0 : n] = 0;
    printf("%s %s\n", what, to);
}

int main(int argc, char **argv) {
    for (int i = 0; i < argc; i++) printf("arg %s\n", argv[i]);
    for (char **e = environ; *e; e++) printf("env %s\n", *e);
    char cwd[4096];
    printf("cwd %s\n", getcwd(cwd, sizeof cwd));
    sigset_t mask;
    sigprocmask(SIG_BLOCK, NULL, &mask);
    for (int s = 1; s < 65; s++) if (sigismember(&mask, s)) printf("blocked %d\n", s);
    struct sigaction action;
    for (int s = 1; s < 32; s++)
        if (sigaction(s, NULL, &action) == 0 && action.sa_handler != SIG_DFL) printf("handled %d\n", s);
    target("stdin", 0);
    DIR *d = opendir("/proc/self/fd");
    struct dirent *entry;
    while ((entry = readdir(d)) != NULL) {
        int fd = atoi(entry->d_name);
        if (entry->d_name[0] != '.' && fd > 2 && fd != dirfd(d)) target("fd", fd);
    }
    closedir(d);
    fflush(stdout);
    if (argc > 1 && strncmp(argv[1], "exit=", 5) == 0) return atoi(argv[1] + 5);
    if (argc > 1 && strncmp(argv[1], "signal=", 7) == 0) raise(atoi(argv[1] + 7));
    if (argc > 1 && strcmp(argv[1], "sleep") == 0) pause();
    if (argc > 1 && strcmp(argv[1], "reexec") == 0) {  /* what a program it runs is given */
        char *again[] = {argv[0], "exit=0", NULL};
        execv(argv[0], again);
    }
    return 0;
}
"""


@pytest.fixture
def probe(tc22, tmp_path) -> str:
    if forkserver.library() is None:
        pytest.fail("ltowrap/_forkserver*.so is not built: pip install . (or setup.py build_ext --inplace) builds it")
    write(tmp_path / "probe.c", PROBE)
    run([tc22.clang, "-O1", "probe.c", "-o", "probe"], tmp_path)
    return str(tmp_path / "probe")


def started(forks: Forks, argv: list[str], env: dict[str, str], keep: tuple[int, ...] = ()) -> tuple[int, list[str]]:
    """Run argv through `forks` to its end: (exit code, the lines it printed)."""
    out = os.memfd_create("probe", os.MFD_CLOEXEC)
    try:
        child = forks.spawn(argv, out, keep, signal.pthread_sigmask(signal.SIG_BLOCK, []), env)
        rc = child.wait()
        os.lseek(out, 0, os.SEEK_SET)
        return rc, os.read(out, 1 << 20).decode().splitlines()
    finally:
        os.close(out)


def test_a_forked_compile_sees_what_a_started_one_does(probe, tmp_path):
    env = proc.tool_env({**os.environ, "PROBE_SPACE": "a b", "PROBE_EMPTY": ""})
    lock = os.open(tmp_path / "slot", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC)
    argv = [probe, "reexec", "--with=an argument", ""]
    forks, anew = Forks(), Forks(enabled=False)
    out = os.memfd_create("sleeper", os.MFD_CLOEXEC)
    try:
        got = {name: started(f, argv, env, (lock,)) for name, f in (("forked", forks), ("started", anew))}
        sleeper = forks.spawn([probe, "sleep"], out, (), set(), env)
        again = started(forks, argv, env, (lock,))  # beside another job: none of its descriptors
        sleeper.kill(signal.SIGTERM)
    finally:
        os.close(out)
        os.close(lock)
        forks.close()
    assert forks.forked == 3 and anew.forked == 0
    # The same lines; the descriptors a compile holds (its slot's lock, what the caller left
    # open to children) may have other numbers, so come in another order.
    assert got["forked"][0] == got["started"][0] == again[0] == 0
    assert sorted(got["forked"][1]) == sorted(got["started"][1]) == sorted(again[1])
    lines = got["forked"][1]
    assert lines[:4] == [f"arg {probe}", "arg reexec", "arg --with=an argument", "arg "]
    assert [line for line in lines if line.startswith("env ")] == [f"env {k}={v}" for k, v in env.items()] * 2
    assert lines.count(f"fd {tmp_path / 'slot'}") == 2  # held across the exec too


def test_exit_codes_and_signals_come_back_as_a_started_compiles_do(probe):
    env = proc.tool_env()
    forks, anew = Forks(), Forks(enabled=False)
    try:
        for how, rc in (("exit=3", 3), ("exit=0", 0), (f"signal={signal.SIGSEGV}", 128 + signal.SIGSEGV),
                        (f"signal={signal.SIGTERM}", 128 + signal.SIGTERM)):
            assert started(forks, [probe, how], env)[0] == rc == started(anew, [probe, how], env)[0], how
    finally:
        forks.close()
    assert forks.forked == 4


def test_a_forked_compile_shows_its_command_line_and_stops_when_asked(probe):
    forks = Forks()
    out = os.memfd_create("probe", os.MFD_CLOEXEC)
    try:
        child = forks.spawn([probe, "sleep", "marker-4711"], out, (), set(), proc.tool_env())
        assert isinstance(child, forkserver.ServedChild)
        shown = [probe.encode(), b"sleep", b"marker-4711"]  # written by the child once forked
        wait_until(lambda: cmdline(child.pid)[:3] == shown, 30, "the child's command line in /proc")
        ready, _, _ = select.select([child.pidfd], [], [], 0)
        assert not ready  # still running
        child.kill(signal.SIGTERM)
        assert not os.path.exists(f"/proc/{child.pid}")
    finally:
        os.close(out)
        server = forks.server
        forks.close()
    assert server is not None and not os.path.exists(f"/proc/{server.process.pid}")


def test_what_cannot_be_served_is_started_anew(probe, tc22, tmp_path, monkeypatch):
    env = proc.tool_env()
    script = write(tmp_path / "script", "#!/bin/sh\necho script \"$@\"\n")
    script.chmod(0o755)
    run([tc22.clang, "-static", "-O1", "probe.c", "-o", "static"], tmp_path)
    for argv, first in (([str(script), "x"], "script x"), ([str(tmp_path / "static"), "exit=0"], "arg ")):
        forks = Forks()
        assert started(forks, argv, env)[1][0].startswith(first)
        assert forks.forked == 0 and forks.server is None
    # A library that does not stop the program (here: none of ours): the program runs its own
    # main with the server's arguments and ends, never ready; the jobs are started anew.
    write(tmp_path / "other.c", "int other(void) { return 1; }\n")
    run([tc22.clang, "-shared", "-fPIC", "other.c", "-o", "other.so"], tmp_path)
    monkeypatch.setattr(forkserver, "library", lambda: str(tmp_path / "other.so"))
    forks = Forks()
    rc, lines = started(forks, [probe, "exit=5"], env)
    assert rc == 5 and lines[1] == "arg exit=5" and forks.forked == 0 and forks.server is None


def test_a_gone_server_leaves_the_rest_to_be_started_anew(probe):
    """A compile it forked and had not reported counts as killed (its status is lost with the
    server); the compiles after it are started anew."""
    env = proc.tool_env()
    forks = Forks()
    out = os.memfd_create("sleeper", os.MFD_CLOEXEC)
    try:
        assert started(forks, [probe, "exit=1"], env)[0] == 1 and forks.forked == 1
        assert forks.server is not None
        sleeper = forks.spawn([probe, "sleep"], out, (), set(), env)
        os.kill(forks.server.process.pid, signal.SIGKILL)
        os.kill(sleeper.pid, signal.SIGTERM)  # it would sleep on
        assert sleeper.wait() == 128 + signal.SIGKILL
        assert started(forks, [probe, "exit=2"], env)[0] == 2
        assert started(forks, [probe, "exit=3"], env)[0] == 3
        assert forks.forked == 2 and forks.server is None
    finally:
        os.close(out)
        forks.close()


def test_a_server_started_ahead_serves_the_first_compile_or_ends_unused(probe):
    """prestart (the pipeline's, as the thin-link starts) launches the server without waiting
    for it; the first compile takes it once it is ready, with the jobs' environment equal to
    the one it was started with. A run that compiles nothing ends it: its process is reaped."""
    env = proc.tool_env()
    forks = Forks()
    try:
        forks.prestart(probe, env, signal.pthread_sigmask(signal.SIG_BLOCK, []))
        assert forks.launched is not None and forks.server is None
        assert started(forks, [probe, "exit=4"], dict(env))[0] == 4  # an equal environment, not the same dict
        assert forks.forked == 1 and forks.launched is None and forks.server is not None
        assert started(forks, [probe, "exit=0"], {**env, "OTHER": "1"})[0] == 0  # another one: started anew
        assert forks.forked == 1
    finally:
        forks.close()
    unused = Forks()
    unused.prestart(probe, env, ())
    assert unused.launched is not None
    process = unused.launched.process
    unused.close()
    assert unused.launched is None and unused.server is None and process.pidfd == -1
    with pytest.raises(ChildProcessError):
        os.waitpid(process.pid, os.WNOHANG)  # reaped already
    off = Forks(enabled=False)
    off.prestart(probe, env, ())
    assert off.launched is None and started(off, [probe, "exit=3"], env)[0] == 3 and off.forked == 0


LD_THAT_LOOKS = """#!/bin/sh
# Before the thin-link runs, it looks among its parent's (the link's) children for a fork server.
case "$*" in *--thinlto-index-only*)
    for p in $(cat /proc/$PPID/task/*/children); do
        tr '\\0' ' ' < /proc/$p/cmdline 2>/dev/null | grep -q -e --ltowrap-fork-server= && : > "$0.seen"
    done;;
esac
exec {lld} "$@"
"""


def test_a_link_starts_its_fork_server_before_its_thin_link(tc22, tmp_path):
    """The pipeline starts the server as the thin-link starts (JobRun.prestart_backends): by
    the time lld runs, the link has a fork server among its children; with the server off, none."""
    objects = many_modules(tmp_path, tc22, 4)
    ld = write(tmp_path / "ld" / "ld.lld", LD_THAT_LOOKS.format(lld=tc22.lld))
    ld.chmod(0o755)
    seen = Path(f"{ld}.seen")
    for setting in ("1", "0"):
        env = ltowrap_env(tc22, LTOWRAP_FORK_SERVER=setting, LTOWRAP_CACHE_DIR=str(tmp_path / f"cache{setting}"))
        run([wrapper("ltowrap-clang"), "-flto=thin", "-fuse-ld=lld", f"--ld-path={ld}", "-O2", "-o", f"prog{setting}",
             *objects], tmp_path, env=env)
        assert links(tmp_path)[-1]["decision"] == "distributed"
        assert seen.exists() == (setting == "1"), f"fork_server={setting}"
        seen.unlink(missing_ok=True)


@pytest.mark.parametrize("version", [13, 14, 15, 16, 19, 22])
def test_a_link_forks_every_backend_and_links_what_it_links_without(version, tmp_path):
    """Real links of 6 modules by every release: with the fork server, every backend is forked,
    and the binary is that of backends started anew."""
    from helpers import toolchain

    tc = toolchain(version)
    objects = many_modules(tmp_path, tc, 6)
    binaries = {}
    for setting in ("1", "0"):
        env = ltowrap_env(tc, LTOWRAP_FORK_SERVER=setting, LTOWRAP_CACHE_DIR=str(tmp_path / f"cache{setting}"))
        link_all(tmp_path, env, objects, f"prog{setting}")
        binaries[setting] = (tmp_path / f"prog{setting}").read_bytes()
    on, off = links(tmp_path)[-2:]
    assert on["decision"] == off["decision"] == "distributed"
    assert on.get("forked") == on["backend_compiles"] == len(objects) and "forked" not in off
    assert binaries["1"] == binaries["0"]
    assert run([str(tmp_path / "prog1")], tmp_path).stdout == run([str(tmp_path / "prog0")], tmp_path).stdout


def test_the_library_is_not_a_python_module():
    """It is loaded into clang, which has no Python: it must need nothing from libpython."""
    lib = forkserver.library()
    if lib is None:
        pytest.fail("ltowrap/_forkserver*.so is not built")
    data = Path(lib).read_bytes()
    assert b"__libc_start_main" in data and b"Py_" not in data and b"PyInit" not in data


def test_malformed_requests_are_refused_and_the_server_serves_on(probe):
    """The server's parser, on seeded random and cut messages: each is refused (pid 0) or, if it
    happens to name a command line, forked; the server never dies of one, and serves on."""
    import array
    import random
    import socket

    env = proc.tool_env()
    server = forkserver.start(probe, env, ())
    assert server is not None
    rng = random.Random(39)
    out = os.open(os.devnull, os.O_WRONLY | os.O_CLOEXEC)
    good = b"\0".join([b"2", probe.encode(), b"exit=0", b""]) + server.env_block
    answers = {"refused": 0, "forked": 0}
    try:
        for i in range(300):
            kind = i % 4
            message = (rng.randbytes(rng.randrange(1, 64)) if kind == 0 else
                       good[:rng.randrange(1, len(good))] if kind == 1 else
                       bytes(rng.choice(b"0123456789\0-x") for _ in range(rng.randrange(1, 40))) if kind == 2 else
                       good.replace(b"2\0", str(rng.choice([-1, 0, 3, 1 << 40])).encode() + b"\0", 1))
            status_read, status_write = os.pipe2(os.O_CLOEXEC)
            fds = [status_write, out][:rng.choice([0, 1, 2, 2])]
            server.sock.sendmsg([message], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))] if fds else [])
            os.close(status_write)
            data, ancillary, _, _ = server.sock.recvmsg(4, socket.CMSG_SPACE(4))
            pid = int.from_bytes(data, "little", signed=True)
            assert len(data) == 4 and (pid == 0) == (not ancillary), message
            answers["forked" if ancillary else "refused"] += 1
            if ancillary:  # it named a command line: a child that ends, and is reported
                os.close(array.array("i", ancillary[0][2])[0])
                assert len(os.read(status_read, 4)) == 4
            os.close(status_read)
        assert answers["refused"] > 100 and answers["forked"] > 0, answers
        child = server.spawn([probe, "exit=7"], out, ())
        assert child is not None and child.wait() == 7
    finally:
        os.close(out)
        server.close()
