"""deploy/: each recipe's server command line, parsed out of the recipe, really serves.

For the Containerfile, the systemd unit, the Kubernetes Deployment, the agent-sandbox
SandboxTemplate and the Nomad job, the test takes the `execproto serve` arguments the recipe
gives and starts the installed `execproto` with exactly those, but for what cannot be the same
here: the listen address becomes wss://127.0.0.1:0, the certificate, key and token paths
become files the test makes (a throwaway CA's certificate for 127.0.0.1, tests/certs.py), the
writable roots directories it makes. Then every probe path the recipe names must answer 200,
/metrics must need the token, and a command must run inside the recipe's sandbox floor:
writing in a writable root, not beside the secrets. So an option that does not exist, a probe
path that is wrong or a floor that cannot work fails here. The unit's command line runs once
more as systemd would start it for the unit's user and privilege settings (under setpriv).

The rest is what can be checked without the orchestrator: `systemd-analyze verify` on the
unit; the Kubernetes manifests rendered by `kubectl kustomize` (offline, through
`kubectl label --local`) and their numbers; the Containerfile's inputs and its HEALTHCHECK
command, run against a live server and a stopped one; the Nomad job read with regular
expressions (there is no nomad here). deploy/README.md says which is which.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import shlex
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from fnmatch import fnmatch
from pathlib import Path
from typing import Any

import pytest
from certs import WHY_MISSING, Certs, make_certs

from .sandboxes import needs_bwrap

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
CONTAINERFILE = DEPLOY / "Containerfile"
UNIT = DEPLOY / "systemd" / "execproto.service"
NOMAD = DEPLOY / "nomad" / "execproto.nomad.hcl"
KUBERNETES = DEPLOY / "kubernetes"
AGENT_SANDBOX = KUBERNETES / "agent-sandbox"
# The console script pip installed beside this interpreter: what the recipes run.
EXECPROTO = Path(sys.executable).with_name("execproto")
TOKEN = "deploy-test-token"
SECRET_OPTIONS = ("--tls-cert", "--tls-key", "--auth-token-file")
# Nomad clients refuse a kill_timeout above their max_kill_timeout, 30 s by default.
NOMAD_MAX_KILL_TIMEOUT = 30.0
Json = dict[str, Any]


# --- reading the recipes -------------------------------------------------------------------


def option(argv: list[str], name: str) -> list[str]:
    """Every value ``name`` is given in ``argv``."""
    return [argv[i + 1] for i, word in enumerate(argv[:-1]) if word == name]


def drain_grace(argv: list[str]) -> float:
    (value,) = option(argv, "--drain-grace")
    return float(value)


def listen_port(argv: list[str]) -> int:
    (address,) = option(argv, "--listen")
    found = re.fullmatch(r"wss://0\.0\.0\.0:(\d+)", address)
    assert found, f"the recipe listens on {address!r}, not wss://0.0.0.0:PORT"
    return int(found[1])


def seconds(text: str) -> float:
    found = re.fullmatch(r"(\d+(?:\.\d+)?)\s*(ms|s|min|m)?", text.strip())
    assert found, f"not a duration: {text!r}"
    return float(found[1]) * {"ms": 0.001, "s": 1, "min": 60, "m": 60, None: 1}[found[2]]


def instructions(path: Path) -> list[tuple[str, str]]:
    """A Containerfile's instructions, (KEYWORD, rest), continuations joined and comment lines
    dropped, as the builder reads them."""
    out: list[tuple[str, str]] = []
    pending = ""
    for line in path.read_text().splitlines():
        if line.lstrip().startswith("#"):
            continue
        pending += line.rstrip()
        if pending.endswith("\\"):
            pending = pending[:-1] + " "
            continue
        if pending.strip():
            keyword, _, rest = pending.strip().partition(" ")
            out.append((keyword.upper(), rest.strip()))
        pending = ""
    return out


def containerfile() -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for keyword, rest in instructions(CONTAINERFILE):
        found.setdefault(keyword, []).append(rest)
    return found


def containerfile_argv() -> list[str]:
    found = containerfile()
    return [*json.loads(found["ENTRYPOINT"][-1]), *json.loads(found["CMD"][-1])]


def healthcheck() -> list[str]:
    """The HEALTHCHECK's command (exec form)."""
    (line,) = containerfile()["HEALTHCHECK"]
    _, _, command = line.partition(" CMD ")
    return list(json.loads(command))


