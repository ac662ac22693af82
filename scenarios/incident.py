"""Incident files: a scenario as a YAML document (workload, fault timeline, expectations). The catalogue
itself is such files (scenarios/catalogue/*.yaml); an engineer reproduces an incident by writing one.

A malformed file raises IncidentError naming the file, the line and the field, e.g.
``incident.yaml:9: faults[0].at: Input should be a valid number``."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Literal, get_type_hints

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model, field_validator, model_validator

from chaos.faults import FAULTS, names
from harness.history import History
from reference.settings import policy_with
from scenarios.expectations import EXPECTATIONS, Exercised
from scenarios.scenario import ALL_INVARIANTS, SHELLS, FaultStep, Scenario
from scenarios.state import FinalState
from scenarios.workload import WorkloadSpec


class IncidentError(ValueError):
    """A malformed incident file: where (file, line, field) and what."""

    def __init__(self, source: str, line: int | None, field: str, message: str) -> None:
        self.source, self.line, self.field, self.message = source, line, field, message
        where = f"{source}:{line}" if line else source
        super().__init__(f"{where}: {field}: {message}" if field else f"{where}: {message}")

    def as_json(self) -> dict[str, Any]:
        return {"code": "INVALID_INCIDENT_FILE", "file": self.source, "line": self.line, "field": self.field,
                "message": self.message}


_Strict = ConfigDict(extra="forbid", strict=False)

# The workload section has exactly WorkloadSpec's fields (one source of truth).
WorkloadModel = create_model(  # type: ignore[call-overload]
    "WorkloadModel", __config__=_Strict,
    **{f.name: (get_type_hints(WorkloadSpec)[f.name], ... if f.default is dataclasses.MISSING else f.default)
       for f in dataclasses.fields(WorkloadSpec)},
)


class FaultModel(BaseModel):
    model_config = _Strict
    at: float = Field(ge=0)
    fault: str
    duration: float | None = Field(default=None, gt=0)
    params: dict[str, Any] = Field(default_factory=dict)


class OpsExpectation(BaseModel):
    """At least ``min`` operations with this function (and type, and value fields), optionally inside the
    window of a named fault."""

    model_config = _Strict
    f: str
    type: Literal["invoke", "ok", "fail", "info"] | None = None
    where: dict[str, Any] = Field(default_factory=dict)
    during: str | None = None
    min: int = Field(default=1, ge=1)


class TasksExpectation(BaseModel):
    model_config = _Strict
    status: str
    min: int = Field(default=1, ge=0)
    max: int | None = Field(default=None, ge=0)


class Expectation(BaseModel):
    model_config = _Strict
    check: str | None = None
    ops: OpsExpectation | None = None
    tasks: TasksExpectation | None = None

    @field_validator("check")
    @classmethod
    def _known_check(cls, v: str | None) -> str | None:
        if v is not None and v not in EXPECTATIONS:
            raise ValueError(f"unknown check {v!r}; known: {', '.join(sorted(EXPECTATIONS))}")
        return v


class IncidentModel(BaseModel):
    model_config = _Strict
    id: str = Field(min_length=1)
    slug: str = Field(min_length=1, pattern=r"^[a-z0-9][a-z0-9-]*$")
    title: str = Field(min_length=1)
    shells: list[Literal["sim", "native"]] = Field(default_factory=lambda: list(SHELLS), min_length=1)
    why_not: dict[Literal["sim", "native"], str] = Field(default_factory=dict)
    workload: WorkloadModel  # type: ignore[valid-type]
    faults: list[FaultModel] = Field(default_factory=list)
    recovery_bound_s: float = Field(default=600.0, gt=0)
    invariants: list[Literal[ALL_INVARIANTS]] = Field(default_factory=lambda: list(ALL_INVARIANTS))  # type: ignore[valid-type]
    flight_median_s: float = Field(default=120.0, gt=0)
    # The median flight on the real stack, in wall seconds (its simulator runs model time faster than the wall;
    # None: the stack's own flights, NativeOptions.time_scale), for a scenario whose flights must outlast its windows.
    stack_flight_median_s: float | None = Field(default=None, gt=0)
    policy: dict[str, Any] = Field(default_factory=dict)  # overrides of reference.policy.Policy, both shells
    expect: list[Expectation] = Field(default_factory=list)
    # Written by `sortie explore` on a shrunk failure: what it violated and how it was found. Such a file's proof
    # is the invariant it violates, so it needs no expectation of its own.
    found_by: dict[str, Any] | None = None

    @field_validator("policy")
    @classmethod
    def _known_policy(cls, v: dict[str, Any]) -> dict[str, Any]:
        policy_with(v)  # raises ValueError on an unknown field or a malformed value
        return v

    @model_validator(mode="after")
    def _proves_something(self) -> IncidentModel:
        if not self.expect and self.found_by is None:
            raise ValueError("expect: give at least one expectation (what must be seen for the run to prove "
                             "anything)")
        return self


# ---------------------------------------------------------------------------------------------- loading


def load_incident(path: Path | str) -> Scenario:
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as err:
        raise IncidentError(str(path), None, "", f"cannot read: {err.strerror}") from None
    return parse_incident(text, str(path))


def parse_incident(text: str, source: str = "<incident>") -> Scenario:
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        raise IncidentError(source, mark.line + 1 if mark else None, "", f"not valid YAML: {err}") from None
    if not isinstance(data, dict) or node is None:
        raise IncidentError(source, 1, "", "an incident file is a mapping (id, slug, title, workload, faults, "
                                           "expect, ...)")
    lines = _lines(node)
    try:
        model = IncidentModel.model_validate(data)
    except ValidationError as err:
        first = err.errors()[0]
        loc = tuple(first["loc"])
        raise IncidentError(source, _line_of(lines, loc), _field(loc), first["msg"]) from None
    for i, step in enumerate(model.faults):
        for shell in model.shells:
            if step.fault not in names(shell):
                raise IncidentError(source, _line_of(lines, ("faults", i, "fault")), f"faults[{i}].fault",
                                    f"fault {step.fault!r} has no {shell} form; {shell} faults: "
                                    f"{', '.join(sorted(names(shell)))}")
            try:
                FAULTS[step.fault].validate(step.params, shell)
            except ValueError as err:
                raise IncidentError(source, _line_of(lines, ("faults", i, "params")), f"faults[{i}].params",
                                    str(err)) from None
    workload = model.workload.model_dump()
    workload["bad_requests"] = tuple(workload.get("bad_requests", ()))
    return Scenario(
        id=model.id, slug=model.slug, title=model.title, workload=WorkloadSpec(**workload),
        faults=tuple(FaultStep(f.at, f.fault, f.duration, f.params) for f in model.faults),
        recovery_bound_s=model.recovery_bound_s, exercised=_expectation(model.expect), shells=tuple(model.shells),
        invariants=tuple(model.invariants), flight_median_s=model.flight_median_s,
        stack_flight_median_s=model.stack_flight_median_s, why_not=dict(model.why_not), policy=dict(model.policy),
        source=source,
    )


def _lines(node: yaml.Node, path: tuple[Any, ...] = (), out: dict[tuple[Any, ...], int] | None = None
           ) -> dict[tuple[Any, ...], int]:
    """Field path -> line number (1-based) of every node of the document."""
    out = {} if out is None else out
    out.setdefault(path, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            out[(*path, key.value)] = key.start_mark.line + 1
            _lines(value, (*path, key.value), out)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _lines(item, (*path, i), out)
    return out


def _line_of(lines: dict[tuple[Any, ...], int], loc: tuple[Any, ...]) -> int | None:
    for n in range(len(loc), -1, -1):
        if loc[:n] in lines:
            return lines[loc[:n]]
    return None


def _field(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def dump_incident(s: Scenario, found_by: dict[str, Any] | None = None) -> str:
    """``s`` as an incident file (what load_incident reads back). Its expectations are code and are not written:
    this is for schedules that carry their proof in ``found_by`` (a shrunk explored failure)."""
    doc: dict[str, Any] = {"id": s.id, "slug": s.slug, "title": s.title, "shells": list(s.shells)}
    workload = dataclasses.asdict(s.workload)
    workload["bad_requests"] = list(workload["bad_requests"])
    doc["workload"] = workload
    doc["faults"] = [{"at": f.at, "fault": f.fault, **({"duration": f.duration} if f.duration is not None else {}),
                      **({"params": dict(f.params)} if f.params else {})} for f in s.faults]
    doc["recovery_bound_s"] = s.recovery_bound_s
    doc["flight_median_s"] = s.flight_median_s
    if s.stack_flight_median_s is not None:
        doc["stack_flight_median_s"] = s.stack_flight_median_s
    if s.policy:
        doc["policy"] = dict(s.policy)
    if list(s.invariants) != list(ALL_INVARIANTS):
        doc["invariants"] = list(s.invariants)
    if found_by is not None:
        doc["found_by"] = found_by
    doc["expect"] = []
    return yaml.safe_dump(doc, sort_keys=False, allow_unicode=True, width=120)


# ---------------------------------------------------------------------------------------------- expectations


def _expectation(items: list[Expectation]) -> Exercised:
    checks: list[Exercised] = []
    for item in items:
        if item.check:
            checks.append(EXPECTATIONS[item.check])
        if item.ops:
            checks.append(_ops_check(item.ops))
        if item.tasks:
            checks.append(_tasks_check(item.tasks))

    def exercised(h: History, s: FinalState) -> str | None:
        for check in checks:
            why = check(h, s)
            if why is not None:
                return why
        return None

    return exercised


def _ops_check(e: OpsExpectation) -> Exercised:
    def check(h: History, s: FinalState) -> str | None:
        windows = [w for w in h.fault_windows() if w.fault == e.during] if e.during else []
        if e.during and not windows:
            return f"no {e.during} window was recorded"
        n = 0
        for op in h.ops:
            if op.f != e.f or (e.type and op.type != e.type):
                continue
            if any(op.value.get(k) != v for k, v in e.where.items()):
                continue
            if windows and not any(w.start <= op.time <= (w.end if w.end is not None else float("inf"))
                                   for w in windows):
                continue
            n += 1
        what = f"{e.f} {e.type or ''} ops{' with ' + str(e.where) if e.where else ''}"
        return None if n >= e.min else f"expected at least {e.min} {what}{' during ' + e.during if e.during else ''}" \
                                       f", saw {n}"
    return check


def _tasks_check(e: TasksExpectation) -> Exercised:
    def check(h: History, s: FinalState) -> str | None:
        n = sum(1 for t in s.tasks if t["status"] == e.status)
        if n < e.min:
            return f"expected at least {e.min} {e.status} tasks, saw {n}"
        if e.max is not None and n > e.max:
            return f"expected at most {e.max} {e.status} tasks, saw {n}"
        return None
    return check
