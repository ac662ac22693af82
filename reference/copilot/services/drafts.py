"""Drafts, routes and approvals, and the server-side validation of model-drafted plans (seed 000 §7.3).

A draft is editable and versioned; each version has its own immutable route row, and an approval is
bound to one draft version. Everything a language model proposed (device id, coordinates, altitude,
actions) is checked here against the area, the user's permissions and fixed limits.
"""

from __future__ import annotations

import hashlib
import json
import math
import uuid
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Select, and_, bindparam, insert, select

from reference.copilot import bugs
from reference.copilot.effects import Tx
from reference.copilot.errors import Conflict, Forbidden, NotFound, ValidationFailed
from reference.copilot.models import (
    ApprovalOrder,
    Device,
    FlightRoute,
    SiteArea,
    TaskDraft,
    UserAreaPermission,
    UserDevicePermission,
)
from reference.copilot.tasks import add_audit

_DRAFTS, _ROUTES, _AREAS = TaskDraft.__table__, FlightRoute.__table__, SiteArea.__table__
_DEVICES, _DEVICE_PERMS, _AREA_PERMS = Device.__table__, UserDevicePermission.__table__, UserAreaPermission.__table__
# Core statements built once: drafts are made, read and approved all day long (an ORM load or flush costs several
# times a Core row here). Rows are read-only; the one change to a draft's row (revise_draft) loads it through the ORM.
_AREA_BY_ID = select(_AREAS).where(_AREAS.c.id == bindparam("area_id"))
_AREA_PERMITTED = select(_AREA_PERMS.c.user_id).where(_AREA_PERMS.c.user_id == bindparam("user_id"),
                                                      _AREA_PERMS.c.area_id == bindparam("area_id"))
# The device's area, when the device exists and the user may operate it (else no row).
_DEVICE_AREA = (select(_DEVICES.c.area_id)
                .join(_DEVICE_PERMS, and_(_DEVICE_PERMS.c.device_id == _DEVICES.c.id,
                                          _DEVICE_PERMS.c.user_id == bindparam("user_id")))
                .where(_DEVICES.c.id == bindparam("device_id")))
_DRAFT_BY_ID = select(_DRAFTS).where(_DRAFTS.c.id == bindparam("draft_id"))
_DRAFT_BY_KEY = select(_DRAFTS).where(_DRAFTS.c.user_id == bindparam("user_id"),
                                      _DRAFTS.c.idempotency_key == bindparam("key"))
_ROUTE_BY_ID = select(_ROUTES).where(_ROUTES.c.id == bindparam("route_id"))
_DRAFT_INSERT, _ROUTE_INSERT = insert(_DRAFTS), insert(_ROUTES)
_APPROVAL_INSERT = insert(ApprovalOrder.__table__)

ALLOWED_ACTIONS = frozenset({"photo", "video", "thermal_scan", "hover", "spotlight", "loudspeaker"})
MIN_ALTITUDE_M = 10.0
MAX_WAYPOINTS = 200
MAX_SPEED_MPS = 15.0
MIN_SPEED_MPS = 0.5  # slower is no flight plan (a hover is an action); 5e-324 m/s was accepted
MAX_ACTIONS = 32  # actions are a plan's payload tasks (six kinds): 20,000 photos in one plan were accepted


