"""The daemon's packet loops and their threads: one NFQUEUE loop per queue of the main range,
the DNS loop (domain rules), the http loop (http rules) and the host endpoints' hook loops, each
run on a thread of its own (the loop runs without the GIL)."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from pyclassify import domains, httprules
from pyclassify.enforce.errors import queue_error
from pyclassify.enforce.iptables import DNS_MARK, HTTP_DENY_MARK, HTTP_MARK, REJECT_MARK
from pyclassify.engine import NativeEngine
from pyclassify.nfqueue import open_queue
from pyclassify.project import Project

if TYPE_CHECKING:
    from pyclassify.enforce.config import EnforceConfig

#: Connections the HTTP loop follows at once (each holds at most one request head, 8 KiB).
HTTP_CONNECTIONS = 65536


class QueueLoops:
    """Every loop the daemon bound (``loops``), the threads running them, and which of them are
    the main range's, the DNS loop and the http loop."""

    def __init__(self, config: EnforceConfig, pod_allow: bool, host_allow: bool) -> None:
        self.config = config
        self.pod_allow = pod_allow
        self.host_allow = host_allow
        self.loops: list[Any] = []
        self.threads: list[threading.Thread] = []
        #: The loops of the main queue range (they admit connections to the http loop).
        self.main_loops: list[Any] = []
        #: The loop that learns DNS answers for domain rules; the loop of http rules.
        self.dns_loop: Any = None
        self.http_loop: Any = None

    def open_main(self, engine: NativeEngine) -> None:
        """One loop per queue of the configured range, judged by ``engine``."""
        cfg = self.config
        for q in range(cfg.queues[0], cfg.queues[1] + 1):
            try:
                loop = open_queue(
                    engine,
                    q,
                    pod_allow=self.pod_allow,
                    host_allow=self.host_allow,
                    fail_open=cfg.fail_open,
                    copy_range=cfg.copy_range,
                    maxlen=cfg.maxlen,
                    batch=cfg.batch,
                    batch_verdicts=cfg.batch_verdicts,
                    reject_mark=REJECT_MARK if cfg.reject else 0,
                )
            except OSError as e:
                raise queue_error(q, e) from e
            self.loops.append(loop)
        self.main_loops = list(self.loops)

    def open_dns(self, project: Project, engine: NativeEngine, queue: int) -> int | None:
        """With domain rules: a loop on ``queue`` that learns the addresses of the DNS answers
        our rules send it (those of queries policy allowed) before it lets them through."""
        if project.inventory.domains is None or not domains.has_domain_rules(project.policy_set):
            return None
        self.dns_loop = self._open_whole_packets(engine, queue, True, accept_mark=DNS_MARK, dns=True)
        return queue

    def open_http(self, project: Project, engine: NativeEngine, queue: int) -> int | None:
        """With http rules (and our own iptables rules to mark connections): a loop on ``queue``
        that judges the requests of the connections the main loops admit up to their request
        (from then on they hand such connections back with ``HTTP_MARK``). Without it, a
        connection whose verdict awaits its request is denied."""
        cfg = self.config
        if not cfg.install_rules or not httprules.has_http_rules(project.policy_set):
            return None
        self.http_loop = self._open_whole_packets(
            engine, queue, cfg.fail_open, http_deny_mark=HTTP_DENY_MARK, http_connections=HTTP_CONNECTIONS
        )
        return queue

    def _open_whole_packets(self, engine: NativeEngine, queue: int, fail_open: bool, **options: Any) -> Any:
        """A loop on ``queue`` that reads whole packets (DNS answers, HTTP requests), listed
        with the others; ``options`` say what it does with them."""
        cfg = self.config
        try:
            loop = open_queue(
                engine,
                queue,
                pod_allow=self.pod_allow,
                host_allow=self.host_allow,
                fail_open=fail_open,
                copy_range=65535,
                maxlen=cfg.maxlen,
                batch=cfg.batch,
                batch_verdicts=cfg.batch_verdicts,
                **options,
            )
        except OSError as e:
            raise queue_error(queue, e) from e
        self.loops.append(loop)
        return loop

    def admit_http(self) -> None:
        """The main loops admit connections up to their request from now on (our rules that
        take their mark must be in place)."""
        for main in self.main_loops:
            main.admit_http(self.http_loop, HTTP_MARK)

    def open_hook(self, engine: NativeEngine, queue: int, **options: Any) -> Any:
        """A loop of a host endpoint hook (``HostHooks``) on ``queue``, with this daemon's queue
        settings."""
        cfg = self.config
        try:
            loop = open_queue(
                engine,
                queue,
                fail_open=cfg.fail_open,
                copy_range=cfg.copy_range,
                maxlen=cfg.maxlen,
                batch=cfg.batch,
                batch_verdicts=cfg.batch_verdicts,
                **options,
            )
        except OSError as e:
            raise queue_error(queue, e) from e
        self.loops.append(loop)
        return loop

    def next_queue(self) -> int:
        """The queue after every queue bound."""
        return max(loop.queue for loop in self.loops) + 1

    def run(self, since: int = 0) -> None:
        """Starts the threads of the loops opened from index ``since`` on."""
        for loop in self.loops[since:]:
            t = threading.Thread(target=loop.run, name=f"pyclassify-nfq{loop.queue}", daemon=True)
            t.start()
            self.threads.append(t)

    def not_healthy(self) -> str | None:
        stopped = [t.name for t in self.threads if not t.is_alive()]
        return f"packet loop stopped: {', '.join(stopped)}" if stopped else None

    def stop(self) -> None:
        """Stops every loop and waits for its thread."""
        for loop in self.loops:
            loop.stop()
        for t in self.threads:
            t.join(timeout=5)

    def close(self) -> None:
        """Unbinds every queue (the loops stay listed: their last events are still drained)."""
        for loop in self.loops:
            try:
                loop.close()
            except RuntimeError:
                pass

    def clear(self) -> None:
        self.loops = []
        self.threads = []

    def stats(self) -> dict[str, int]:
        total: dict[str, int] = {}
        for loop in self.loops:
            for k, v in loop.stats.items():
                total[k] = total.get(k, 0) + v
        return total
