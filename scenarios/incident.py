"""Incident files: a scenario as a YAML document (workload, fault timeline, expectations). The catalogue
itself is such files (systems/NAME/catalogue/*.yaml); an engineer reproduces an incident by writing one.

A malformed file raises IncidentError naming every mistake at once, each with the file, its line and field, and for a
misspelt key the field it probably means, e.g.
``incident.yaml:9: faults[0].at: Input should be a valid number`` and
``incident.yaml:6: faults[0].kind: Extra inputs are not permitted; did you mean 'fault'?``."""

from __future__ import annotations

import dataclasses
import difflib
import types
from collections.abc import Mapping, Sequence
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Union, get_args, get_origin, get_type_hints

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model, model_validator

from chaos.faults import registry
from harness.history import History
from scenarios.scenario import SHELLS, FaultStep, Scenario, Shell
from scenarios.systems import DEFAULT_SYSTEM, load_system, system_names
from scenarios.verdicts import Exercised


@dataclasses.dataclass(frozen=True)
class Problem:
    """One mistake in an incident file: where (file, line, field) and what."""

    source: str
    line: int | None
    field: str
    message: str

    def __str__(self) -> str:
        where = f"{self.source}:{self.line}" if self.line else self.source
        return f"{where}: {self.field}: {self.message}" if self.field else f"{where}: {self.message}"

    def as_json(self) -> dict[str, Any]:
        return {"file": self.source, "line": self.line, "field": self.field, "message": self.message}


class IncidentError(ValueError):
    """Malformed incident files: every mistake found, in file and line order, one a line. ``source``, ``line``,
    ``field`` and ``message`` are the first one's."""

    def __init__(self, problems: Sequence[Problem]) -> None:
        self.problems = tuple(sorted(problems, key=lambda p: (p.source, p.line or 0)))
        first = self.problems[0]
        self.source, self.line, self.field, self.message = first.source, first.line, first.field, first.message
        super().__init__("\n".join(map(str, self.problems)))

    def as_json(self) -> dict[str, Any]:
        return {"code": "INVALID_INCIDENT_FILE", **self.problems[0].as_json(),
                "errors": [p.as_json() for p in self.problems]}


_Strict = ConfigDict(extra="forbid", strict=False)

