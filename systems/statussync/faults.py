"""The status sync's faults (chaos.faults.registry("statussync")): crash points and held transactions of its
processes, the database away or failing inside a transaction, and its own: Centrifugo answering errors, restarting
(a new epoch, its history lost), deliveries of different channels reordered, relays paused, and
clients' links cut (a reconnect storm, a client asleep). Native halves (systems.statussync.stack) act on a
SyncNemesis: crash points through the file the processes read, relays paused by SIGSTOP, Centrifugo stopped and
started, clients' own Toxiproxy links cut, the database's link cut, inserts failed by a MariaDB trigger that SIGNALs,
the server API's answers replaced by an HTTP fault proxy (stack.http_faults); the rest are the simulation's only so
far."""

from __future__ import annotations

import dataclasses
from typing import Any

from sqlalchemy import text

from chaos import faults as chaos
from chaos.faults import Fault, Params, Shell, needs
from chaos.native import Nemesis
from kernel.failpoints import write_points

FAULTS = chaos.registry("statussync")


class SyncNemesis(Nemesis):
    """The status sync's real stack (systems.statussync.stack.SyncStack) as the faults' native halves act on it:
    its processes and its Toxiproxy links, one a client."""

    def __init__(self, stack: Any, clients: int, time_factor: float = 1.0) -> None:
        super().__init__(FAULTS, time_factor)
        self.stack, self.clients = stack, clients

    @property
    def links(self) -> Any:
        return self.stack.toxiproxy.client

    def arm_crash_points(self, points: list[Any]) -> None:
        """Through the file the processes read; scenario seconds scale like every other window."""
        write_points(str(self.stack.failpoints), [dataclasses.replace(p, seconds=p.seconds * self.factor)
                                                  for p in points])

    def chosen_clients(self, params: Params) -> list[int]:
        """params.share (1.0) of the clients, the first ones by name (as the simulation chooses)."""
        names = sorted(range(self.clients), key=lambda n: f"client-{n}")
        return names[:max(1, round(len(names) * float(params.get("share", 1.0))))] if names else []


def _relays_paused_native(nemesis: SyncNemesis, params: Params, on: bool) -> None:
    for name, comp in nemesis.stack.processes.items():
        if name.startswith("relay-"):
            comp.pause() if on else comp.resume()


def _centrifugo_restart_native(nemesis: SyncNemesis, params: Params, on: bool) -> None:
    """The memory engine restarted: stopped and started again on its port (its Toxiproxy links stay), every
    channel a new epoch and no history; its clients reconnect. From the thread that started it (a server dies
    with the thread that started it): the runner applies faults from its own thread."""
    if on:
        nemesis.stack.centrifugo.stop()
        nemesis.stack.centrifugo.start()
        nemesis.record("nemesis", "info", "centrifugo-restart", {})


def _clients_cut_native(nemesis: SyncNemesis, params: Params, on: bool) -> None:
    for n in nemesis.chosen_clients(params):  # a disabled proxy closes its connections and refuses new ones
        nemesis.stack.toxiproxy.client.set_enabled(f"ws-client-{n}", not on)


DB_LINK = "statussync-db"  # the Toxiproxy link every process of the stack reaches MariaDB through
FAILING_TABLES = ("task_outbox",)  # what the native db-error can fail (a trigger each)


def _db_error_native(nemesis: SyncNemesis, params: Params, on: bool) -> None:
    """A real error inside the transaction: a BEFORE INSERT trigger that SIGNALs (MariaDB has no trigger that reads
    a switch table cheaply enough to install once), created for the window, as root."""
    with nemesis.stack.owner.begin() as conn:
        for table in params.get("tables", []):
            trigger = f"sortie_fault_{table}"
            conn.execute(text(f"DROP TRIGGER IF EXISTS {trigger}"))
            if on:
                conn.execute(text(f"CREATE TRIGGER {trigger} BEFORE INSERT ON {table} FOR EACH ROW "
                                  "SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'sortie: injected insert failure'"))


SERVER_API_PREFIX = "/api/"  # Centrifugo's server API (the relays' publishes); never the clients' WebSockets


def _centrifugo_errors_native(nemesis: SyncNemesis, params: Params, on: bool) -> None:
    """The server API answers params.status: the stack's HTTP fault proxy between the relays' link and Centrifugo
    (SyncStack.start_centrifugo(api_faults=True)) answers it instead of forwarding (an HTTP status, which Toxiproxy,
    a TCP proxy, cannot give)."""
    proxy = nemesis.stack.api_faults
    if proxy is None:
        raise RuntimeError("centrifugo-errors natively needs the stack's HTTP fault proxy (start_centrifugo("
                           "api_faults=True))")
    if on:
        proxy.set(int(params.get("status", 503)), SERVER_API_PREFIX)
    else:
        proxy.clear()


