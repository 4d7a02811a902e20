"""A warm Python for the documentation's blocks (tests/repository/test_docs.py): most of a short command's time is
its imports (torch, transformers' model classes, datasets, accelerate: seconds on a CPU), paid again by every block.
One interpreter imports them once (never this repository's packages) and forks a child for each program a page runs,
which then runs it as a fresh interpreter would: a page's ten commands pay for the imports once.

- the server (`serve`): imports the modules, says `ready`, then for each request forks a child that takes the
  request's standard streams and folder and runs the program as `__main__` (`sys.argv`, `sys.path[0]` as Python sets
  them), then exits as an interpreter does (non-daemon threads joined, atexit handlers run, streams flushed). A
  program's imports of anything else happen in the child, as in a fresh interpreter.
- the client (`client`): what `python`, and each console script of this environment, names on the blocks' PATH
  (`server` writes the launchers: `launched_programs`). It sends its arguments, folder, environment and standard
  streams (their file descriptors), exits with the program's status (a program killed by a signal: the client too)
  and passes SIGINT, SIGTERM and SIGHUP on to it.
- what a child could not run as a fresh interpreter would, the server answers "no" and the client replaces itself with
  the real interpreter: a command line with an option (`-u`, `-X ...`) or a program on standard input, and an
  environment other than the one the server started with (the libraries read theirs at import: a block's
  `VAR=value python ...` runs fresh).

`DOCS_FRESH_PYTHON=1` turns it off: every block's programs start fresh (to tell a block's fault from this one's).
tests/repository/test_warm_python.py holds a served program to what a fresh interpreter shows. Standard library
only: the client starts with `python -S`.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import socket
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

# what the server imports before it forks: the libraries that make a command's start slow
WARM_MODULES = ("torch", "transformers.modeling_utils", "datasets", "accelerate")
# variables that bash sets or changes for the programs it starts: not compared
SHELL_VARIABLES = {"_", "SHLVL", "PWD", "OLDPWD"}
SOCKET_VARIABLE = "WARM_PYTHON_SOCKET"
REFUSED = -1
READY_TIMEOUT_S = 300
MAX_SOCKET_PATH = 100  # a Unix socket's path has room for 107 bytes


def send_message(connection: socket.socket, message: dict, fds: list[int] | None = None) -> None:
    data = json.dumps(message).encode()
    framed = struct.pack("!I", len(data)) + data
    if fds:
        socket.send_fds(connection, [framed], fds)
    else:
        connection.sendall(framed)


def receive_exactly(connection: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = connection.recv(size - len(data))
        if not chunk:
            raise EOFError("the other side closed the connection")
        data += chunk
    return data


def receive_message(connection: socket.socket, fds: int = 0) -> tuple[dict, list[int]]:
    """A message, and the file descriptors that came with its first bytes (`fds`: how many at most)."""
    received: list[int] = []
    if fds:
        head, received, _, _ = socket.recv_fds(connection, 4, fds)
        head += receive_exactly(connection, 4 - len(head))
    else:
        head = receive_exactly(connection, 4)
    (size,) = struct.unpack("!I", head)
    return json.loads(receive_exactly(connection, size)), received


# ----------------------------------------------------------------------------------------------------------------
# the client


def client(real_python: str, arguments: list[str]) -> None:
    """Run `python ARGUMENTS` in a child of the server; where the server says no (or is not there), as the real
    interpreter."""
    try:
        connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        connection.connect(os.environ[SOCKET_VARIABLE])
        request = {"argv": arguments, "cwd": os.getcwd(), "env": dict(os.environ)}
        send_message(connection, request, [0, 1, 2])
        answer, _ = receive_message(connection)
    except (KeyError, OSError, EOFError):
        answer = {"pid": REFUSED}
    if answer["pid"] == REFUSED:
        os.execv(real_python, [real_python, *arguments])

    def forward(signum, frame):
        send_message(connection, {"signal": signum})

    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, forward)
    answer, _ = receive_message(connection)
    status = answer["status"]
    if status < 0:  # the program was killed by a signal: so is its client
        signal.signal(-status, signal.SIG_DFL)
        os.kill(os.getpid(), -status)
    sys.exit(status)


# ----------------------------------------------------------------------------------------------------------------
# the server


def runnable(argv: list[str]) -> bool:
    """`python SCRIPT ...`, `python -c CODE ...` or `-m` and a module; any other option, or a program on standard
    input (`python`, `python -`), is the real interpreter's."""
    if not argv:
        return False
    if argv[0] in ("-m", "-c"):
        return len(argv) >= 2
    return not argv[0].startswith("-")


def without_shell_variables(environment: dict[str, str]) -> dict[str, str]:
    return {key: value for key, value in environment.items() if key not in SHELL_VARIABLES}


def run_code(source: str | bytes, filename: str, **attributes) -> None:
    """Run `source` as the module `__main__` (a new one, with `attributes`), as the interpreter runs its program."""
    main = type(sys)("__main__")
    main.__dict__.update(__builtins__=__builtins__, **attributes)
    sys.modules["__main__"] = main
    exec(compile(source, filename, "exec", dont_inherit=True), main.__dict__)  # no `from __future__` of this file