def _workload_model(workload_type: type) -> type[BaseModel]:
    """The workload section has exactly the system's workload fields (one source of truth)."""
    hints = get_type_hints(workload_type)
    return create_model(  # type: ignore[call-overload]
        f"{workload_type.__name__}Model", __config__=_Strict,
        **{f.name: (hints[f.name], ... if f.default is dataclasses.MISSING else f.default)
           for f in dataclasses.fields(workload_type)},
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


class _IncidentBase(BaseModel):
    """The fields every system's incident files have; ``workload`` and ``invariants`` are the system's own."""

    model_config = _Strict
    system: str = DEFAULT_SYSTEM
    id: str = Field(min_length=1)
    slug: str = Field(min_length=1, pattern=r"^[a-z0-9][a-z0-9-]*$")
    title: str = Field(min_length=1)
    shells: list[Shell] = Field(default_factory=lambda: list(SHELLS), min_length=1)
    why_not: dict[Shell, str] = Field(default_factory=dict)
    faults: list[FaultModel] = Field(default_factory=list)
    recovery_bound_s: float = Field(default=600.0, gt=0)
    policy: dict[str, Any] = Field(default_factory=dict)  # overrides of the reference's policy, both shells
    params: dict[str, Any] = Field(default_factory=dict)  # the system's own knobs (checked by the system)
    expect: list[Expectation] = Field(default_factory=list)
    # Written by `sortie explore` on a shrunk failure: what it violated and how it was found. Such a file's proof
    # is the invariant it violates, so it needs no expectation of its own.
    found_by: dict[str, Any] | None = None
    if TYPE_CHECKING:  # each system's own (_incident_model adds them)
        workload: BaseModel
        invariants: list[str]

    @model_validator(mode="after")
    def _proves_something(self) -> _IncidentBase:
        if not self.expect and self.found_by is None:
            raise ValueError("expect: give at least one expectation (what must be seen for the run to prove "
                             "anything)")
        return self


@cache
def _incident_model(name: str) -> type[_IncidentBase]:
    """The incident model of one system: its workload's fields and its invariant ids."""
    system = load_system(name)
    invariants = Literal[system.invariants.ids]  # type: ignore[name-defined]  # (known when the system loads)
    return create_model(
        f"{system.name.title()}Incident", __base__=_IncidentBase,
        workload=(_workload_model(system.workload_type), ...),
        invariants=(list[invariants], Field(default_factory=lambda: list(system.invariants))),
    )


# ---------------------------------------------------------------------------------------------- loading


def load_incident(path: Path | str) -> Scenario:
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as err:
        raise IncidentError([Problem(str(path), None, "", f"cannot read: {err.strerror}")]) from None
    return parse_incident(text, str(path))


def load_incidents(paths: Sequence[Path | str]) -> list[Scenario]:
    """Every file loaded, or one IncidentError with the mistakes of all of them."""
    loaded: list[Scenario] = []
    problems: list[Problem] = []
    for path in paths:
        try:
            loaded.append(load_incident(path))
        except IncidentError as err:
            problems.extend(err.problems)
    if problems:
        raise IncidentError(problems)
    return loaded


def parse_incident(text: str, source: str = "<incident>") -> Scenario:
    """The scenario of one incident file. Its shape (YAML, a mapping, a known system) is checked first, then every
    field at once: one IncidentError lists all the mistakes found."""
    try:
        # One parse: the node tree keeps each key's line (its start mark); the data is constructed from it.
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.SafeLoader("").construct_document(node) if node is not None else None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        raise IncidentError([Problem(source, mark.line + 1 if mark else None, "", f"not valid YAML: {err}")]) \
            from None
    if not isinstance(data, dict) or node is None:
        raise IncidentError([Problem(source, 1, "", "an incident file is a mapping (id, slug, title, workload, "
                                                    "faults, expect, ...)")])
    lines = _lines(node)

    def problem(loc: tuple[Any, ...], message: str) -> Problem:
        return Problem(source, _line_of(lines, loc), _field(loc), message)

    name = data.get("system", DEFAULT_SYSTEM)
    try:
        system = load_system(name) if isinstance(name, str) else None
    except KeyError:
        system = None
    if system is None:
        raise IncidentError([problem(("system",), f"unknown system {name!r}; installed: "
                                                  f"{', '.join(system_names())}")])
    incident_model = _incident_model(system.name)
    try:
        model = incident_model.model_validate(data)
    except ValidationError as err:
        raise IncidentError([problem(loc, message) for loc, message in _mistakes(incident_model, err)]) from None
    problems = [problem(("expect", i, "check"),
                        f"unknown check {item.check!r}; known: {', '.join(sorted(system.expectations))}")
                for i, item in enumerate(model.expect)
                if item.check is not None and item.check not in system.expectations]
    for key, value in (("policy", model.policy), ("params", model.params)):
        try:
            system.check_overrides(key, value)
        except ValueError as err:
            problems.append(problem((key,), str(err)))
    faults = registry(system.name)
    for i, step in enumerate(model.faults):
        for shell in model.shells:
            if step.fault not in faults.names(shell):
                known = ", ".join(sorted(faults.names(shell)))
                problems.append(problem(("faults", i, "fault"),
                                        f"fault {step.fault!r} has no {shell} form; {shell} faults: {known}"))
                break
            try:
                faults[step.fault].validate(step.params, shell)
            except ValueError as err:
                problems.append(problem(("faults", i, "params"), str(err)))
                break
    fields = {k: tuple(v) if isinstance(v, list) else v for k, v in model.workload.model_dump().items()}
    try:
        workload = system.workload_type(**fields)
    except ValueError as err:  # a rule across its fields (the workload dataclass's own check)
        problems.append(problem(("workload",), str(err)))
    if problems:
        raise IncidentError(problems)
    return Scenario(
        id=model.id, slug=model.slug, title=model.title, workload=workload,
        faults=tuple(FaultStep(f.at, f.fault, f.duration, f.params) for f in model.faults),
        recovery_bound_s=model.recovery_bound_s, exercised=_expectation(model.expect, system.expectations),
        shells=tuple(model.shells), invariants=tuple(model.invariants),
        why_not={shell: why for shell, why in model.why_not.items()}, policy=dict(model.policy),
        source=source, system=system.name, params=dict(model.params),
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


def _mistakes(model: type[BaseModel], err: ValidationError) -> list[tuple[tuple[Any, ...], str]]:
    """(field path, message) of each of pydantic's errors. An unknown key names the field it probably means (difflib):
    the closest required field missing from its mapping (a key in its place most likely stands for it, however
    spelt: ``kind`` for ``fault``), else a field close to it; that field's "Field required" goes (the key explains
    it)."""
    errors = [(tuple(e["loc"]), e["type"], e["msg"]) for e in err.errors()]
    missing = {loc for loc, kind, _ in errors if kind == "missing"}
    explained = set()
    out = []
    for loc, kind, message in errors:
        if kind == "extra_forbidden" and loc and isinstance(loc[-1], str):
            fields = _fields_at(model, loc[:-1])
            absent = [f for f in fields if (*loc[:-1], f) in missing and (*loc[:-1], f) not in explained]
            guess = (difflib.get_close_matches(loc[-1], absent, n=1, cutoff=0.0) if absent
                     else difflib.get_close_matches(loc[-1], fields, n=1))
            if guess:
                message += f"; did you mean {guess[0]!r}?"
                explained.add((*loc[:-1], guess[0]))
            elif fields:
                message += f"; fields here: {', '.join(fields)}"
        out.append((loc, message))
    return [(loc, message) for loc, message in out if loc not in explained]


def _fields_at(model: type[BaseModel], loc: tuple[Any, ...]) -> list[str]:
    """The field names of the mapping at ``loc`` in ``model`` (none if it is not a model: a dict, a value)."""
    kind: Any = model
    for part in (*loc, None):
        args = [a for a in get_args(kind) if a is not type(None)]
        if get_origin(kind) in (Union, types.UnionType) and len(args) == 1:
            kind = args[0]  # X | None
        if part is None:
            break
        if isinstance(part, int) and get_origin(kind) is list:
            kind = get_args(kind)[0]
        elif isinstance(part, str) and isinstance(kind, type) and issubclass(kind, BaseModel) \
                and part in kind.model_fields:
            kind = kind.model_fields[part].annotation
        else:
            return []
    return list(kind.model_fields) if isinstance(kind, type) and issubclass(kind, BaseModel) else []


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
    doc: dict[str, Any] = {**({"system": s.system} if s.system != DEFAULT_SYSTEM else {}), "id": s.id, "slug": s.slug,
                           "title": s.title, "shells": list(s.shells)}
    # A field left unset (None, its default) is left out, as a hand-written file leaves it out.
    unset = {f.name for f in dataclasses.fields(s.workload)
             if f.default is None and getattr(s.workload, f.name) is None}
    doc["workload"] = {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(s.workload).items()
                       if k not in unset}
    doc["faults"] = [{"at": f.at, "fault": f.fault, **({"duration": f.duration} if f.duration is not None else {}),
                      **({"params": dict(f.params)} if f.params else {})} for f in s.faults]
    doc["recovery_bound_s"] = s.recovery_bound_s
    if s.policy:
        doc["policy"] = dict(s.policy)
    if s.params:
        doc["params"] = dict(s.params)
    if list(s.invariants) != list(load_system(s.system).invariants):
        doc["invariants"] = list(s.invariants)
    if found_by is not None:
        doc["found_by"] = found_by
    doc["expect"] = []
    return yaml.safe_dump(doc, sort_keys=False, allow_unicode=True, width=120)


# ---------------------------------------------------------------------------------------------- expectations


def _expectation(items: list[Expectation], named: Mapping[str, Exercised]) -> Exercised:
    checks: list[Exercised] = []
    for item in items:
        if item.check:
            checks.append(named[item.check])
        if item.ops:
            checks.append(_ops_check(item.ops))
        if item.tasks:
            checks.append(_tasks_check(item.tasks))

    def exercised(h: History, s: Any) -> str | None:
        for check in checks:
            why = check(h, s)
            if why is not None:
                return why
        return None

    return exercised


def _ops_check(e: OpsExpectation) -> Exercised:
    def check(h: History, s: Any) -> str | None:
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
    def check(h: History, s: Any) -> str | None:
        n = sum(1 for t in s.tasks if t["status"] == e.status)
        if n < e.min:
            return f"expected at least {e.min} {e.status} tasks, saw {n}"
        if e.max is not None and n > e.max:
            return f"expected at most {e.max} {e.status} tasks, saw {n}"
        return None
    return check