def _centrifugo_errors(world: Any, params: Params, on: bool) -> None:
    world.centrifugo.error_status = int(params.get("status", 503)) if on else None


def _status_check(params: Params, shell: Shell) -> None:
    status = int(params.get("status", 503))
    if not 400 <= status < 600:
        raise ValueError(f"centrifugo-errors: params.status {status} is not an HTTP error")


NODE_DOWN = "centrifugo-node-down"


def node_of(client: str, nodes: int) -> int:
    """The node a client (``client-N``) connects to among ``nodes`` behind the balancer: N mod nodes."""
    return int(client.rsplit("-", 1)[1]) % nodes


def _node(params: Params) -> tuple[int, int]:
    return int(params.get("node", 1)), int(params.get("nodes", 2))


def _node_check(params: Params, shell: Shell) -> None:
    node, nodes = _node(params)
    if nodes < 2 or not 0 <= node < nodes:
        raise ValueError(f"{NODE_DOWN}: params.node {node} must be one of params.nodes {nodes} (two or more)")


def _node_down(world: Any, params: Params, on: bool) -> None:
    """The model is the shared Redis engine: a lost node drops its clients' connections, and they reconnect (to a
    live node) and recover from the history the engine kept (no new epoch: contrast centrifugo-restart)."""
    if on:
        node, nodes = _node(params)
        for name in sorted(world.centrifugo.connections):
            if node_of(name, nodes) == node:
                world.centrifugo.disconnect(name)
        world.history.add(world.env.now, "nemesis", "info", NODE_DOWN, {"node": node})


def _node_down_native(nemesis: SyncNemesis, params: Params, on: bool) -> None:
    """SIGKILL the node (its links moved to a live node first), started again at the heal: SyncStack.node_down."""
    node, _ = _node(params)
    nemesis.stack.node_down(node, on)
    if on:
        nemesis.record("nemesis", "info", NODE_DOWN, {"node": node})


def _centrifugo_restart(world: Any, params: Params, on: bool) -> None:
    if on:
        world.centrifugo.restart()
        world.history.add(world.env.now, "nemesis", "info", "centrifugo-restart", {})


def _reorder(world: Any, params: Params, on: bool) -> None:
    world.centrifugo.spread_s = float(params.get("spread_s", 2.0)) if on else 0.0


def _relays_paused(world: Any, params: Params, on: bool) -> None:
    world.relays_paused = on


def _clients_cut(world: Any, params: Params, on: bool) -> None:
    """params.share (1.0) of the clients, the first ones by name, lose their link for the window."""
    names = sorted(world.centrifugo.connections)
    chosen = names[:max(1, round(len(names) * float(params.get("share", 1.0))))] if names else []
    if on:
        world.cut_clients |= set(chosen)
        for name in chosen:
            world.centrifugo.disconnect(name)
    else:
        world.cut_clients -= set(chosen)


FAULTS.register(
    chaos.any_crash_point(),
    dataclasses.replace(chaos.hold_transaction(), native=None),
    Fault("db-outage", "the database is unreachable", chaos.db_down, chaos.cut_links(DB_LINK)),
    dataclasses.replace(chaos.db_error("db-error", "inserts into params.tables fail inside their transaction",
                                       FAILING_TABLES), native=_db_error_native),
    Fault("centrifugo-errors", "every server API publish answers params.status (503; 429; a 4xx is permanent)",
          _centrifugo_errors, _centrifugo_errors_native, _status_check),
    Fault("centrifugo-restart", "Centrifugo's engine restarts: every channel a new epoch, its history lost, every "
          "connection dropped (a Redis flush differs: CentrifugoModel.flush)", _centrifugo_restart,
          _centrifugo_restart_native),
    Fault(NODE_DOWN, "of params.nodes (2) Centrifugo nodes on one Redis engine, node params.node (1) is lost for the "
          "window: its clients reconnect to a live node and recover from the shared history",
          _node_down, _node_down_native, _node_check),
    Fault("delivery-reorder", "deliveries of different channels take up to params.spread_s (2) seconds more",
          _reorder, None),
    Fault("relays-paused", "both outbox relays stop publishing for the window (SIGSTOP-like)", _relays_paused,
          _relays_paused_native),
    Fault("clients-cut", "params.share (1.0) of the clients lose their link for the window", _clients_cut,
          _clients_cut_native, needs()),
)