def run_as_main(argv: list[str]) -> int:
    """Run the program as Python runs the one on its command line; returns the exit status."""
    import importlib.machinery
    import runpy

    sys.orig_argv = [sys.executable, *argv]
    try:
        if argv[0] == "-c":
            sys.argv, sys.path[0] = ["-c", *argv[2:]], ""
            run_code(argv[1], "<string>", __spec__=None, __loader__=importlib.machinery.BuiltinImporter)
        elif argv[0] == "-m":
            sys.argv, sys.path[0] = [argv[1], *argv[2:]], os.getcwd()  # runpy puts the module's file first
            runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        else:
            path = os.path.abspath(argv[0])  # its __file__; its folder, links resolved, first on sys.path
            sys.argv, sys.path[0] = list(argv), os.path.dirname(os.path.realpath(argv[0]))
            loader = importlib.machinery.SourceFileLoader("__main__", path)
            with open(path, "rb") as source:
                run_code(source.read(), path, __file__=path, __cached__=None, __spec__=None, __loader__=loader)
        return 0
    except SystemExit as stop:
        if stop.code is None or isinstance(stop.code, int):
            return stop.code or 0
        print(stop.code, file=sys.stderr)
        return 1
    except BaseException as error:  # shown as the interpreter shows it: from the program's frames on
        trace = error.__traceback__
        while trace is not None and trace.tb_frame.f_code.co_filename == __file__:
            trace = trace.tb_next
        sys.excepthook(type(error), error.with_traceback(trace), trace)
        return 1


def child(request: dict, fds: list[int]) -> None:
    """In the forked child: take the client's streams and folder, run its program, exit as an interpreter does."""
    status = 1
    try:
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        os.chdir(request["cwd"])
        status = run_as_main(request["argv"])
        import atexit
        import threading

        threading._shutdown()  # an interpreter's end: the threads that are not daemons first, then atexit
        atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(status & 0xFF)


def serve(address: str, modules: list[str]) -> None:
    import importlib
    import select

    started_with = without_shell_variables(dict(os.environ))  # before the imports, which may add to it
    for module in modules:
        importlib.import_module(module)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(address)
    listener.listen(16)
    print("ready", flush=True)
    running: dict[int, socket.socket] = {}  # a child's pid: its client's connection
    while True:
        readable, _, _ = select.select([listener, *running.values()], [], [], 0.02)
        for ready in readable:
            if ready is listener:
                connection, _ = listener.accept()
                request, fds = receive_message(connection, fds=3)
                if not runnable(request["argv"]) or without_shell_variables(request["env"]) != started_with:
                    send_message(connection, {"pid": REFUSED})
                    connection.close()
                    for fd in fds:
                        os.close(fd)
                    continue
                pid = os.fork()
                if pid == 0:
                    for other in (listener, connection, *running.values()):
                        other.close()
                    child(request, fds)
                for fd in fds:
                    os.close(fd)
                send_message(connection, {"pid": pid})
                running[pid] = connection
            else:  # a signal for the program of this client
                pid = next(pid for pid, connection in running.items() if connection is ready)
                try:
                    message, _ = receive_message(ready)
                    os.kill(pid, message["signal"])
                except (EOFError, OSError):
                    pass
        while running:
            pid, wait_status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                break
            connection = running.pop(pid)
            with contextlib.suppress(OSError):
                send_message(connection, {"status": os.waitstatus_to_exitcode(wait_status)})
            connection.close()


def launched_programs() -> dict[str, list[str]]:
    """The names the client answers to on PATH, and the arguments it puts first: `python` and `python3`, and each
    program of this environment that runs with this interpreter (`#!` and its path: a console script such as
    `sinusoidal-encoder-evaluate` or `accelerate`), run as its script."""
    programs = {"python": [], "python3": []}
    shebang = f"#!{sys.executable}\n".encode()
    for path in sorted(Path(sys.executable).parent.iterdir()):
        with contextlib.suppress(OSError):
            if path.is_file() and path.open("rb").read(len(shebang)) == shebang:
                programs[path.name] = [str(path)]
    return programs


@contextlib.contextmanager
def server(environment: dict[str, str], cwd: Path, folder: Path, modules: tuple[str, ...] = WARM_MODULES):
    """A warm server for programs run in `environment` from `cwd`, `modules` imported; yields the environment the
    blocks run in (the launchers' folder first on PATH, the server's address). The launchers and the server's log
    (server.log) go into `folder`. Yields `environment` as it is (no server) under DOCS_FRESH_PYTHON=1, or where the
    socket's path would be too long."""
    if os.environ.get("DOCS_FRESH_PYTHON") == "1":
        yield environment
        return
    address = Path(tempfile.mkdtemp(prefix="warm-")) / "socket"
    if len(str(address)) > MAX_SOCKET_PATH:
        address.parent.rmdir()
        yield environment
        return
    folder.mkdir(parents=True, exist_ok=True)
    for name, program in launched_programs().items():
        client_command = [sys.executable, "-S", __file__, "client", *program]
        (folder / name).write_text(f'#!/usr/bin/env bash\nexec {shlex.join(client_command)} "$@"\n')
        (folder / name).chmod(0o755)
    environment = dict(environment, PATH=os.pathsep.join([str(folder), environment["PATH"]]))
    environment[SOCKET_VARIABLE] = str(address)
    log = (folder / "server.log").open("w")
    process = subprocess.Popen(
        [sys.executable, __file__, "serve", str(address), *modules],
        cwd=cwd,
        env=environment,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=log,
        text=True,
        start_new_session=True,  # its children with it: ended together
    )
    try:
        import select

        readable, _, _ = select.select([process.stdout], [], [], READY_TIMEOUT_S)
        if not readable or process.stdout.readline().strip() != "ready":
            raise RuntimeError(f"the warm Python did not start: {(folder / 'server.log').read_text()[-3000:]}")
        yield environment
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        process.stdout.close()
        log.close()
        address.unlink(missing_ok=True)
        address.parent.rmdir()


if __name__ == "__main__":
    if sys.argv[1] == "serve":
        serve(sys.argv[2], sys.argv[3:])
    elif sys.argv[1] == "client":
        client(sys.executable, sys.argv[2:])
