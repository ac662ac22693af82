"""ObjectStore over S3 (versitygw in the native stack, MinIO in containers, any S3 in production).

Errors: ``put`` raises :class:`ObjectStoreError` for every failure (connection refused, timeouts,
wrong credentials, a missing bucket, a 5xx); the report worker keeps the task COMPLETED and retries
the upload later (docs/systems/copilot.md, scenario R5). ``get`` returns None when the object does not exist
and raises :class:`ObjectStoreError` when the store cannot answer, so "missing" is never confused
with "unreachable".

Timeouts: the ``minio`` SDK defaults to 5-minute timeouts and 5 urllib3 retries with backoff; here
the connect timeout is at most 2 s, the read timeout is ``timeout_s``, a refused or timed-out
connection is retried once (nothing was sent) and a read is never retried. A dead server therefore
fails a call within about ``2 * min(2, timeout_s) + timeout_s`` seconds (at once when the port
refuses connections); higher-level retries belong to the caller.
"""

from __future__ import annotations

import io
import logging
from typing import Any

import urllib3
from minio import Minio
from minio.error import S3Error

from reference.copilot.effects import ObjectStoreError

log = logging.getLogger("sortie.objectstore")

REGION = "us-east-1"
_MISSING = {"NoSuchKey", "NoSuchObject"}
_BUCKET_EXISTS = {"BucketAlreadyOwnedByYou", "BucketAlreadyExists"}


class S3ObjectStore:
    """``ObjectStore`` on one bucket of an S3-compatible server reached over plain HTTP."""

    def __init__(self, endpoint: str, access_key: str, secret_key: str, bucket: str,
                 timeout_s: float = 5.0, *, secure: bool = False, region: str = REGION) -> None:
        self.endpoint = endpoint.removeprefix("http://").removeprefix("https://").rstrip("/")
        self.bucket = bucket
        self.timeout_s = timeout_s
        connect_s = min(2.0, timeout_s)
        http = urllib3.PoolManager(
            timeout=urllib3.Timeout(connect=connect_s, read=timeout_s),
            retries=urllib3.Retry(total=1, connect=1, read=0, redirect=0, status=0, other=0,
                                  backoff_factor=0.1, raise_on_status=False),
            maxsize=16)
        # Giving the region skips the GetBucketLocation round trip the SDK would otherwise make first.
        self._client = Minio(self.endpoint, access_key=access_key, secret_key=secret_key, secure=secure,
                             region=region, http_client=http)

    def __repr__(self) -> str:
        return f"S3ObjectStore(endpoint={self.endpoint!r}, bucket={self.bucket!r})"

    def _fail(self, action: str, key: str | None, exc: Exception) -> ObjectStoreError:
        where = f"s3://{self.bucket}/{key}" if key is not None else f"s3://{self.bucket}"
        detail = f"{exc.code}: {exc.message}" if isinstance(exc, S3Error) else f"{type(exc).__name__}: {exc}"
        return ObjectStoreError(f"{action} {where} at {self.endpoint} failed: {detail}")

    # --- the port ------------------------------------------------------------------------------

    def put(self, key: str, data: bytes, content_type: str) -> None:
        try:
            self._client.put_object(bucket_name=self.bucket, object_name=key, data=io.BytesIO(data),
                                    length=len(data), content_type=content_type)
        except Exception as exc:  # every failure is an upload failure for the caller
            raise self._fail("put", key, exc) from exc

    def get(self, key: str) -> bytes | None:
        resp: Any = None
        try:
            resp = self._client.get_object(bucket_name=self.bucket, object_name=key)
            return bytes(resp.read())
        except S3Error as exc:
            if exc.code in _MISSING:
                return None
            raise self._fail("get", key, exc) from exc
        except Exception as exc:
            raise self._fail("get", key, exc) from exc
        finally:
            if resp is not None:
                resp.close()
                resp.release_conn()

    # --- beyond the port (tests, tools, the stack provider) ------------------------------------

    def ensure_bucket(self) -> None:
        """Create the bucket unless it exists (safe when several processes race to create it)."""
        try:
            if self._client.bucket_exists(bucket_name=self.bucket):
                return
            self._client.make_bucket(bucket_name=self.bucket)
        except S3Error as exc:
            if exc.code in _BUCKET_EXISTS:
                return
            raise self._fail("create bucket", None, exc) from exc
        except Exception as exc:
            raise self._fail("create bucket", None, exc) from exc

    def list(self, prefix: str = "") -> list[str]:
        """Keys under ``prefix``, sorted, all levels."""
        try:
            return sorted(str(o.object_name) for o in self._client.list_objects(
                bucket_name=self.bucket, prefix=prefix or None, recursive=True))
        except Exception as exc:
            raise self._fail("list", prefix, exc) from exc

    def delete(self, key: str) -> None:
        """Remove an object; removing a missing object is not an error (S3 semantics)."""
        try:
            self._client.remove_object(bucket_name=self.bucket, object_name=key)
        except Exception as exc:
            raise self._fail("delete", key, exc) from exc
