"""`sortie fuzz`: a system's API against its own OpenAPI document, with Schemathesis (docs/fuzz.md).

One pass per role of the system (FuzzSpec.roles), each with a fresh credential of that role and an equal share of
the time: every Schemathesis check (the ``--checks all`` of its CLI, positive data acceptance included) over its
phases (the document's examples, coverage, fuzzing, and stateful sequences over the links the document declares
or Schemathesis infers). Then the system judges its invariants on the database the requests left
(FuzzTarget.verdicts). A system in process (FuzzTarget.app) is served on loopback here, so both modes send real
HTTP and every finding has a ``curl`` that reproduces it.

The core is functions of Schemathesis's events (:func:`findings_of`) and of a finished run (:class:`FuzzReport`:
its JSON and Markdown); :func:`fuzz` is the shell that deploys, serves and drives."""

from __future__ import annotations

import copy
import json
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from scenarios.systems import FuzzRequest, FuzzSpec, FuzzTarget
from scenarios.verdicts import VIOLATED, Verdict

LOOPBACK = "127.0.0.1"
EVENT_STREAM = "text/event-stream"
BODY_SHOWN = 600  # characters of a failing answer's body in the report
EXAMPLES_KEPT = 3  # repros kept per distinct failure (operation, check, role)
# On a documented answer: the problem codes it gives to a request its schema allows, for a rule no schema can state
# (the caller's permissions, a polygon, the state of a row). Positive data acceptance takes them as the document's
# "why not": a schema-valid request answered with one of them is not a failure.
REFUSALS = "x-schema-valid-refusals"
Refusals = dict[tuple[str, int], frozenset[str]]  # (operation label, status) -> problem codes


@dataclass
class Finding:
    """One distinct failure: an operation, the check that failed on it and the role that sent it, with how often
    it failed and the first few requests that reproduce it."""

    operation: str
    check: str
    role: str
    title: str
    message: str
    status: int | None  # the answer's status (None: no answer)
    body: str  # the start of the answer's body
    curl: list[str]  # the requests that reproduce it, oldest first
    count: int = 1
    more: list[list[str]] = field(default_factory=list)  # further repros (at most EXAMPLES_KEPT - 1)
    full_body: str = field(default="", repr=False)  # the whole answer (for REFUSALS; not in the report)

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.operation, self.check, self.role)

    def as_json(self) -> dict[str, Any]:
        return {"operation": self.operation, "check": self.check, "role": self.role, "title": self.title,
                "message": self.message, "status": self.status, "body": self.body, "curl": self.curl,
                "count": self.count, "more": self.more}


@dataclass
class RolePass:
    """What one role's pass did: its cases, its time, why Schemathesis stopped, its findings and its errors (an
    exception of Schemathesis's own, or a request that got no answer)."""

    role: str
    cases: int = 0
    seconds: float = 0.0
    stop_reason: str = ""
    findings: list[Finding] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    unanswered: list[str] = field(default_factory=list)  # requests that got no answer (a timeout, a reset)
    refused_as_documented: int = 0  # schema-valid requests refused with a code of the answer's REFUSALS
    links: int = 0  # the stateful phase's transitions between operations (declared, or from dependency analysis)
    inferred_links: int = 0  # of which Schemathesis inferred (from Location headers and the like)

    def as_json(self) -> dict[str, Any]:
        return {"role": self.role, "cases": self.cases, "seconds": round(self.seconds, 1),
                "stop_reason": self.stop_reason, "findings": len(self.findings), "errors": self.errors,
                "unanswered": self.unanswered, "refused_as_documented": self.refused_as_documented,
                "links": self.links, "inferred_links": self.inferred_links}