def copies() -> dict[str, str]:
    """What the Containerfile copies from the build context: destination -> source."""
    out = {}
    for line in containerfile()["COPY"]:
        words = shlex.split(line)
        assert not any(w.startswith("--from") for w in words), line
        *sources, destination = words
        for source in sources:
            target = destination + Path(source).name if destination.endswith("/") else destination
            out[target] = source
    return out


def unit() -> dict[str, list[str]]:
    """The unit's settings, name -> values, continuations joined."""
    settings: dict[str, list[str]] = {}
    pending = ""
    for line in UNIT.read_text().splitlines():
        if not pending and (line.startswith(("#", ";", "[")) or not line.strip()):
            continue
        pending += line.strip()
        if pending.endswith("\\"):
            pending = pending[:-1] + " "
            continue
        name, _, value = pending.partition("=")
        settings.setdefault(name.strip(), []).append(value.strip())
        pending = ""
    return settings


def unit_argv() -> list[str]:
    """ExecStart's command line, %d (the credentials directory) written /run/credentials."""
    (command,) = unit()["ExecStart"]
    return shlex.split(command.replace("%d", "/run/credentials"))


def kubectl_objects(directory: Path) -> list[Json]:
    """The objects `kubectl kustomize` renders from ``directory``, as JSON, offline: `label
    --local` parses them without a cluster (a label added, then dropped)."""
    if shutil.which("kubectl") is None:
        pytest.skip("kubectl is not installed")
    done = subprocess.run(["kubectl", "label", "--local", "-k", str(directory), "-o", "json",
                           "execproto-deploy-check=yes"], capture_output=True, text=True,
                          timeout=30)
    assert done.returncode == 0, done.stderr
    decoder, text, at, objects = json.JSONDecoder(), done.stdout, 0, []
    while text[at:].strip():
        at += len(text[at:]) - len(text[at:].lstrip())
        obj, at = decoder.raw_decode(text, at)
        del obj["metadata"]["labels"]["execproto-deploy-check"]
        objects.append(obj)
    return objects


def kind(objects: list[Json], name: str) -> Json:
    (found,) = [o for o in objects if o["kind"] == name]
    return found


def pod_spec(obj: Json) -> Json:
    if obj["kind"] == "SandboxTemplate":
        return dict(obj["spec"]["podTemplate"]["spec"])
    return dict(obj["spec"]["template"]["spec"])


def container(obj: Json) -> Json:
    (only,) = pod_spec(obj)["containers"]
    return dict(only)


def kubernetes_argv(obj: Json) -> list[str]:
    spec = container(obj)
    return [*spec["command"], *spec["args"]]


def probes(obj: Json) -> dict[str, Json]:
    spec = container(obj)
    return {name: spec[name]["httpGet"] for name in
            ("startupProbe", "readinessProbe", "livenessProbe")}


def nomad() -> str:
    text = NOMAD.read_text()
    return "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))


def nomad_value(key: str) -> str:
    (value,) = re.findall(rf'^\s*{key}\s*=\s*"([^"]*)"', nomad(), re.MULTILINE)
    return str(value)


def nomad_argv() -> list[str]:
    found = re.search(r"^\s*args\s*=\s*\[(.*?)\]", nomad(), re.MULTILINE | re.DOTALL)
    assert found, "the Nomad job has no args"
    return [nomad_value("command"), *re.findall(r'"([^"]*)"', found[1])]


def nomad_blocks(name: str) -> list[str]:
    """The bodies of every ``name { ... }`` block (no nested braces in them but the one
    check_restart, which stays inside its check)."""
    text, bodies = nomad(), []
    for start in re.finditer(rf"^\s*{name}\s*\{{", text, re.MULTILINE):
        depth, at = 1, start.end()
        while depth:
            depth += {"{": 1, "}": -1}.get(text[at], 0)
            at += 1
        bodies.append(text[start.end():at - 1])
    return bodies


def nomad_probes() -> list[str]:
    paths = []
    for check in nomad_blocks("check"):
        assert re.search(r'protocol\s*=\s*"https"', check), check
        paths += re.findall(r'path\s*=\s*"([^"]+)"', check)
    return paths


# --- running a recipe's command line ------------------------------------------------------


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    if WHY_MISSING:
        pytest.skip(WHY_MISSING)
    return make_certs(tmp_path_factory.mktemp("deploy-tls"))


