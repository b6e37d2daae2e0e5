"""The resync of our iptables rules: someone else's change to them (a flush, a reorder, a rule
replaced, another daemon's chains in place of ours) is found and undone within ``resync``
seconds, as Felix resyncs its rules; ``pyclassify enforce --uninstall`` is obeyed instead."""

from __future__ import annotations

import threading
from collections.abc import Callable

from pyclassify.enforce.iptables import Rules
from pyclassify.enforce.log import FlowLog
from pyclassify.enforce.metrics import Metrics

#: Failed checks of our iptables rules in a row (a spawn that fails: no binary, a pids limit) after
#: which ``/healthz`` fails: the liveness probe's restart is safe (the rules are adopted).
RESYNC_FAILURES_UNHEALTHY = 3


class RulesResync:
    """Owns the resync thread and the count of checks that failed in a row."""

    def __init__(
        self, interval: float, log: FlowLog, metrics: Metrics, lock: threading.Lock, uninstalled: Callable[[], None]
    ) -> None:
        self.interval = interval
        self.log = log
        self.metrics = metrics
        #: Held around each check: never beside a reload's own transaction.
        self.lock = lock
        #: Called (with ``lock`` held) once our rules were found uninstalled; the resync ends.
        self.uninstalled = uninstalled
        self.failures = 0
        self.error = ""
        self.thread: threading.Thread | None = None

    def start(self, rules: Callable[[], Rules | None], stop: threading.Event) -> None:
        self.thread = threading.Thread(target=self._run, args=(rules, stop), name="pyclassify-resync", daemon=True)
        self.thread.start()

    def join(self) -> None:
        if self.thread is not None:
            self.thread.join(timeout=30)  # a repair under way ends before the rules go
            self.thread = None

    def not_healthy(self) -> str | None:
        problems = []
        if self.thread is not None and not self.thread.is_alive():
            problems.append(f"{self.thread.name} stopped")
        if self.failures >= RESYNC_FAILURES_UNHEALTHY:
            problems.append(f"the iptables rules could not be checked {self.failures} times in a row: {self.error}")
        return "; ".join(problems) or None

    def _run(self, current: Callable[[], Rules | None], stop: threading.Event) -> None:
        while not stop.wait(self.interval):
            rules = current()
            if rules is None:
                return
            try:
                with self.lock:
                    if rules.uninstalled():
                        self.uninstalled()
                        self.thread = None  # ended on purpose: not a dead thread
                        return
                    found = rules.repair()
            except Exception as e:  # noqa: BLE001 - iptables failing, or not started at all (no binary, a pids limit)
                self.failures += 1
                self.error = f"{type(e).__name__}: {e}"
                self.log.emit("rules-repair-failed", error=self.error, failures=self.failures)
                continue
            self.failures = 0
            if found:
                self.metrics.rules_repaired.inc()
                self.log.emit("rules-repaired", found=found)