@dataclass
class FuzzReport:
    system: str
    mode: str  # "in-process" or "stack"
    seed: int
    budget_s: float
    passes: list[RolePass]
    verdicts: list[Verdict]
    excluded: list[str]  # operations left out (streams that never end)
    wall_s: float = 0.0

    @property
    def findings(self) -> list[Finding]:
        return [f for p in self.passes for f in p.findings]

    @property
    def cases(self) -> int:
        return sum(p.cases for p in self.passes)

    @property
    def violated(self) -> list[Verdict]:
        return [v for v in self.verdicts if v.status == VIOLATED]

    @property
    def harness_errors(self) -> list[str]:
        return [f"{p.role}: {e}" for p in self.passes for e in p.errors]

    @property
    def failed(self) -> bool:
        """A 5xx, a schema violation (any check), a request without an answer, or an invariant violated."""
        return bool(self.findings or self.violated or any(p.unanswered for p in self.passes))

    def as_json(self) -> dict[str, Any]:
        return {"system": self.system, "mode": self.mode, "seed": self.seed, "budget_s": self.budget_s,
                "wall_s": round(self.wall_s, 1), "cases": self.cases, "failed": self.failed,
                "passes": [p.as_json() for p in self.passes], "excluded": self.excluded,
                "findings": [f.as_json() for f in self.findings],
                "verdicts": [v.as_json() for v in self.verdicts]}

    def markdown(self) -> str:
        return "\n".join(_markdown(self)) + "\n"

    def write(self, out: Path) -> tuple[Path, Path]:
        out.mkdir(parents=True, exist_ok=True)
        as_json, as_md = out / "fuzz.json", out / "fuzz.md"
        as_json.write_text(json.dumps(self.as_json(), indent=2) + "\n", encoding="utf-8")
        as_md.write_text(self.markdown(), encoding="utf-8")
        return as_json, as_md


def _markdown(r: FuzzReport) -> Iterator[str]:
    verdict = "FAILED" if r.failed else "passed"
    yield f"# sortie fuzz: {r.system} ({r.mode}, seed {r.seed}): {verdict}"
    yield ""
    bound = f"{r.budget_s:.0f} s of fuzzing" if r.budget_s else "bounded by examples"
    yield (f"{r.cases:,} cases in {r.wall_s:.0f} s ({bound}); {len(r.findings)} distinct "
           f"failures; {len(r.violated)} of {len(r.verdicts)} invariants violated.")
    if r.excluded:
        yield f"Left out (streams that never end): {', '.join(r.excluded)}."
    yield ""
    yield "| role | cases | seconds | stopped | links (inferred) | failures | no answer | refused as documented |"
    yield "|---|---:|---:|---|---:|---:|---:|---:|"
    for p in r.passes:
        yield (f"| {p.role} | {p.cases:,} | {p.seconds:.0f} | {p.stop_reason} | {p.links} ({p.inferred_links}) "
               f"| {len(p.findings)} | {len(p.unanswered)} | {p.refused_as_documented} |")
    yield ""
    yield "## Invariants on the database the fuzzing left"
    yield ""
    yield "| invariant | status | checked | what must hold |"
    yield "|---|---|---:|---|"
    for v in r.verdicts:
        yield f"| {v.invariant} | {v.status} | {v.checked} | {v.title} |"
    for v in r.violated:
        yield ""
        yield f"**{v.invariant} violated** ({len(v.violations)}):"
        yield from (f"- {x.task_id or '-'}: {x.message}" for x in v.violations[:20])
    yield from _findings_markdown(r.findings)
    for p in r.passes:
        yield from (f"- no answer ({p.role}): {u}" for u in p.unanswered[:20])
        yield from (f"- harness error ({p.role}): {e}" for e in p.errors[:20])


def _findings_markdown(findings: list[Finding]) -> Iterator[str]:
    yield ""
    yield "## Failures"
    yield ""
    if not findings:
        yield "None."
        return
    for n, f in enumerate(sorted(findings, key=lambda f: f.key), 1):
        yield f"### {n}. {f.operation}: {f.title} ({f.check}, as {f.role}, {f.count}x)"
        yield ""
        yield f"Answer: {f.status if f.status is not None else 'none'}"
        yield ""
        yield "```"
        yield f.message.strip()
        if f.body:
            yield ""
            yield f.body
        yield "```"
        yield ""
        if not f.curl:
            yield "A check over the whole run: no single request reproduces it."
            yield ""
            continue
        yield "Reproduce:"
        yield ""
        yield "```sh"
        yield from f.curl
        yield "```"
        yield ""