class Served:
    """`execproto serve` with a recipe's arguments, the local parts replaced."""

    def __init__(self, argv: list[str], certs: Certs, where: Path, prefix: tuple[str, ...] = (),
                 owner: int | None = None) -> None:
        """``prefix``: a command the server runs under; ``owner``: the uid it then runs as,
        which gets its files (``where`` must be a directory that user can reach)."""
        assert Path(argv[0]).name == "execproto", argv
        assert argv[1] == "serve", argv
        self.where = where
        self.token = where / "token"
        self.token.write_text(TOKEN + "\n")
        cert, key = certs.cert, certs.key
        if owner is not None:
            cert, key = Path(shutil.copy(cert, where)), Path(shutil.copy(key, where))
        local = {"--tls-cert": str(cert), "--tls-key": str(key),
                 "--auth-token-file": str(self.token)}
        self.roots: list[Path] = []
        command = [str(EXECPROTO)] if EXECPROTO.exists() else [sys.executable, "-m",
                                                               "execproto.adapters"]
        for i, word in enumerate(argv[1:], 1):
            before = argv[i - 1]
            if before == "--listen":
                word = "wss://127.0.0.1:0"
            elif before in local:
                word = local[before]
            elif before == "--writable-root":
                self.roots.append(where / f"root{len(self.roots)}")
                self.roots[-1].mkdir()
                word = str(self.roots[-1])
            command.append(word)
        if owner is not None:
            for path in (where, self.token, cert, key, *self.roots):
                os.chown(path, owner, owner)
        self.process = subprocess.Popen([*prefix, *command], stdin=subprocess.DEVNULL,
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                        text=True)
        assert self.process.stdout is not None
        # A server that hangs before it prints its address is killed, so the read ends.
        watchdog = threading.Timer(30, self.process.kill)
        watchdog.start()
        try:
            self.url = self.process.stdout.readline().strip()
        finally:
            watchdog.cancel()
        if not self.url.startswith("wss://127.0.0.1:"):
            self.process.kill()
            raise AssertionError(f"{command} printed {self.url!r}:\n"
                                 f"{self.process.communicate()[1]}")
        self.port = int(self.url.rsplit(":", 1)[1])
        self.context = ssl.create_default_context(cafile=str(certs.ca))
        self.ca = certs.ca

    def get(self, path: str, token: str | None = None) -> int:
        connection = http.client.HTTPSConnection("127.0.0.1", self.port, context=self.context,
                                                 timeout=10)
        try:
            headers = {"Authorization": f"Bearer {token}"} if token else {}
            connection.request("GET", path, headers=headers)
            return connection.getresponse().status
        finally:
            connection.close()

    def stop(self) -> str:
        """SIGTERM, as every recipe's orchestrator sends; it must exit 0, cleanly."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            _, log = self.process.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            _, log = self.process.communicate()
            raise AssertionError(f"the server did not stop:\n{log}") from None
        assert self.process.returncode == 0 and "Traceback" not in log, log
        return log


Serve = Callable[[list[str]], Served]


@pytest.fixture(scope="module")
def spelled_out() -> set[str]:
    """The options `execproto serve --help` names. argparse takes an unambiguous prefix
    (--drain-grac) too, which a new option could make ambiguous: recipes spell them out."""
    done = subprocess.run([sys.executable, "-m", "execproto.adapters", "serve", "--help"],
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    return set(re.findall(r"(?<![\w-])--[a-z][a-z-]*", done.stdout))


@pytest.fixture
def serve(certs: Certs, tmp_path: Path, spelled_out: set[str]) -> Iterator[Serve]:
    started: list[Served] = []

    def start(argv: list[str]) -> Served:
        options = {word for word in argv if word.startswith("--")}
        assert options <= spelled_out, f"not options of execproto serve: {options - spelled_out}"
        started.append(Served(argv, certs, tmp_path))
        return started[-1]

    yield start
    for server in started:
        if server.process.poll() is None:
            server.process.kill()
            server.process.communicate()


def serves(server: Served, probe_paths: list[str]) -> None:
    """What every recipe's server must do: its probes, its token, its sandbox floor."""
    assert probe_paths
    for path in probe_paths:
        assert server.get(path) == 200, path
    assert server.get("/metrics") == 401  # the token file is in force
    assert server.get("/metrics", TOKEN) == 200
    assert server.roots, "the recipe names no writable root"
    from execproto.adapters import client

    root, outside = server.roots[0], server.where / "outside"
    script = 'echo sandboxed > "$0/written" && cat "$0/written"; echo no > "$1" 2>/dev/null'
    code, out, err = client.run(server.url, ["sh", "-c", script, str(root), str(outside)],
                                cwd=str(root), env={"PATH": "/usr/bin:/bin"}, token=TOKEN,
                                ca_file=server.ca, timeout=60)
    assert out == b"sandboxed\n", (code, out, err)
    assert code != 0 and not outside.exists(), "the floor let it write outside"
    server.stop()


