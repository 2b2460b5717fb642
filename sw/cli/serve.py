"""``nicoll serve``: a cluster served to per-rank clients (:mod:`nicoll.remote`) until SIGINT or
SIGTERM."""

import signal
import sys
import threading

__all__ = ["serve_command"]


def serve_command(args):
    from .. import Cluster
    from ..remote import ClusterServer
    stop = threading.Event()
    with Cluster(args.nodes, args.backend, data_width=args.data_width,
                 mem_size=args.mem_size, progress=lambda text: print(text, file=sys.stderr,
                                                                     flush=True)) as cl:
        server = ClusterServer(cl, args.listen, token=args.token)
        # A clean stop on either signal: the handler only sets the flag; the server's
        # connections are ended below, in this thread.
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: stop.set())
        server.start()
        print(f"nicoll: serving {args.nodes} ranks ({args.backend}) at {server.address}",
              flush=True)
        try:
            while not stop.wait(0.5):
                pass
        finally:
            server.stop()
    print("nicoll: server stopped", flush=True)
    return 0
