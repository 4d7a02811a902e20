"""The warm Python of the documentation's blocks (tests/repository/warm_python.py) runs a program as a fresh
interpreter does: a probe reports what a program sees (arguments, `sys.path[0]`, `__name__`, `__file__`, folder,
standard input, environment) and how it ends (status, atexit, threads, a signal), run through the client and by the
real interpreter, and the reports must be equal; what the server cannot run so runs fresh. The server imports a
light module here (`WARM`): whether the program finds it imported tells a served run from a fresh one."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest
import warm_python

PROBE_MODULE = "probe"  # probe.py, run as a module
WARM = "email.mime.text"  # imported by the server, never by a fresh interpreter's start
PROBE = """\
import atexit, json, os, sys, threading, time

arguments = sys.argv[1:]
if "--stdin" in arguments:
    arguments.append(sys.stdin.read())
report = {
    "argv": sys.argv, "path0": sys.path[0], "name": __name__, "file": globals().get("__file__"), "cwd": os.getcwd(),
    "variable": os.environ.get("PROBE_VARIABLE"), "arguments": arguments, "main": sys.modules["__main__"].__dict__ is
    globals(), "ours": sorted(name for name in sys.modules if name.startswith("sinusoidal_encoder")),
}
print(json.dumps(report))
print("to stderr", file=sys.stderr)
sys.stdout.flush()
if "--warm" in arguments:
    print("WARM", WARM_MODULE in sys.modules)
if "--atexit" in arguments:
    atexit.register(print, "atexit ran")
if "--thread" in arguments:
    threading.Thread(target=lambda: (time.sleep(0.3), print("thread joined"))).start()
if "--sleep" in arguments:
    print("sleeping", flush=True)
    time.sleep(60)
if "--raise" in arguments:
    raise ValueError("the probe's error")
if "--exit" in arguments:
    value = arguments[arguments.index("--exit") + 1]
    sys.exit(int(value) if value.isdigit() else value)
""".replace("WARM_MODULE", repr(WARM))


@pytest.fixture(scope="module")
def warm(tmp_path_factory):
    """A folder holding the probe (as a script, a module, and a script in a linked folder), and the environment of a
    server started there."""
    work = tmp_path_factory.mktemp("work")
    (work / "probe.py").write_text(PROBE)
    (work / "real").mkdir()
    (work / "real" / "probe.py").write_text(PROBE)
    (work / "linked").symlink_to(work / "real", target_is_directory=True)
    environment = dict(os.environ, PATH=os.pathsep.join([os.path.dirname(sys.executable), os.environ["PATH"]]))
    environment.pop("DOCS_FRESH_PYTHON", None)
    folder = tmp_path_factory.mktemp("launchers")
    with warm_python.server(environment, work, folder, modules=(WARM,)) as served:
        assert warm_python.SOCKET_VARIABLE in served
        yield work, environment, served


def run(command: str, cwd, environment, **options) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", "-c", command], cwd=cwd, env=environment, capture_output=True, text=True, timeout=60, **options
    )


def outcome(proc: subprocess.CompletedProcess) -> tuple:
    """What a run shows, the probe's report aside from whether the server's module was there."""
    lines = [line for line in proc.stdout.splitlines() if not line.startswith("WARM ")]
    stderr = proc.stderr.replace(sys.executable, "PYTHON")
    return proc.returncode, lines, stderr


COMMANDS = [
    "python probe.py a 'b c'",
    "python linked/probe.py",  # sys.path[0]: the script's folder, the link resolved
    f"python -m {PROBE_MODULE} x",
    "python -c 'exec(open(\"probe.py\").read())' x y",
    "python probe.py --exit 3",
    "python probe.py --exit 'a message'",
    "python probe.py --raise",
    "echo from a pipe | python probe.py --stdin",
    "python probe.py --atexit --thread",
    "python3 probe.py",
]


@pytest.mark.parametrize("command", COMMANDS)
def test_a_served_program_runs_as_in_a_fresh_interpreter(warm, command):
    work, fresh, served = warm
    expected, got = run(command + " --warm", work, fresh), run(command + " --warm", work, served)
    assert "WARM True" in got.stdout, got.stdout + got.stderr  # it was served
    assert "WARM False" in expected.stdout
    assert outcome(got) == outcome(expected)
    assert json.loads(got.stdout.splitlines()[0])["ours"] == []  # the server imports none of the repository


@pytest.mark.parametrize(
    "command",
    ["python -u probe.py", "PROBE_VARIABLE=set python probe.py", "python - < probe.py"],
    ids=["an option", "another environment", "a program on standard input"],
)
def test_what_the_server_cannot_run_as_a_fresh_interpreter_runs_fresh(warm, command):
    work, fresh, served = warm
    got = run(command + " --warm", work, served)
    assert "WARM False" in got.stdout, got.stdout + got.stderr
    assert outcome(got) == outcome(run(command + " --warm", work, fresh))


def test_a_console_script_of_this_environment_is_served_as_its_script(warm):
    work, fresh, served = warm
    scripts = os.path.dirname(sys.executable)
    launched = warm_python.launched_programs()
    assert launched["sinusoidal-encoder-evaluate"] == [os.path.join(scripts, "sinusoidal-encoder-evaluate")]
    assert launched["python"] == [] and "activate" not in launched  # a shell script is no Python program
    got, expected = run("pip --version", work, served), run("pip --version", work, fresh)
    assert got.returncode == expected.returncode == 0 and got.stdout == expected.stdout


def test_a_signal_to_the_client_reaches_the_program_and_ends_both_alike(warm):
    work, fresh, served = warm
    for environment in (served, fresh):
        process = subprocess.Popen(
            ["python", "probe.py", "--sleep"], cwd=work, env=environment, stdout=subprocess.PIPE, text=True
        )
        assert json.loads(process.stdout.readline())["argv"] == ["probe.py", "--sleep"]
        assert process.stdout.readline() == "sleeping\n"
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == -signal.SIGTERM
        process.stdout.close()