# --- the command lines, run -----------------------------------------------------------------


@needs_bwrap
def test_the_systemd_command_line_serves(serve: Serve) -> None:
    # The unit names no probe: a local monitor would use the Containerfile's.
    serves(serve(unit_argv()), ["/livez", "/readyz"])


@needs_bwrap
@pytest.mark.parametrize("directory", [KUBERNETES, AGENT_SANDBOX], ids=["deployment",
                                                                        "agent-sandbox"])
def test_the_kubernetes_command_line_serves(serve: Serve, directory: Path) -> None:
    pod = kind(kubectl_objects(directory),
               "Deployment" if directory == KUBERNETES else "SandboxTemplate")
    serves(serve(kubernetes_argv(pod)), [p["path"] for p in probes(pod).values()])


@needs_bwrap
def test_the_nomad_command_line_serves(serve: Serve) -> None:
    serves(serve(nomad_argv()), nomad_probes())


@needs_bwrap  # every recipe runs its processes inside bubblewrap
def test_the_containerfile_command_line_serves_and_its_healthcheck_follows(serve: Serve) -> None:
    """The image's ENTRYPOINT and CMD serve; the HEALTHCHECK command itself, on this Python,
    exits 0 while they do, and not 0 on a wrong path or once the server has stopped."""
    argv = containerfile_argv()
    server = serve(argv)
    program, script, url = healthcheck()
    assert program == "python"
    assert url == f"https://127.0.0.1:{listen_port(argv)}/livez"
    command = [sys.executable, str(REPO / copies()[script]),
               url.replace(f":{listen_port(argv)}/", f":{server.port}/")]

    def check(path: str = "/livez") -> int:
        run = [*command[:-1], command[-1].replace("/livez", path)]
        return subprocess.run(run, capture_output=True, timeout=30).returncode

    assert check() == 0
    assert check("/nowhere") != 0
    serves(server, [re.sub(r"^https://[^/]+", "", url)])  # stops it
    assert check() != 0


# --- what can be checked without the orchestrator ----------------------------------------


def test_the_systemd_unit_verifies(tmp_path: Path) -> None:
    """`systemd-analyze verify`, on a copy whose ExecStart runs the execproto installed here
    (verify requires the program to exist); anything it says of the unit fails the test,
    since it only warns, and exits 0, on an unknown setting or a bad value."""
    if shutil.which("systemd-analyze") is None:
        pytest.skip("systemd-analyze is not installed")
    if not EXECPROTO.exists():
        pytest.skip(f"no installed execproto beside {sys.executable}")
    program = unit_argv()[0]
    copy = tmp_path / UNIT.name
    copy.write_text(UNIT.read_text().replace(f"ExecStart={program} ", f"ExecStart={EXECPROTO} "))
    assert copy.read_text() != UNIT.read_text()
    done = subprocess.run(["systemd-analyze", "verify", "--man=no", str(copy)],
                          capture_output=True, text=True, timeout=60)
    said = [line for line in (done.stdout + done.stderr).splitlines() if UNIT.name in line]
    assert done.returncode == 0 and not said, done.stdout + done.stderr


