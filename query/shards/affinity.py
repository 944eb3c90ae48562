"""Serve's request router for the shard groups (query/shards/serve.py): every round of one
staged query to the same replica, the one holding the query's arrays. Its own module because
it subclasses Ray Serve's `RequestRouter`: importing it imports Ray."""

from __future__ import annotations

import hashlib

from ray.serve.request_router import RequestRouter

__all__ = ["SessionAffinity"]


class SessionAffinity(RequestRouter):
    """Every round of one query to the same replica of a group: the replicas ranked by a
    hash of (the request's session, the replica), the best first (rendezvous hashing: a
    replica that goes moves only its own sessions). A request without one: any replica."""

    async def choose_replicas(self, candidate_replicas, pending_request=None):
        key = ""
        if pending_request is not None and pending_request.args:
            first = pending_request.args[0]
            key = first if isinstance(first, str) else ""
        if not key:
            return [list(candidate_replicas)]

        def weight(replica) -> bytes:
            token = f"{key}/{replica.replica_id.unique_id}".encode()
            return hashlib.blake2b(token, digest_size=8).digest()

        ranked = sorted(candidate_replicas, key=weight, reverse=True)
        return [[r] for r in ranked]