@dataclass(frozen=True)
class Plan:
    """A flight plan as proposed (by a model or a person): validated before it is stored or flown."""

    device_id: str
    waypoints: list[list[float]]
    altitude_m: float
    actions: list[str]
    speed_mps: float = 8.0

    @classmethod
    def from_json(cls, data: Any) -> Plan:
        if not isinstance(data, dict):
            raise ValidationFailed("INVALID_PARAMETERS", "plan must be an object", field="plan")
        missing = [f for f in ("device_id", "waypoints", "altitude_m") if f not in data]
        if missing:
            raise ValidationFailed("MISSING_FIELD", f"plan.{missing[0]} is required", field=f"plan.{missing[0]}")
        device_id = data["device_id"]
        if not isinstance(device_id, str) or not device_id or len(device_id) > 128:
            raise ValidationFailed("INVALID_PARAMETERS", "plan.device_id must be a non-empty string",
                                   field="plan.device_id")
        waypoints = data["waypoints"]
        if not isinstance(waypoints, list) or not 2 <= len(waypoints) <= MAX_WAYPOINTS:
            raise ValidationFailed("INVALID_PARAMETERS", f"plan.waypoints must be a list of 2..{MAX_WAYPOINTS} points",
                                   field="plan.waypoints")
        points: list[list[float]] = []
        for i, p in enumerate(waypoints):
            if (not isinstance(p, list | tuple) or len(p) != 2
                    or not all(isinstance(c, int | float) and not isinstance(c, bool) for c in p)):
                raise ValidationFailed("INVALID_PARAMETERS", f"plan.waypoints[{i}] must be [lat, lon]",
                                       field=f"plan.waypoints[{i}]")
            points.append([float(p[0]), float(p[1])])
        altitude = data["altitude_m"]
        if not isinstance(altitude, int | float) or isinstance(altitude, bool):
            raise ValidationFailed("INVALID_PARAMETERS", "plan.altitude_m must be a number", field="plan.altitude_m")
        actions = data.get("actions", [])
        if not isinstance(actions, list) or not all(isinstance(a, str) for a in actions):
            raise ValidationFailed("INVALID_PARAMETERS", "plan.actions must be a list of strings", field="plan.actions")
        if len(actions) > MAX_ACTIONS:
            raise ValidationFailed("INVALID_PARAMETERS", f"plan.actions holds at most {MAX_ACTIONS} actions",
                                   field="plan.actions")
        speed = data.get("speed_mps", 8.0)
        if not isinstance(speed, int | float) or isinstance(speed, bool):
            raise ValidationFailed("INVALID_PARAMETERS", "plan.speed_mps must be a number", field="plan.speed_mps")
        return cls(device_id, points, float(altitude), list(actions), float(speed))

    def parameters(self) -> dict[str, Any]:
        return {"altitude_m": self.altitude_m, "actions": self.actions, "speed_mps": self.speed_mps}


ON_EDGE_TOLERANCE = 1e-9  # degrees (~0.1 mm): a point this close to an edge is on it


def _on_segment(lat: float, lon: float, y1: float, x1: float, y2: float, x2: float) -> bool:
    if not (min(y1, y2) - ON_EDGE_TOLERANCE <= lat <= max(y1, y2) + ON_EDGE_TOLERANCE
            and min(x1, x2) - ON_EDGE_TOLERANCE <= lon <= max(x1, x2) + ON_EDGE_TOLERANCE):
        return False
    length = math.hypot(y2 - y1, x2 - x1)
    cross = (y2 - y1) * (lon - x1) - (x2 - x1) * (lat - y1)
    return abs(cross) <= ON_EDGE_TOLERANCE * max(length, ON_EDGE_TOLERANCE)


def point_in_polygon(lat: float, lon: float, polygon: list[list[float]]) -> bool:
    """Strictly inside: a point on any edge or vertex is outside (a route must stay strictly inside the
    area); otherwise ray casting."""
    n = len(polygon)
    for i in range(n):
        (y1, x1), (y2, x2) = polygon[i], polygon[(i + 1) % n]
        if _on_segment(lat, lon, y1, x1, y2, x2):
            return False
    inside = False
    for i in range(n):
        (y1, x1), (y2, x2) = polygon[i], polygon[(i + 1) % n]
        if (y1 > lat) != (y2 > lat):
            x_cross = x1 + (lat - y1) * (x2 - x1) / (y2 - y1)
            if lon < x_cross:
                inside = not inside
    return inside


def check_plan(tx: Tx, user_id: str, area: Any, plan: Plan) -> None:
    """Every rule a plan must pass before it is stored, confirmed or dispatched (the rules: check_plan_facts)."""
    conn = tx.flushed()
    device_area_id = None
    area_permitted = conn.execute(_AREA_PERMITTED, {"user_id": user_id, "area_id": area.id}).first() is not None
    if area_permitted:  # read in the rules' order: a refused area reads no device
        device_area_id = conn.execute(_DEVICE_AREA, {"user_id": user_id, "device_id": plan.device_id}).scalar()
    check_plan_facts(area, plan, area_permitted=area_permitted, device_area_id=device_area_id)


