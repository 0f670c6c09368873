"""Storing an object in a NATS JetStream object store, standard library only: what a worker needs to keep
a whole result in its namespace's results store (the object store protocol of NATS, ADR-20).

An object store <bucket> is the stream OBJ_<bucket>. An object is its chunks, each a JetStream publish to
$O.<bucket>.C.<nuid>, a subject of its own for each time the object is stored, followed by its
description, a JSON ObjectInfo published to $O.<bucket>.M.<its name in URL-safe base64, padded> with the
header Nats-Rollup: sub, which replaces the description stored before. A reader trusts the description
only: size, chunks, nuid and digest (SHA-256= and the SHA-256 of the whole in URL-safe base64).
"""
import base64
import hashlib
import json
import time

from natsmini import nuid

CHUNK = 128 * 1024  # the chunk size of NATS clients, and of the Go worker


def publish(nc, subject, data, headers=None, timeout=5.0):
    """A JetStream publish that waits for the stream's acknowledgement; raises if it is not one."""
    ack = nc.request(subject, data, headers=headers, timeout=timeout)
    if ack.status:
        raise RuntimeError("publish to %s: status %s %s" % (subject, ack.status, ack.description or ""))
    reply = json.loads(ack.data or b"{}")
    if "error" in reply or "seq" not in reply:
        raise RuntimeError("publish to %s: %s" % (subject, reply))
    return reply


def digest(data):
    return "SHA-256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).decode()


def put(nc, bucket, name, data):
    """Stores data as object name of bucket and returns its description (an ObjectInfo). The chunks of an
    object stored before under the same name are left to the store's TTL: removing them is a purge of the
    stream, which a worker user of the deploy configurations may not send."""
    object_nuid = nuid(22)
    chunks = 0
    for i in range(0, len(data), CHUNK):
        publish(nc, "$O.%s.C.%s" % (bucket, object_nuid), data[i:i + CHUNK])
        chunks += 1
    info = {"name": name, "bucket": bucket, "nuid": object_nuid, "size": len(data), "chunks": chunks,
            "digest": digest(data), "options": {"max_chunk_size": CHUNK},
            "mtime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    meta = "$O.%s.M.%s" % (bucket, base64.urlsafe_b64encode(name.encode()).decode())
    publish(nc, meta, json.dumps(info).encode(), headers={"Nats-Rollup": "sub"})
    return info
