"""load.json as a typed record: parsed and validated once where a load run is read (the capacity report, `parity
--load`, the capacity model), so its readers take fields as they are instead of probing each one's type.

Every load run writes load.json (loadtests.run.write_outputs); the fields below are the ones its readers rely on,
each with the names older runs gave it (``AliasChoices``). Anything else a system writes is kept as it is
(``extra="allow"``) and reached through :meth:`LoadRecord.raw`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    PositiveFloat,
    PositiveInt,
    PrivateAttr,
    ValidationError,
    ValidatorFunctionWrapHandler,
    model_validator,
)

Number = float  # pydantic takes an int where a float is declared


class _Section(BaseModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True)
    _given: dict[str, Any] = PrivateAttr(default_factory=dict)

    @model_validator(mode="wrap")
    @classmethod
    def _keep_given(cls, data: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        section = handler(data)
        if isinstance(data, dict):
            section._given = data
        return section

    def given(self, param: str) -> tuple[str, Any]:
        """The name under which load.json gave a field (one of its aliases) and the value as written."""
        alias = type(self).model_fields[param].validation_alias
        for name in getattr(alias, "choices", None) or [param]:
            if name in self._given:
                return str(name), self._given[name]
        return param, getattr(self, param)


class Deployment(_Section):
    """``workers``: the stack's sizes (older runs named them api, gunicorn, threads, consumers...)."""

    api_workers: PositiveInt | None = Field(None, validation_alias=AliasChoices("api_workers", "api", "gunicorn"))
    api_threads: PositiveInt | None = Field(None, validation_alias=AliasChoices("api_threads", "threads"))
    dispatchers: PositiveInt | None = Field(None, validation_alias=AliasChoices("dispatchers", "dispatcher",
                                                                                "consumers"))
    db_capacity: PositiveInt | None = Field(None, validation_alias=AliasChoices("db_capacity", "db_pool",
                                                                                "db_connections"))
    partitions: PositiveInt | None = Field(None, validation_alias=AliasChoices("publishers", "publisher", "partitions",
                                                                               "outbox_partitions"))


class Host(_Section):
    """``machine`` (or, in older runs, ``stack``): the host the run shared."""

    cores: PositiveFloat | None = Field(None, validation_alias=AliasChoices("cpus", "cores", "cpu_count"))
    load_avg: list[Number] | None = None


class Rates(_Section):
    """``rates``: what the profile offered at the run's multiple."""

    operators: PositiveFloat | None = None
    drafts_per_s: Number | None = None
    confirms_per_s: Number | None = None
    double_click_ratio: Number | None = None
    snapshot_reads_per_s: Number | None = None
    sse_streams: Number | None = None

    def per_s(self) -> dict[str, float]:
        """Every ``..._per_s`` rate."""
        return {k: float(v) for k, v in self.model_dump().items()
                if k.endswith("_per_s") and type(v) in (int, float)}


class IdleStreams(_Section):
    peak_open: PositiveFloat | None = None


class Streams(_Section):
    """``sse``: the streams the run held and the stream tier's resources."""

    idle_streams: IdleStreams | None = None
    resources: dict[str, dict[str, Number | None]] = Field(default_factory=dict)


class Pgbench(_Section):
    tps: PositiveFloat | None = None


class ModelInputs(_Section):
    """The reference's constants the capacity model runs with (written by the system's load hooks)."""

    consumer_long_poll_s: PositiveFloat | None = None
    sse_heartbeat_s: PositiveFloat | None = None
    webhook_max_batch: PositiveFloat | None = None


class FaultWindow(_Section):
    fault: str | None = None
    start: Number | None = None
    end: Number | None = None


class LoadRecord(_Section):
    """One load run's load.json."""

    system: str = "copilot"
    profile: str = ""
    multiple: PositiveFloat = 1.0
    duration_s: Number | None = None
    stack: str | Host = "native"  # the provider; older runs wrote the host here
    machine: Host = Field(default_factory=Host)
    workers: Deployment = Field(default_factory=Deployment)
    rates: Rates = Field(default_factory=Rates)
    sse: Streams = Field(default_factory=Streams)
    pgbench: Pgbench = Field(default_factory=Pgbench)
    model_inputs: ModelInputs = Field(default_factory=ModelInputs)
    endpoints: dict[str, dict[str, Any]] = Field(default_factory=dict)
    endpoints_steady: dict[str, dict[str, Any]] = Field(default_factory=dict)
    lifecycle_ms: dict[str, dict[str, Any]] = Field(default_factory=dict)
    service_times_ms: dict[str, Any] = Field(default_factory=dict)
    timeseries: dict[str, Any] = Field(default_factory=dict)
    fault_windows: list[FaultWindow] = Field(default_factory=list)
    slo: list[dict[str, Any]] = Field(default_factory=list)
    invariants: dict[str, str] = Field(default_factory=dict)
    saturation: dict[str, Any] | None = None
    find_max: dict[str, Any] | None = None

    @property
    def host(self) -> Host:
        """The host's figures: ``machine``, else what an older run wrote under ``stack``."""
        if self.machine.cores is not None or isinstance(self.stack, str):
            return self.machine
        return self.stack

    def raw(self) -> dict[str, Any]:
        """The record as the run wrote it, for the figures the report and the model read table by table."""
        return self._given

    @classmethod
    def parse(cls, body: Any, where: str = "load.json") -> LoadRecord:
        """ValueError naming the fields that are not what a load.json holds."""
        if isinstance(body, cls):
            return body
        try:
            record = cls.model_validate(body)
        except ValidationError as err:
            raise ValueError(f"{where}: not a load run's load.json: {err}") from None
        return record


def read_load(path: Path) -> LoadRecord:
    """DIR/load.json parsed and validated; ValueError for a file that is not one (OSError when it cannot be read)."""
    try:
        body = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise ValueError(f"{path}: not JSON: {err}") from None
    return LoadRecord.parse(body, str(path))