def test_the_systemd_unit_stops_and_reloads_as_the_server_needs() -> None:
    settings, argv = unit(), unit_argv()
    # mixed: SIGTERM to the server only, so the drain can wait for running processes; SIGKILL
    # to whatever is left of the cgroup once it has exited or the timeout has run out.
    assert settings["KillMode"] == ["mixed"]
    assert settings["KillSignal"] == ["SIGTERM"]
    assert seconds(settings["TimeoutStopSec"][0]) > drain_grace(argv)
    assert settings["ExecReload"] == ["/bin/kill -HUP $MAINPID"]
    assert settings.get("DynamicUser") == ["yes"] or settings.get("User")
    credentials = {c.split(":", 1)[0] for c in settings["LoadCredential"]}
    for name in SECRET_OPTIONS:
        (path,) = option(argv, name)
        assert path.startswith("/run/credentials/"), (name, path)
        assert path.removeprefix("/run/credentials/") in credentials, (name, path)
    # ProtectSystem=strict leaves writable only the state directory and the private /tmp.
    writable = {f"/var/lib/{d}" for d in settings["StateDirectory"]} | {"/tmp"}
    assert settings["ProtectSystem"] == ["strict"] and settings["PrivateTmp"] == ["yes"]
    assert set(option(argv, "--writable-root")) <= writable
    # Settings that take from bubblewrap what it needs (deploy/systemd says why each).
    for name in ("RestrictNamespaces", "PrivateUsers", "ProtectKernelTunables",
                 "ProtectKernelLogs", "ProtectProc", "ProcSubset", "PrivateDevices",
                 "SystemCallFilter", "MemoryDenyWriteExecute", "ProtectControlGroups"):
        assert name not in settings, name


# What systemd does to the unit's server (DynamicUser=, NoNewPrivileges=,
# CapabilityBoundingSet= and AmbientCapabilities= empty), done by setpriv: a uid of
# DynamicUser's range, no groups, no_new_privs, no capability even in the bounding set.
DYNAMIC_UID = 61184
UNIT_PRIVILEGES = ("setpriv", f"--reuid={DYNAMIC_UID}", f"--regid={DYNAMIC_UID}",
                   "--clear-groups", "--no-new-privs", "--bounding-set=-all", "--inh-caps=-all",
                   "--")


@needs_bwrap
def test_the_systemd_command_line_serves_with_the_units_privileges(certs: Certs) -> None:
    """bubblewrap needs none of what the unit takes away: the unit's command line serves, and
    sandboxes, as such a user. (The unit's other settings need systemd to run.)"""
    settings = unit()
    assert settings["DynamicUser"] == ["yes"] and settings["NoNewPrivileges"] == ["yes"]
    assert settings["CapabilityBoundingSet"] == [""] and settings["AmbientCapabilities"] == [""]
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("starting the server as another user needs root and setpriv")
    # A checkout in a private directory (mode 0700, as a home directory or `mktemp -d` makes)
    # is out of that user's reach, as it would be of the unit's: nothing to run.
    private = next((parent for code in (Path(sys.executable), Path(__file__).resolve())
                    for parent in code.parents if not parent.stat().st_mode & 0o001), None)
    if private is not None:
        pytest.skip(f"the checkout is in {private}, a directory other users cannot enter: "
                    "the unit's user could not run it")
    where = Path(tempfile.mkdtemp(prefix="execproto-deploy-", dir="/var/tmp"))
    server = None
    try:
        server = Served(unit_argv(), certs, where, prefix=UNIT_PRIVILEGES, owner=DYNAMIC_UID)
        serves(server, ["/livez", "/readyz"])
    finally:
        if server is not None and server.process.poll() is None:
            server.process.kill()
            server.process.communicate()
        shutil.rmtree(where, ignore_errors=True)


