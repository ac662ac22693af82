"""A real S3-compatible server on loopback: versitygw with its posix backend, built from the Go module proxy.

Why versitygw (checked on this machine: Debian, Go 1.26.8, 2 cores, no Docker):

- ``go install github.com/versity/versitygw/cmd/versitygw@v1.7.0`` builds cleanly (its go.mod says
  ``go 1.25.0`` and has no ``replace``): about 95 s cold on 2 cores, instant afterwards from the cache.
- It passed the readiness round trip (create bucket, put, get, delete object, delete bucket with the
  ``minio`` SDK) and refuses a request signed with a wrong secret key (it checks SigV4), so
  authentication failures look as they would in production.
- The alternatives were not needed, and the first cannot be built this way: SeaweedFS's newest
  module (``go install github.com/seaweedfs/seaweedfs/weed@latest`` = pseudo-version
  ``v0.0.0-20261109003541-7506e5f91cd6``; its release tags are not semver) fails at once with "The
  go.mod file for the module providing named packages contains one or more replace directives". The
  last-resort ``org.gaul:s3proxy`` jar-with-dependencies (Java, filesystem-nio2 provider) exists on
  Maven Central but is not wired in here: a second server kind would be code nobody exercises.

Layout under ``run_dir``: ``data/`` (buckets are directories, objects are files), ``meta/`` (the
sidecar directory holding object metadata, so the data filesystem needs no user xattrs) and
``versitygw.log``. The root credentials are passed in the environment (``ROOT_ACCESS_KEY`` /
``ROOT_SECRET_KEY``), never on the command line where ``ps`` would show them.

``start()`` returns only after the round trip succeeded; a restart reuses the port so clients keep
their endpoint. A stopped server refuses connections; the data survives a restart.
"""

from __future__ import annotations

import io
import os
import secrets
import time
from pathlib import Path
from typing import Any, Self

from stack.common import LOOPBACK, ProcessBacked, ServerProcess, free_port
from stack.gobin import GoInstallError, go_install

MODULE = "github.com/versity/versitygw/cmd/versitygw"
# Tried in order; the first that builds wins. v1.7.0 is the one checked (see the module docstring);
# v1.8.0 is the newer tag the module proxy lists. $SORTIE_VERSITYGW_VERSION pins one.
VERSIONS = ("v1.7.0", "v1.8.0")
REGION = "us-east-1"
START_TIMEOUT_S = 30.0


class S3ServerError(RuntimeError):
    """The S3 server could not be built, started or reached."""


def _versions() -> tuple[str, ...]:
    pinned = os.environ.get("SORTIE_VERSITYGW_VERSION")
    return (pinned,) if pinned else VERSIONS


def install(versions: tuple[str, ...] | None = None) -> Path:
    """Build (once) and return the versitygw binary: the first of ``versions`` that builds."""
    errors = []
    for version in versions or _versions():
        try:
            return go_install(MODULE, version, "versitygw", "versitygw")
        except GoInstallError as exc:
            errors.append(f"--- {version}: {exc}")
    raise S3ServerError("versitygw could not be built:\n" + "\n".join(errors))


def installed_version(binary: Path) -> str:
    """The version directory a cached binary came from (``<cache>/go/versitygw/<version>/bin/...``)."""
    return binary.parent.parent.name


def minio_client(endpoint: str, access_key: str, secret_key: str, *, connect_timeout_s: float = 2.0,
                 read_timeout_s: float = 5.0, retries: int = 0) -> Any:
    """A ``minio.Minio`` with bounded timeouts and retries (the SDK's defaults are 5 minutes and 5
    retries). Giving the region skips the GetBucketLocation call the SDK would make first."""
    import urllib3
    from minio import Minio

    http = urllib3.PoolManager(
        timeout=urllib3.Timeout(connect=connect_timeout_s, read=read_timeout_s),
        retries=urllib3.Retry(total=retries, connect=retries, read=0, redirect=0, status=0, other=0,
                              backoff_factor=0.1),
        maxsize=10)
    return Minio(endpoint, access_key=access_key, secret_key=secret_key, secure=False, region=REGION,
                 http_client=http)