# ------------------------------------------------------------------------------------------------ the core


def fresh_sqlite_database(run_dir: Path, filename: str, install: Callable[[Any], None]) -> tuple[str, Any]:
    """An in-process target's database: a fresh SQLite file in the run's directory with the schema ``install``
    creates on a connection. Returns its URL and an engine."""
    from sqlalchemy import create_engine

    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / filename
    path.unlink(missing_ok=True)
    url = f"sqlite:///{path}"
    engine = create_engine(url)
    with engine.begin() as conn:
        install(conn)
    return url, engine


# A POST that seeds a fuzz world before the passes: (path, JSON body, headers) -> the JSON answer.
SeedPost = Callable[[str, dict[str, Any], dict[str, str]], dict[str, Any]]


def bearer(token: str) -> dict[str, str]:
    """The Authorization header of a bearer token: a role's credentials, a seeding request's."""
    return {"Authorization": f"Bearer {token}"}


def seeding_post(app: Any = None, base_url: str | None = None) -> SeedPost:
    """A target's seeding POST: through ``app``'s test client (in process) or over HTTP to ``base_url`` (on its
    stack). Anything but a 2xx answer is a RuntimeError: the world the passes start from could not be built."""
    if app is not None:
        client = app.test_client()

        def send(path: str, body: dict[str, Any], headers: dict[str, str]) -> tuple[int, Any, str]:
            resp = client.post(path, json=body, headers=headers)
            return resp.status_code, resp.get_json(silent=True), resp.get_data(as_text=True)
    else:
        import requests  # here, not at import: a system's import path stays free of urllib3 (locust patches ssl)

        http = requests.Session()

        def send(path: str, body: dict[str, Any], headers: dict[str, str]) -> tuple[int, Any, str]:
            resp = http.post(f"{base_url}{path}", json=body, headers=headers, timeout=10)
            try:
                answer = resp.json()
            except ValueError:
                answer = None
            return resp.status_code, answer, resp.text

    def post(path: str, body: dict[str, Any], headers: dict[str, str]) -> dict[str, Any]:
        status, answer, text = send(path, body, headers)
        if status >= 300 or not isinstance(answer, dict):
            raise RuntimeError(f"seeding the fuzz world: {status} {text[:300]}")
        return answer

    return post


def streaming_operations(doc: dict[str, Any]) -> list[tuple[str, str]]:
    """(METHOD, path) of every operation whose successful answers are only event streams: they never end, so a
    fuzzer waiting on their body would wait forever."""
    out = []
    for path, item in doc.get("paths", {}).items():
        for method, operation in item.items():
            if not isinstance(operation, dict) or "responses" not in operation:
                continue
            types = {t for status, answer in operation["responses"].items() if str(status).startswith("2")
                     for t in (_resolve(doc, answer).get("content") or {})}
            if types and types <= {EVENT_STREAM}:
                out.append((method.upper(), path))
    return out


