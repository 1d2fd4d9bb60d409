"""OpenSSH on loopback, measured as `bench/compare.py` measures the exec-servers: a throwaway
host key, client key and config made here, one connection multiplexed with ControlMaster (so a
command costs a channel, not a handshake), each command through an `ssh` client process."""

from __future__ import annotations

import os
import selectors
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from servers import PeakRss, children, cpu_seconds
from workloads import GIB, LINES


class Sshd:
    """sshd on loopback with a throwaway host key, client key and config; one multiplexed
    connection (ControlMaster) carries every command."""

    def __init__(self, binary: str) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="bench-sshd-"))
        d = self.dir
        for name in ("host_key", "client_key"):
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(d / name)],
                           check=True)
        shutil.copy(d / "client_key.pub", d / "authorized_keys")
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        (d / "sshd_config").write_text(
            f"Port {self.port}\nListenAddress 127.0.0.1\nHostKey {d}/host_key\n"
            f"PidFile {d}/sshd.pid\nAuthorizedKeysFile {d}/authorized_keys\nStrictModes no\n"
            "UsePAM no\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n"
            "PermitRootLogin prohibit-password\nMaxSessions 1000\nMaxStartups 1000\n"
            "LogLevel ERROR\n"
        )
        os.makedirs("/run/sshd", exist_ok=True)  # its privilege-separation directory
        self.process = subprocess.Popen([binary, "-D", "-e", "-f", str(d / "sshd_config")],
                                        stderr=subprocess.DEVNULL)
        self.pid = self.process.pid
        self.base = ["ssh", "-p", str(self.port), "-i", str(d / "client_key"),
                     "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
                     "-o", "LogLevel=ERROR", "-o", f"ControlPath={d}/control", "-T"]
        for _ in range(100):
            master = subprocess.run([*self.base, "-o", "ControlMaster=yes", "-o",
                                     "ControlPersist=yes", "-N", "-f", "127.0.0.1"],
                                    capture_output=True, timeout=30)
            if master.returncode == 0:
                break
            time.sleep(0.1)
        else:
            raise RuntimeError(f"ssh master did not connect: {master.stderr.decode()}")
        self.argv = [*self.base, "-o", "ControlMaster=no", "127.0.0.1"]

    def daemons(self) -> list[int]:
        """The sshd processes: the listener and the connection's privilege-separated pair."""
        found, queue = [], [self.pid]
        while queue:
            pid = queue.pop()
            try:
                comm = Path(f"/proc/{pid}/comm").read_text().strip()
            except FileNotFoundError:
                continue
            if comm.startswith("sshd"):
                found.append(pid)
                queue += children(pid)
        return found

    def stop(self) -> None:
        subprocess.run([*self.base, "-O", "exit", "127.0.0.1"], capture_output=True)
        self.process.terminate()
        self.process.wait(10)
        shutil.rmtree(self.dir, ignore_errors=True)


def ssh_stream(sshd: Sshd, size: int) -> tuple[float, float, float]:
    server_cpu = cpu_seconds(sshd.daemons())
    t0, cpu0 = time.perf_counter(), time.process_time()
    proc = subprocess.Popen([*sshd.argv, "head", "-c", str(size), "/dev/zero"],
                            stdout=subprocess.PIPE)
    assert proc.stdout is not None
    got, fd = 0, proc.stdout.fileno()
    while data := os.read(fd, 1 << 20):
        got += len(data)
    proc.wait()
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    server_cpu = cpu_seconds(sshd.daemons()) - server_cpu
    assert got == size, got
    return size / wall / 1e6, cpu / wall, server_cpu * GIB / size


def ssh_latency(sshd: Sshd, runs: int) -> list[float]:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run([*sshd.argv, "true"], check=True)
        times.append(time.perf_counter() - t0)
    return times


def ssh_fanout(sshd: Sshd, count: int) -> tuple[float, float, float]:
    with PeakRss(sshd.daemons) as rss:
        t0 = time.perf_counter()
        procs = [subprocess.Popen([*sshd.argv, "seq", "1", str(LINES)], stdout=subprocess.PIPE)
                 for _ in range(count)]
        selector = selectors.DefaultSelector()
        for proc in procs:
            assert proc.stdout is not None
            selector.register(proc.stdout, selectors.EVENT_READ)
        unstarted, started_at = set(range(count)), 0.0
        index = {proc.stdout.fileno(): i  # type: ignore[union-attr]
                 for i, proc in enumerate(procs)}
        while selector.get_map():
            for key, _ in selector.select():
                data = os.read(key.fd, 1 << 16)
                unstarted.discard(index[key.fd])
                if not unstarted and not started_at:
                    started_at = time.perf_counter() - t0
                if not data:
                    selector.unregister(key.fileobj)
        for proc in procs:
            proc.wait()
        closed_at = time.perf_counter() - t0
    return started_at, closed_at, rss.peak
