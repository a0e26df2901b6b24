"""stoker.service: a dispatcher and workers started inside this Python process, for notebooks and
tests (the `stoker dispatcher` and `stoker worker` commands run the same code as processes).

    import stoker, stoker.service
    dispatcher = stoker.service.Dispatcher()                 # port 0: any free port
    workers = [stoker.service.Worker(dispatcher.address) for _ in range(2)]
    for batch in stoker.dataset("/data/shards/").batch(64).distribute(dispatcher.address):
        ...
    for w in workers: w.stop()
    dispatcher.stop()

Both serve on every interface of this host, without TLS or authentication (docs/protocol.md).
"""
from . import _stoker

__all__ = ["Dispatcher", "Worker"]


def _require_service():
    if not getattr(_stoker, "HAVE_SERVICE", False):
        raise NotImplementedError("this build of stoker has no service (src/stoker/service)")


class Dispatcher:
    """A dispatcher. work_dir keeps its journal (state survives a restart); None: no journal.
    client_timeout (s): a consumer silent this long is removed, and a job without a live consumer
    this long is ended."""

    def __init__(self, port=0, work_dir=None, worker_timeout=3.0, client_timeout=30.0):
        _require_service()
        self._server = _stoker.DispatcherServer(int(port), work_dir or "",
                                                int(worker_timeout * 1000),
                                                int(client_timeout * 1000))
        self.port = self._server.port
        self.address = f"127.0.0.1:{self.port}"

    def stop(self):
        self._server.stop()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()

    def __repr__(self):
        return f"stoker.service.Dispatcher(address={self.address!r})"


class Worker:
    """A worker of `dispatcher` ("host:port"). host: the name clients reach it at."""

    def __init__(self, dispatcher, port=0, host="127.0.0.1", threads=0, buffer_bytes=0,
                 heartbeat=0.5):
        _require_service()
        if isinstance(dispatcher, Dispatcher):
            dispatcher = dispatcher.address
        self._server = _stoker.WorkerServer(str(dispatcher), int(port), host, int(threads),
                                            int(buffer_bytes), int(heartbeat * 1000))
        self.address = self._server.address

    def stop(self, drain_timeout=0.0):
        """Stops serving. drain_timeout > 0 (s): first finish the splits it runs and let
        consumers take what it holds (a graceful scale-down)."""
        self._server.stop(float(drain_timeout))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()

    def __repr__(self):
        return f"stoker.service.Worker(address={self.address!r})"