def test_the_kubernetes_manifests_agree_with_the_server() -> None:
    image = containerfile_argv()
    deployment_objects = kubectl_objects(KUBERNETES)
    service = kind(deployment_objects, "Service")
    sandbox_objects = kubectl_objects(AGENT_SANDBOX)
    pool = kind(sandbox_objects, "SandboxWarmPool")
    template = kind(sandbox_objects, "SandboxTemplate")
    assert template["apiVersion"] == pool["apiVersion"] == "extensions.agents.x-k8s.io/v1beta1"
    assert pool["spec"]["sandboxTemplateRef"]["name"] == template["metadata"]["name"]
    for pod in (kind(deployment_objects, "Deployment"), template):
        argv = kubernetes_argv(pod)
        assert argv == image, "the pod's command line is not the image's"
        assert pod_spec(pod)["terminationGracePeriodSeconds"] > drain_grace(argv)
        spec = container(pod)
        ports = {p["name"]: p["containerPort"] for p in spec["ports"]}
        for name, probe in probes(pod).items():
            assert probe["scheme"] == "HTTPS", name
            assert ports.get(probe["port"], probe["port"]) == listen_port(argv), name
        # /readyz answers 503 while draining: a liveness probe on it would kill a drain.
        assert probes(pod)["livenessProbe"]["path"] == "/livez"
        assert probes(pod)["readinessProbe"]["path"] == "/readyz"
        # The secrets are files of the mounted volume, under the names the server is given.
        mounts = {m["mountPath"]: m["name"] for m in spec["volumeMounts"]}
        volumes = {v["name"]: v for v in pod_spec(pod)["volumes"]}
        for name in SECRET_OPTIONS:
            (path,) = option(argv, name)
            directory, file = path.rsplit("/", 1)
            projected = volumes[mounts[directory]]["projected"]
            items = [i["path"] for s in projected["sources"] for i in s["secret"]["items"]]
            assert file in items, (name, path)
            assert projected["defaultMode"] == 0o440
        # The root file system is read-only: every writable root must be a volume.
        for root in option(argv, "--writable-root"):
            assert "emptyDir" in volumes[mounts[root]], root
        context, pod_context = spec["securityContext"], pod_spec(pod)["securityContext"]
        assert pod_context["runAsNonRoot"] is True and pod_context["runAsUser"] != 0
        assert context["allowPrivilegeEscalation"] is False
        assert context["readOnlyRootFilesystem"] is True
        assert context["capabilities"]["drop"] == ["ALL"]
        # What bubblewrap needs (deploy/Containerfile says why): an unmasked /proc, which
        # needs the pod's own user namespace.
        assert context["procMount"] == "Unmasked" and pod_spec(pod)["hostUsers"] is False
    (port,) = service["spec"]["ports"]
    assert port["targetPort"] == "wss" and port["port"] == listen_port(image)


def test_the_containerfile_builds_from_what_exists() -> None:
    """Not built (no container daemon here): what it copies exists and is not left out of the
    build context by its ignore file, and its numbers agree with its command line."""
    found, argv = containerfile(), containerfile_argv()
    assert found["FROM"] == ["python:3.11-slim"]
    packages = set(" ".join(found["RUN"]).split())
    assert {"bubblewrap", "passt", "ripgrep", "libseccomp2"} <= packages
    ignore = [line for line in (DEPLOY / "Containerfile.dockerignore").read_text().splitlines()
              if line and not line.startswith("#")]

    def sent(path: str) -> bool:
        keep = True
        for pattern in ignore:
            bare = pattern.removeprefix("!")
            if fnmatch(path, bare) or any(fnmatch("/".join(path.split("/")[:n]), bare)
                                          for n in range(1, path.count("/") + 1)):
                keep = pattern.startswith("!")
        return keep

    for source in copies().values():
        assert (REPO / source).exists(), source
        inside = [str(p.relative_to(REPO)) for p in (REPO / source).rglob("*.py")]
        for path in [source, *inside[:3]]:
            assert sent(path), f"{path} is left out of the build context"
    assert not sent("src/adapters/__pycache__/cli.cpython-311.pyc")
    assert found["EXPOSE"] == [str(listen_port(argv))]
    assert found["STOPSIGNAL"] == ["SIGTERM"]
    (user,) = found["USER"]
    assert user.split(":")[0] not in ("0", "root")
    assert "pip install --no-cache-dir /tmp/execproto" in " ".join(found["RUN"])


def test_the_nomad_job_agrees_with_the_server() -> None:
    """Read, not run: there is no nomad here."""
    argv = nomad_argv()
    assert nomad_value("kill_signal") == "SIGTERM"
    assert drain_grace(argv) < seconds(nomad_value("kill_timeout")) <= NOMAD_MAX_KILL_TIMEOUT
    ports = dict(re.findall(r'port\s+"(\w+)"\s*\{\s*static\s*=\s*(\d+)', nomad()))
    (service,) = nomad_blocks("service")
    (label,) = re.findall(r'^\s*port\s*=\s*"(\w+)"', service, re.MULTILINE)
    assert int(ports[label]) == listen_port(argv)
    assert sorted(nomad_probes()) == ["/livez", "/readyz"]
    templates = {re.search(r'destination\s*=\s*"([^"]+)"', t)[1]: t  # type: ignore[index]
                 for t in nomad_blocks("template")}
    for name in SECRET_OPTIONS:
        (path,) = option(argv, name)
        assert path in templates, (name, path)
    token = templates[option(argv, "--auth-token-file")[0]]
    assert re.search(r'change_mode\s*=\s*"signal"', token)
    assert re.search(r'change_signal\s*=\s*"SIGHUP"', token)
    assert nomad().count("{") == nomad().count("}")
