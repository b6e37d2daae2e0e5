"""The Kubernetes API, through the official client: its configuration (a kubeconfig file and
context, or the in-cluster service account), TLS, authentication and HTTP. Bodies are read as raw
JSON (orjson), not decoded into the client's models, which would cost most of a list of 10k pods.
"""

from __future__ import annotations

import builtins  # the client has a method named list: signatures after it name the type so
import os
import socket
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import quote, urlsplit

import orjson
from kubernetes import client as k8s_client
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException
from kubernetes.utils.keepalive import tcp_keepalive_socket_options

__all__ = ["ApiException", "Gone", "KubeClient", "KubeconfigError", "api_server", "load_client"]


class KubeconfigError(ValueError):
    """A kubeconfig that cannot be used; the message names the file, in one line."""


def _kubeconfig_problem(kubeconfig: str | None, e: Exception) -> str:
    where = kubeconfig or os.environ.get("KUBECONFIG") or "~/.kube/config"
    if kubeconfig is not None and not os.path.exists(kubeconfig):
        return f"kubeconfig {where}: no such file"
    if isinstance(e, UnicodeDecodeError):
        why = "not UTF-8 text"
    else:
        # The YAML reader's messages span lines ("while parsing ... in "f", line 3 ..."): one line.
        why = " ".join(str(e).split()) or type(e).__name__
    return f"kubeconfig {where}: {why}"


class Gone(Exception):
    """The resourceVersion a watch asked for is too old (HTTP 410): list again."""


def _configuration(kubeconfig: str | None, context: str | None, in_cluster: bool | None) -> Any:
    configuration = k8s_client.Configuration()
    if in_cluster is None:
        in_cluster = kubeconfig is None and context is None and bool(os.environ.get("KUBERNETES_SERVICE_HOST"))
    if in_cluster:
        k8s_config.load_incluster_config(client_configuration=configuration)
    else:
        try:
            k8s_config.load_kube_config(
                config_file=kubeconfig, context=context, client_configuration=configuration, persist_config=False
            )
        except Exception as e:  # noqa: BLE001 - the library raises what its YAML reader raises
            raise KubeconfigError(_kubeconfig_problem(kubeconfig, e)) from e
    return configuration


def load_client(
    kubeconfig: str | None = None, context: str | None = None, in_cluster: bool | None = None, mark: int = 0
) -> KubeClient:
    """A client for ``kubeconfig`` (and ``context``); ``in_cluster``: the service account of the
    pod this runs in (its token and CA, as client libraries read them); neither: in-cluster when
    running in a pod, else the default kubeconfig (``$KUBECONFIG``, ~/.kube/config) as kubectl
    reads it. ``mark``: the packet mark of its sockets (SO_MARK, needs CAP_NET_ADMIN)."""
    configuration = _configuration(kubeconfig, context, in_cluster)
    # One connection per watched kind, and room for lists and requests beside them.
    configuration.connection_pool_maxsize = max(configuration.connection_pool_maxsize or 0, 64)
    if mark:
        configuration.socket_options = [*tcp_keepalive_socket_options(), (socket.SOL_SOCKET, socket.SO_MARK, mark)]
    return KubeClient(k8s_client.ApiClient(configuration))


def api_server(
    kubeconfig: str | None = None, context: str | None = None, in_cluster: bool | None = None
) -> tuple[str, int] | None:
    """The host and port of the API server ``load_client`` with these arguments talks to (None
    when its configuration cannot be read: ``load_client`` then says why)."""
    try:
        url = urlsplit(_configuration(kubeconfig, context, in_cluster).host)
        port = url.port or (443 if url.scheme == "https" else 80)
    except Exception:  # noqa: BLE001 - any unreadable configuration, any malformed address
        return None
    return (url.hostname, port) if url.hostname else None


