"""The Copilot's runtime in the real shell: the kernel's (kernel.runtime) with its platform calls, and what both
shells record of the Copilot (its platform calls, its outbox's transactions, the platform's webhook batches)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kernel import runtime as kernel_runtime
from kernel.runtime import OpenTransaction, RecordedTransactions
from reference.copilot import platform as p
from reference.copilot.effects import CallPlatform
from reference.copilot.platform import PlatformClient
from reference.copilot.services.outbox import CLAIM, MARK_SENT, RELEASE

# Platform calls recorded in the history, as the simulation shell records them (systems.copilot.sim).
RECORDED_PLATFORM_CALLS = frozenset({"get_device", "create_flight", "find_by_request_id", "get_flight",
                                     "cancel_flight"})
# The history operation both shells record when a platform call starts inside an open database transaction
# (a transaction held across an external call: invariant I18, systems.copilot.checkers).
PLATFORM_CALL_IN_TRANSACTION = "platform-call-in-transaction"
# The history operation both shells record for a webhook batch of platform events that held duplicates
# (one per such batch, never per event): proof that duplicates reached the backend (scenario R3).
EVENTS_WITH_DUPLICATES = "events"
# The transactions both shells record: the outbox publisher's. A claim's ok names the rows it took, in its order; the
# publisher's rounds are judged from them (I36, I37).
RECORDED_TRANSACTIONS: RecordedTransactions = {
    CLAIM: lambda claimed: {"ids": [m.event_id for m in claimed]},
    MARK_SENT: lambda _result: {},
    RELEASE: lambda _result: {},
}


def events_value(accepted: int, duplicates: int) -> dict[str, int]:
    """What a history records of an ingested batch with duplicates (both shells record the same)."""
    return {"duplicates": duplicates, "accepted": accepted}


def note_platform_call(current: OpenTransaction, method: str, task_id: str | None, via: str) -> None:
    """A platform call starts while ``current`` is open (invariant I18 is violated): recorded when the process keeps
    a history."""
    if current.recorder is not None:
        current.recorder.op("info", PLATFORM_CALL_IN_TRANSACTION,
                            {"method": method, "task_id": task_id, "transaction": current.name, "via": via})


def call_value(effect: CallPlatform) -> dict[str, Any]:
    """What a history records of a platform call (both shells record the same)."""
    value: dict[str, Any] = {"task_id": effect.task_id, "method": effect.method, "try": effect.try_no}
    if effect.method == "create_flight":
        value["request_id"] = effect.args[0].request_id
    return value


def platform_answer(result: Any) -> dict[str, Any]:
    """The fields of a platform answer that a history records (both shells record the same)."""
    if isinstance(result, p.FlightInfo):
        return {"external_id": result.external_id, "status": result.status}
    if isinstance(result, p.DeviceState):
        return {"online": result.online, "battery": result.battery}
    if isinstance(result, p.CancelResult):
        return {"accepted": result.accepted, "status": result.status}
    return {"found": False} if result is None else {}


class OpRecorder(kernel_runtime.OpRecorder):
    """The kernel's recorder with the Copilot's recorded transactions and its platform calls."""

    def __init__(self, path: str, process: str) -> None:
        super().__init__(path, process, RECORDED_TRANSACTIONS)

    def around(self, effect: Any, perform: Callable[[Any], Any]) -> Any:
        if not (isinstance(effect, CallPlatform) and effect.method in RECORDED_PLATFORM_CALLS):
            return super().around(effect, perform)
        value = call_value(effect)
        self.op("invoke", effect.method, value)
        try:
            result = perform(effect)
        except p.PlatformTimeout as exc:
            self.op("info", effect.method, {**value, "error": "TIMEOUT", "detail": exc.code})
            raise
        except p.PlatformError as exc:
            self.op("fail", effect.method, {**value, "error": exc.code})
            raise
        self.op("ok", effect.method, {**value, **platform_answer(result)})
        return result


@dataclass
class Runtime(kernel_runtime.Runtime):
    """The kernel's runtime with a platform client (the dispatcher's and the reconciler's calls)."""

    platform: PlatformClient | None = None

    def _perform(self, effect: Any) -> Any:
        if not isinstance(effect, CallPlatform):
            return super()._perform(effect)
        assert self.platform is not None, "no platform client configured"
        current = kernel_runtime.open_transaction()
        if current is None or effect.method == "capabilities":  # capabilities: configuration, no call
            return getattr(self.platform, effect.method)(*effect.args)
        # Performed from inside a transaction (a transaction function that drives work itself).
        note_platform_call(current, effect.method, effect.task_id, "runtime")
        current.noting = True
        try:
            return getattr(self.platform, effect.method)(*effect.args)
        finally:
            current.noting = False