class LocalS3(ProcessBacked):
    """One versitygw (posix backend) on 127.0.0.1 under ``run_dir``; ``endpoint`` is "127.0.0.1:port"."""

    server_kind = "versitygw"

    def __init__(self, run_dir: Path, access_key: str, secret_key: str, port: int | None = None, *,
                 binary: Path | None = None, start_timeout_s: float = START_TIMEOUT_S,
                 request_log: bool = False) -> None:
        if not access_key or not secret_key:
            raise S3ServerError("access_key and secret_key must not be empty")
        self.run_dir = Path(run_dir).resolve()
        self.access_key = access_key
        self.secret_key = secret_key
        self.requested_port = port
        self.port: int | None = port
        self._binary = binary
        self.start_timeout_s = start_timeout_s
        self.request_log = request_log
        self.data_dir = self.run_dir / "data"
        self.meta_dir = self.run_dir / "meta"
        self.log_path = self.run_dir / "versitygw.log"
        self._process: ServerProcess | None = None
        self.server_version: str | None = None
        self.start_seconds: float | None = None

    @property
    def endpoint(self) -> str:
        if self.port is None:
            raise S3ServerError("the S3 server is not started")
        return f"{LOOPBACK}:{self.port}"

    @property
    def url(self) -> str:
        return f"http://{self.endpoint}"

    def client(self, **kwargs: Any) -> Any:
        """A ``minio.Minio`` for this server with the root credentials and bounded timeouts."""
        return minio_client(self.endpoint, self.access_key, self.secret_key, **kwargs)

    def _env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("VGW_", "ROOT_"))}
        env.update({"ROOT_ACCESS_KEY": self.access_key, "ROOT_SECRET_KEY": self.secret_key})
        return env

    def _argv(self, binary: Path, port: int) -> list[str]:
        # Global options come before the backend command; the backend's own after it.
        argv = [str(binary), "--port", f"{LOOPBACK}:{port}", "--region", REGION]
        if not self.request_log:
            argv.append("--quiet")
        return [*argv, "posix", "--sidecar", str(self.meta_dir), str(self.data_dir)]

    def start(self) -> Self:
        """Build if needed, start, and return once a bucket/object round trip succeeded."""
        if self._process is not None and self._process.alive():
            return self
        began = time.monotonic()
        binary = self._binary or install()
        self.server_version = installed_version(binary)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.meta_dir.mkdir(parents=True, exist_ok=True)
        fixed = self.port is not None  # requested, or kept from the previous start
        attempts = 1 if fixed else 3
        for attempt in range(attempts):
            port = self.port if fixed else free_port()
            assert port is not None
            self.port = port
            self._process = ServerProcess("versitygw", self._argv(binary, port), self.log_path,
                                          env=self._env(), cwd=self.run_dir)
            self._process.start()
            try:
                self._process.wait_until(self.round_trip, began + self.start_timeout_s,
                                         "a bucket/object round trip succeeds", S3ServerError, port=port)
                break
            except S3ServerError as exc:
                self._process.stop()
                if attempt + 1 == attempts or "address already in use" not in str(exc).lower():
                    raise
        self.start_seconds = time.monotonic() - began
        return self

    def round_trip(self) -> bool:
        """Create a bucket, put, get and delete an object, delete the bucket. Raises on any failure."""
        client = self.client(connect_timeout_s=1.0, read_timeout_s=3.0)
        bucket = f"sortie-ready-{secrets.token_hex(6)}"
        body = secrets.token_bytes(64)
        client.make_bucket(bucket_name=bucket)
        try:
            client.put_object(bucket_name=bucket, object_name="probe/ready.bin", data=io.BytesIO(body),
                              length=len(body), content_type="application/octet-stream")
            resp = client.get_object(bucket_name=bucket, object_name="probe/ready.bin")
            try:
                got = resp.read()
            finally:
                resp.close()
                resp.release_conn()
            if got != body:
                raise S3ServerError(f"round trip returned {len(got)} different bytes")
            client.remove_object(bucket_name=bucket, object_name="probe/ready.bin")
        finally:
            client.remove_bucket(bucket_name=bucket)
        return True