def check_plan_facts(area: Any, plan: Plan, *, area_permitted: bool, device_area_id: str | None) -> None:
    """check_plan's rules over what it reads: whether the user holds a permission on ``area`` (a SiteArea or a row
    with its id, polygon and max_altitude_m), and the area of the plan's device when the device exists and the user
    may operate it (None otherwise). confirm reads the same facts in one statement (services.confirm)."""
    if not area_permitted:
        raise Forbidden("FORBIDDEN_AREA", f"user may not operate in area {area.id}", area_id=area.id)
    # An unknown device is refused as a foreign one is: the answer does not tell which devices exist.
    if device_area_id is None:
        raise Forbidden("FORBIDDEN_DEVICE", f"user may not operate device {plan.device_id}",
                        device_id=plan.device_id)
    if device_area_id != area.id:
        raise ValidationFailed("DEVICE_NOT_IN_AREA", f"device {plan.device_id} is not stationed in area {area.id}",
                               field="plan.device_id")
    for i, (lat, lon) in enumerate(plan.waypoints):
        if not point_in_polygon(lat, lon, area.polygon):
            raise ValidationFailed("COORDINATES_OUTSIDE_AREA", f"waypoint {i} ({lat}, {lon}) is outside area {area.id}",
                                   field=f"plan.waypoints[{i}]")
    # INJECTED BUG altitude-ceiling-unchecked: the floor only
    ceiling = math.inf if bugs.active(bugs.ALTITUDE_CEILING_UNCHECKED) else area.max_altitude_m
    if not MIN_ALTITUDE_M <= plan.altitude_m <= ceiling:
        raise ValidationFailed("ALTITUDE_OUT_OF_RANGE",
                               f"altitude {plan.altitude_m} m outside {MIN_ALTITUDE_M}..{area.max_altitude_m} m",
                               field="plan.altitude_m")
    unknown = sorted(set(plan.actions) - ALLOWED_ACTIONS)
    if unknown:
        raise ValidationFailed("UNKNOWN_ACTION", f"actions not allowed: {', '.join(unknown)}", field="plan.actions")
    if not MIN_SPEED_MPS <= plan.speed_mps <= MAX_SPEED_MPS:
        raise ValidationFailed("SPEED_OUT_OF_RANGE", f"speed must be in [{MIN_SPEED_MPS}, {MAX_SPEED_MPS}] m/s",
                               field="plan.speed_mps")


def _area(tx: Tx, area_id: str) -> Any:
    """The area's row (id, polygon, max_altitude_m, ...)."""
    area = tx.flushed().execute(_AREA_BY_ID, {"area_id": area_id}).first()
    if area is None:  # refused as a foreign area is: the answer does not tell which areas exist
        raise Forbidden("FORBIDDEN_AREA", f"user may not operate in area {area_id}", area_id=area_id)
    return area


def owned_draft(tx: Tx, draft_id: uuid.UUID | str, user_id: str) -> TaskDraft:
    """The user's draft; another user's draft is reported as not found (no existence oracle)."""
    try:
        key = draft_id if isinstance(draft_id, uuid.UUID) else uuid.UUID(str(draft_id))
    except ValueError:
        raise NotFound("DRAFT_NOT_FOUND", f"draft {draft_id} does not exist") from None
    draft = tx.session.get(TaskDraft, key, populate_existing=True)
    if draft is None or draft.user_id != user_id:
        raise NotFound("DRAFT_NOT_FOUND", f"draft {draft_id} does not exist")
    return draft