def _resolve(doc: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    while isinstance(node, dict) and "$ref" in node:
        *_, section, name = node["$ref"].split("/")
        node = doc["components"][section][name]
    return node


def documented_refusals(doc: dict[str, Any]) -> Refusals:
    """Every answer's REFUSALS, by (operation label, status)."""
    out: Refusals = {}
    for path, item in doc.get("paths", {}).items():
        for method, operation in item.items():
            for status, answer in (operation.get("responses", {}) if isinstance(operation, dict) else {}).items():
                codes = _resolve(doc, answer).get(REFUSALS)
                if codes and str(status).isdigit():
                    out[(f"{method.upper()} {path}", int(status))] = frozenset(codes)
    return out


def with_examples(doc: dict[str, Any], examples: dict[str, list[Any]]) -> dict[str, Any]:
    """A copy of ``doc`` whose path parameters named in ``examples`` have those values as their examples."""
    if not examples:
        return doc
    out = copy.deepcopy(doc)
    for item in out.get("paths", {}).values():
        declared = [*item.get("parameters", [])]
        for operation in item.values():
            if isinstance(operation, dict):
                declared += operation.get("parameters", [])
        for param in declared:
            param = _resolve(out, param)
            values = examples.get(param.get("name", "")) if param.get("in") == "path" else None
            if values:
                param.pop("example", None)
                param["examples"] = {f"seeded-{i}": {"value": v} for i, v in enumerate(values)}
    return out


def findings_of(events: Iterable[Any], role: str, refusals: Refusals | None = None) -> RolePass:
    """One role's pass, read from Schemathesis's engine events. The repros carry the credential the request was
    sent with (a throwaway deployment's: replace it with one of the same role to replay against another)."""
    from schemathesis.engine import events as ev

    result = RolePass(role)
    kept: dict[tuple[str, str, str], Finding] = {}
    for event in events:
        if isinstance(event, ev.ScenarioFinished | ev.FuzzScenarioFinished):
            result.cases += len(event.recorder.cases)
            for finding in _recorded(event.recorder, role):
                if _documented(finding, refusals or {}):
                    result.refused_as_documented += 1
                else:
                    _keep(kept, finding)
        elif isinstance(event, ev.PhaseStarted) and event.payload is not None:
            result.links, result.inferred_links = event.payload.transitions_total, event.payload.inferred_transitions
        elif isinstance(event, ev.NonFatalError):
            _error(result, event)
        elif isinstance(event, ev.FatalError):
            result.errors.append(f"{type(event.exception).__name__}: {event.exception}")
        elif isinstance(event, ev.EngineFinished):
            result.seconds, result.stop_reason = event.running_time, str(event.stop_reason.value)
            for failure in event.failures:  # a check over the whole run (its after_run): no single request
                _keep(kept, Finding(operation=failure.operation or "(the run)",
                                    check=(type(failure).checks or (type(failure).__name__,))[0], role=role,
                                    title=failure.title, message=failure.message, status=None, body="", curl=[]))
    result.findings = list(kept.values())
    return result


def _documented(finding: Finding, refusals: Refusals) -> bool:
    """A schema-valid request refused with a problem code its answer's REFUSALS name."""
    if finding.check != "positive_data_acceptance" or finding.status is None:
        return False
    codes = refusals.get((finding.operation, finding.status))
    if not codes:
        return False
    try:
        body = json.loads(finding.full_body)
    except ValueError:
        return False
    return isinstance(body, dict) and body.get("code", body.get("type")) in codes


def _error(result: RolePass, event: Any) -> None:
    import requests

    where = f"{event.label}: {type(event.value).__name__}: {event.value}"
    if isinstance(event.value, requests.RequestException):
        result.unanswered.append(where)
    else:
        result.errors.append(where)


def _keep(kept: dict[tuple[str, str, str], Finding], finding: Finding) -> None:
    first = kept.get(finding.key)
    if first is None:
        kept[finding.key] = finding
        return
    first.count += 1
    if len(first.more) < EXAMPLES_KEPT - 1 and finding.curl != first.curl:
        first.more.append(finding.curl)


def _recorded(recorder: Any, role: str) -> Iterator[Finding]:
    for case_id, nodes in recorder.checks.items():
        for node in nodes:
            info = node.failure_info
            if info is None:
                continue
            failure = info.failure
            data = recorder.find_failure_data(parent_id=case_id, failure=failure)
            answer = recorder.interactions.get(failure.case_id or case_id)
            response = answer.response if answer is not None else None
            curl = [step.curl for step in info.steps] or [data.case.as_curl_command(headers=data.headers)]
            yield Finding(
                operation=data.case.operation.label, check=node.name, role=role, title=failure.title,
                message=failure.message, status=getattr(response, "status_code", None),
                body=_shown(_text(response)), curl=curl, full_body=_text(response))


def _text(response: Any) -> str:
    content = getattr(response, "content", None)
    return content.decode("utf-8", "replace") if content else ""


def _shown(text: str) -> str:
    return text if len(text) <= BODY_SHOWN else text[:BODY_SHOWN] + " ..."


# ------------------------------------------------------------------------------------------------ the shell


@contextmanager
def serving(app: Any) -> Iterator[str]:
    """A WSGI app on a free loopback port, in threads of this process, for the block: its base URL."""
    from werkzeug.serving import make_server

    server = make_server(LOOPBACK, 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, name="fuzz-wsgi", daemon=True)
    thread.start()
    try:
        yield f"http://{LOOPBACK}:{server.server_port}"
    finally:
        server.shutdown()
        thread.join()


def _quiet_request_log() -> None:
    import logging

    logging.getLogger("werkzeug").setLevel(logging.ERROR)


def run_pass(doc: dict[str, Any], base_url: str, role: str, headers: dict[str, str], seconds: int,
             seed: int, max_examples: int | None = None) -> RolePass:
    """One role's pass of every check, for at most ``seconds``; with ``max_examples``, instead, until every phase
    has run at most that many generated examples per operation (a run bounded by work, not time)."""
    import schemathesis
    from schemathesis.engine import from_schema

    generation: dict[str, Any] = {"with-security-parameters": False, "database": "none"}
    bound: dict[str, Any] = {"max-time": max(1, seconds)}
    if max_examples is not None:
        generation["max-examples"], bound = max_examples, {}
    config = schemathesis.Config.from_dict({
        "seed": seed, **bound, "base-url": base_url, "headers": headers,
        "checks": {"enabled": True},  # every check: the CLI's --checks all
        # Credentials are the role's (sent as headers), not generated; no example database in the working directory.
        "generation": generation,
        "output": {"sanitization": {"enabled": False}},  # the repros carry the headers they were sent with
    })
    schema: Any = schemathesis.openapi.from_dict(doc, config=config)
    for method, path in streaming_operations(doc):
        schema = schema.exclude(method=method, path=path)
    return findings_of(from_schema(schema).execute(), role, documented_refusals(doc))


def fuzz(system_name: str, spec: FuzzSpec, *, minutes: float, in_process: bool, seed: int, out: Path,
         on_pass: Callable[[str], None] | None = None, max_examples: int | None = None) -> FuzzReport:
    """Deploy the system (in process or on its real stack), fuzz it one role at a time for ``minutes`` in all (or,
    with ``max_examples``, for that many examples per operation and phase), then judge its invariants on what the
    requests left."""
    deploy = spec.in_process if in_process or spec.stack is None else spec.stack
    mode = "in-process" if deploy is spec.in_process else "stack"
    doc = spec.openapi()
    budget = 0.0 if max_examples is not None else minutes * 60.0
    share = max(1, int(budget / len(spec.roles)))
    started = time.monotonic()
    with deploy(FuzzRequest(out.resolve() / "deployment", seed)) as target, _base_url(target) as base_url:
        passes = []
        for role in spec.roles:
            if on_pass is not None:
                on_pass(role)
            passes.append(run_pass(with_examples(doc, target.examples(role)), base_url, role,
                                   target.credentials(role), share, seed, max_examples))
        verdicts = target.verdicts()
    excluded = [f"{m} {p}" for m, p in streaming_operations(doc)]
    return FuzzReport(system_name, mode, seed, budget, passes, verdicts, excluded, time.monotonic() - started)


@contextmanager
def _base_url(target: FuzzTarget) -> Iterator[str]:
    if target.base_url is not None:
        yield target.base_url
        return
    if target.app is None:
        raise ValueError("a fuzz target needs an app or a base URL")
    _quiet_request_log()
    with serving(target.app) as url:
        yield url