class KubeClient:
    def __init__(self, api_client: k8s_client.ApiClient) -> None:
        self.api = api_client

    def _request(
        self,
        method: str,
        path: str,
        query: list[tuple[str, Any]] | None = None,
        body: Any = None,
        timeout: Any = None,
        content_type: str | None = None,
    ) -> Any:
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = content_type or "application/json"
        params = self.api.param_serialize(
            method=method,
            resource_path=path,
            query_params=query or [],
            header_params=headers,
            body=body,
            auth_settings=["BearerToken"],
        )
        return self.api.call_api(*params, _request_timeout=timeout)

    def request(
        self,
        method: str,
        path: str,
        query: list[tuple[str, Any]] | None = None,
        body: Any = None,
        content_type: str | None = None,
        timeout: float = 30,
    ) -> Any:
        """One request; the decoded JSON answer. HTTP errors raise ``ApiException``."""
        resp = self._request(method, path, query, body, timeout, content_type)
        data = resp.read()
        if not 200 <= resp.status <= 299:
            raise ApiException(status=resp.status, reason=resp.reason, body=data.decode(errors="replace"))
        return orjson.loads(data) if data else None

    def list(self, path: str, limit: int = 5000) -> tuple[list[dict[str, Any]], str]:
        """Every object at ``path`` (pages of ``limit``), and the list's resourceVersion."""
        items: list[dict[str, Any]] = []
        version = ""
        for page, page_version in self.pages(path, limit):
            items.extend(page)
            version = page_version
        return items, version

    def pages(self, path: str, limit: int = 500) -> Iterator[tuple[builtins.list[dict[str, Any]], str]]:
        """The list at ``path`` a page of ``limit`` objects at a time, each with the list's
        resourceVersion: a caller that lets each page go holds one page, not the whole list."""
        token = None
        while True:
            query: list[tuple[str, Any]] = [("limit", limit)]
            if token:
                query.append(("continue", token))
            try:
                page = self.request("GET", path, query, timeout=120)
            except ApiException as exc:
                if exc.status == 410:
                    raise Gone(str(exc)) from exc
                raise
            meta = page.get("metadata") or {}
            token = meta.get("continue")
            yield page.get("items") or [], str(meta.get("resourceVersion") or "")
            if not token:
                return

    def watch(
        self,
        path: str,
        resource_version: str,
        timeout_seconds: int = 300,
        holder: builtins.list[Any] | None = None,
        cancelled: Callable[[], bool] | None = None,
    ) -> Iterator[dict[str, Any]]:
        """Watch events at ``path`` from ``resource_version``, with bookmarks, as dicts
        (``type``, ``object``). ``holder`` receives the open response, so another thread can
        close it (after setting what ``cancelled`` reads: a watch cancelled while it connected
        ends as soon as it has its response). A 410 (at the start, or as an ERROR event) raises
        ``Gone``."""
        query = [
            ("watch", "true"),
            ("allowWatchBookmarks", "true"),
            ("resourceVersion", resource_version),
            ("timeoutSeconds", timeout_seconds),
        ]
        resp = self._request("GET", path, query, timeout=(10, timeout_seconds + 30))
        if holder is not None:
            holder[:] = [resp]
        try:
            if cancelled is not None and cancelled():
                return
            if resp.status == 410:
                raise Gone(resp.read().decode(errors="replace"))
            if not 200 <= resp.status <= 299:
                data = resp.read()
                raise ApiException(status=resp.status, reason=resp.reason, body=data.decode(errors="replace"))
            buffer = b""
            for chunk in resp.response.stream(amt=None, decode_content=True):
                buffer += chunk
                while True:
                    end = buffer.find(b"\n")
                    if end < 0:
                        break
                    line, buffer = buffer[:end], buffer[end + 1 :]
                    if not line.strip():
                        continue
                    event = orjson.loads(line)
                    if event.get("type") == "ERROR":
                        status = event.get("object") or {}
                        if status.get("code") == 410:
                            raise Gone(str(status.get("message") or "410 Gone"))
                        raise ApiException(status=status.get("code") or 500, reason=str(status.get("message")))
                    yield event
        finally:
            if holder is not None:
                holder[:] = []
            # A watch left unread cannot go back to the pool (the next request on its connection
            # would read the rest of the stream): close the connection, then free its slot.
            resp.response.close()
            resp.response.release_conn()


def object_path(prefix: str, plural: str, namespace: str | None, name: str | None = None) -> str:
    """``/api/v1`` + ``pods`` + namespace + name -> ``/api/v1/namespaces/ns/pods/name``."""
    path = prefix
    if namespace:
        path += f"/namespaces/{quote(namespace, safe='')}"
    path += f"/{plural}"
    if name:
        path += f"/{quote(name, safe='')}"
    return path