def reviewable_draft(tx: Tx, draft_id: uuid.UUID | str, approver_id: str) -> Any:
    """A draft an approver may read and decide (its row, read only): one in an area the approver holds a permission
    for; any other draft is reported as not found (an unknown approver, or one of another area, learns nothing)."""
    try:
        key = draft_id if isinstance(draft_id, uuid.UUID) else uuid.UUID(str(draft_id))
    except ValueError:
        raise NotFound("DRAFT_NOT_FOUND", f"draft {draft_id} does not exist") from None
    conn = tx.flushed()
    draft = conn.execute(_DRAFT_BY_ID, {"draft_id": key}).first()
    if draft is None or conn.execute(_AREA_PERMITTED, {"user_id": approver_id,
                                                       "area_id": draft.area_id}).first() is None:
        raise NotFound("DRAFT_NOT_FOUND", f"draft {draft_id} does not exist")
    return draft


def draft_request_hash(goal: str, area_id: str, plan: Plan | None) -> str:
    body = {"goal": goal, "area_id": area_id, "plan": None if plan is None else {
        "device_id": plan.device_id, "waypoints": plan.waypoints, **plan.parameters()}}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def draft_by_key(tx: Tx, user_id: str, key: str, request_hash: str) -> Any:
    """The draft an earlier request with this key made (its retry gets it back), or None; the key used for
    another payload is a conflict."""
    draft = tx.flushed().execute(_DRAFT_BY_KEY, {"user_id": user_id, "key": key}).first()
    if draft is not None and draft.request_hash != request_hash:
        raise Conflict("IDEMPOTENCY_KEY_REUSED", "this idempotency key was used for another draft; use a new key",
                       draft_id=str(draft.id))
    return draft


def create_draft(tx: Tx, user_id: str, goal: str, area_id: str, plan: Plan | None,
                 session_id: uuid.UUID | None = None, idempotency_key: str | None = None) -> TaskDraft:
    """A READY draft when a plan is given (validated first); GENERATING while a planner works on it. A key is
    stored with the payload's hash: ``draft_by_key`` finds the draft for a repeat, uq_draft_idempotency
    arbitrates a race."""
    request_hash = draft_request_hash(goal, area_id, plan)
    area = _area(tx, area_id)
    if plan is not None:
        check_plan(tx, user_id, area, plan)
    elif tx.flushed().execute(_AREA_PERMITTED, {"user_id": user_id, "area_id": area.id}).first() is None:
        # a plan still to come is no leave to draft in a foreign area
        raise Forbidden("FORBIDDEN_AREA", f"user may not operate in area {area.id}", area_id=area.id)
    draft_id, route_id = tx.new_id(), tx.new_id()
    values = {
        "id": draft_id, "user_id": user_id, "session_id": session_id, "status": "READY" if plan else "GENERATING",
        "version": 1, "goal": goal, "area_id": area.id, "device_id": plan.device_id if plan else "",
        "route_id": route_id, "parameters": plan.parameters() if plan else {}, "created_at": tx.now,
        "updated_at": tx.now,
        # INJECTED BUG draft-key-dropped: the key not stored (a retry finds nothing by it)
        "idempotency_key": None if bugs.active(bugs.DRAFT_KEY_DROPPED) else idempotency_key,
        "request_hash": request_hash if idempotency_key is not None else None,
    }
    conn = tx.flushed()
    conn.execute(_DRAFT_INSERT, values)  # first: the route row references the draft
    conn.execute(_ROUTE_INSERT, {"id": route_id, "draft_id": draft_id, "version": 1,
                                 "waypoints": plan.waypoints if plan else [], "created_at": tx.now})
    add_audit(tx, actor=user_id, action="DRAFT_CREATED", draft_id=draft_id, detail={"version": 1})
    return TaskDraft(**values)  # what was written, detached: a later change goes through owned_draft


