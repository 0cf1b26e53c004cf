"""ssh:// connections of the engine layer (envbuilder.image.engine, whose `connect` uses them).

Over ssh:// every connection is an `ssh HOST docker system dial-stdio` process. The docker SDK's
shell-out adapter makes a new, untracked connection pool per request, so `client.close()` closed
none of them: urllib3's garbage-collection finalizers did, at interpreter exit at the latest, and
the SDK's SSHSocket.close() writes to ssh's stdin first. By then the far side may have ended the
connection (here one idle for 5 minutes was: reproduced with a process that slept 320 s; a remote
host may also go away), ssh has exited, and the write printed a BrokenPipeError traceback at exit.
The classes here are the SDK's with two changes: the adapter knows its sockets (close() ends them
all), and ending an ssh process never writes to it.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import weakref
from typing import Any

import docker
from docker.transport import sshconn

#: How long a terminated `ssh` may take to exit before it is killed.
_SSH_EXIT_TIMEOUT_S = 5.0


def _end_ssh(proc: subprocess.Popen[bytes]) -> None:
    """End one `ssh ... dial-stdio` process, running or not, and reap it; never raises for a
    process that already exited. Closing stdin sends EOF to the far side's dial-stdio."""
    for pipe in (proc.stdin, proc.stdout):
        if pipe is not None:
            with contextlib.suppress(OSError):  # a failed earlier write may still be buffered
                pipe.close()
    if proc.poll() is None:
        proc.terminate()
    try:
        proc.wait(timeout=_SSH_EXIT_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


class _SshProcessSocket(sshconn.SSHSocket):
    """The SDK's socket over an ssh process, known to its adapter while open. Its process is
    ended by close(), or when the socket is garbage-collected or the interpreter exits
    (weakref.finalize), whichever comes first, and only once."""

    def __init__(self, host: str, registry: weakref.WeakSet[_SshProcessSocket]) -> None:
        super().__init__(host)
        self._registry = registry
        self._end: weakref.finalize[[subprocess.Popen[bytes]], _SshProcessSocket] | None = None

    def connect(self, **kwargs: Any) -> None:  # type: ignore[override]  # as the SDK's
        super().connect(**kwargs)
        if self.proc is not None:
            self._end = weakref.finalize(self, _end_ssh, self.proc)
            self._registry.add(self)

    def close(self) -> None:
        self._registry.discard(self)
        if self._end is not None:
            self._end()  # runs _end_ssh once; later calls do nothing
        # The SDK's close() leaves the placeholder socket (never connected) open.
        socket.socket.close(self)


class _SshConnection(sshconn.SSHConnection):
    def __init__(
        self, registry: weakref.WeakSet[_SshProcessSocket], timeout: int, host: str
    ) -> None:
        super().__init__(None, timeout, host)
        self._registry = registry
        self._host = host
        self._timeout_s = timeout

    def connect(self) -> None:
        sock = _SshProcessSocket(self._host, self._registry)
        sock.settimeout(self._timeout_s)
        sock.connect()
        self.sock = sock


class _SshConnectionPool(sshconn.SSHConnectionPool):
    def __init__(
        self, registry: weakref.WeakSet[_SshProcessSocket], timeout: int, maxsize: int, host: str
    ) -> None:
        super().__init__(None, timeout, maxsize, host)
        self._registry = registry
        self._host = host
        self._timeout_s = timeout

    # (the SDK's stub types `sock` narrower than urllib3's connection protocol: same class at run
    # time as the SDK's own pool returns)
    def _new_conn(self) -> _SshConnection:  # type: ignore[override]
        return _SshConnection(self._registry, self._timeout_s, self._host)


class _SshAdapter(sshconn.SSHHTTPAdapter):
    """The SDK's shell-out ssh adapter (a fresh pool per request, as there) whose close() ends
    every ssh process its requests started and that is still open."""

    def __init__(self, ssh_host: str, timeout: int, max_pool_size: int) -> None:
        super().__init__(f"ssh://{ssh_host}", timeout, max_pool_size=max_pool_size, shell_out=True)
        self._sockets: weakref.WeakSet[_SshProcessSocket] = weakref.WeakSet()

    def get_connection(self, url: str | bytes, proxies: Any = None) -> _SshConnectionPool:
        return _SshConnectionPool(self._sockets, self.timeout, self.max_pool_size, self.ssh_host)

    def close(self) -> None:
        super().close()
        for sock in list(self._sockets):
            sock.close()


def use_tracked_ssh_adapter(client: docker.DockerClient) -> None:
    """Replace the SDK's ssh adapter of `client` (not used yet) by `_SshAdapter`."""
    api = client.api
    sdk = api.get_adapter(api.base_url)
    if not isinstance(sdk, sshconn.SSHHTTPAdapter) or sdk.ssh_client is not None:
        return  # not the shell-out adapter this replaces
    adapter = _SshAdapter(sdk.ssh_host, sdk.timeout, sdk.max_pool_size)
    # Every request URL starts with base_url, so this mount serves them all (the SDK's fallback
    # to its own adapter is for URLs no mount matches).
    api.mount(api.base_url, adapter)
    sdk.close()