def revise_draft(tx: Tx, user_id: str, draft_id: uuid.UUID | str, expected_version: int, plan: Plan) -> TaskDraft:
    """A new version with a new route row; approvals of the old version do not carry over."""
    draft = owned_draft(tx, draft_id, user_id)
    if draft.version != expected_version:
        raise Conflict("STALE_DRAFT_VERSION", f"draft is at version {draft.version}, not {expected_version}",
                       current_version=draft.version)
    check_plan(tx, user_id, _area(tx, draft.area_id), plan)
    route_id = tx.new_id()
    draft.version += 1
    if bugs.active(bugs.ROUTE_REWRITTEN):  # INJECTED BUG route-rewritten: the current route row edited in place
        route = tx.session.get(FlightRoute, draft.route_id)
        assert route is not None
        route.version, route.waypoints, route_id = draft.version, plan.waypoints, route.id
    else:
        tx.session.add(FlightRoute(id=route_id, draft_id=draft.id, version=draft.version, waypoints=plan.waypoints,
                                   created_at=tx.now))
    draft.status = "READY"
    draft.device_id = plan.device_id
    draft.parameters = plan.parameters()
    draft.route_id = route_id
    draft.updated_at = tx.now
    add_audit(tx, actor=user_id, action="DRAFT_REVISED", draft_id=draft.id, detail={"version": draft.version})
    return draft


def decide_approval(tx: Tx, approver_id: str, draft_id: uuid.UUID | str, draft_version: int,
                    approve: bool) -> ApprovalOrder:
    draft = reviewable_draft(tx, draft_id, approver_id)
    # separation of duties: who drafts does not approve (INJECTED BUG self-approval-allowed: unchecked)
    if draft.user_id == approver_id and not bugs.active(bugs.SELF_APPROVAL_ALLOWED):
        raise Forbidden("SELF_APPROVAL", "an approver may not approve their own draft", draft_id=str(draft.id))
    if draft.version != draft_version:
        raise Conflict("STALE_DRAFT_VERSION", f"draft is at version {draft.version}, not {draft_version}",
                       current_version=draft.version)
    values = {"id": tx.new_id(), "draft_id": draft.id, "draft_version": draft_version,
              "status": "APPROVED" if approve else "REJECTED", "approver_id": approver_id, "decided_at": tx.now}
    tx.flushed().execute(_APPROVAL_INSERT, values)
    order = ApprovalOrder(**values)  # what was written, detached
    add_audit(tx, actor=approver_id, action="APPROVAL_" + order.status, draft_id=draft.id,
              detail={"draft_version": draft_version, "approval_id": str(order.id)})
    return order


def route_of(tx: Tx, draft: Any) -> Any:
    """The draft's current route row (id, version, waypoints)."""
    route = tx.flushed().execute(_ROUTE_BY_ID, {"route_id": draft.route_id}).first()
    check_route(draft, route)
    assert route is not None
    return route


def check_route(draft: Any, route: Any) -> None:
    """A draft row always names its current route (``route``: the row its route_id names, or None)."""
    if route is None or route.version != draft.version:
        raise ValidationFailed("ROUTE_MISSING", f"draft {draft.id} has no route for version {draft.version}")


def latest_decision(draft_id: Any, draft_version: Any) -> Select[str]:
    """The status of the latest decision for exactly this draft version (one row at most): values or columns (a
    correlated subquery, services.confirm)."""
    return (select(ApprovalOrder.status)
            .where(ApprovalOrder.draft_id == draft_id, ApprovalOrder.draft_version == draft_version)
            # Two decisions at the same instant: the refusal wins (never fly on a tie).
            .order_by(ApprovalOrder.decided_at.desc(), (ApprovalOrder.status == "APPROVED").asc(), ApprovalOrder.id)
            .limit(1))


def any_approval(draft_id: Any) -> Select[uuid.UUID]:
    """An approval of any version of the draft (to tell APPROVAL_VERSION_MISMATCH from APPROVAL_REQUIRED)."""
    return select(ApprovalOrder.id).where(ApprovalOrder.draft_id == draft_id,
                                          ApprovalOrder.status == "APPROVED").limit(1)


# Built once with bound parameters (the dispatcher's pre-flight check asks for every task).
_LATEST_DECISION = latest_decision(bindparam("draft_id", type_=ApprovalOrder.__table__.c.draft_id.type),
                                   bindparam("draft_version"))


def approval_status(tx: Tx, draft_id: uuid.UUID, draft_version: int) -> str | None:
    """The latest decision for exactly this draft version, or None."""
    return tx.flushed().execute(_LATEST_DECISION, {"draft_id": draft_id,
                                                   "draft_version": draft_version}).scalar()
