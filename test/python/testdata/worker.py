"""A Toolbus worker written from docs/protocol.md ("A worker in another language"), standard library only.

It serves one namespace with four tools:
  <ns>-upper   upper-cases a text, reporting progress;
  <ns>-slow    sleeps for `seconds`, reporting progress, renewing its lease and stopping on a cancel notice
               or when the call's deadline passes;
  <ns>-once    the same, delivered at most once: its start is stored before it runs, and never run again;
  <ns>-repeat  returns `text` repeated `times` times; its max_result_size is MAX_RESULT_SIZE, so a longer
               output is cut, the whole result stored in the namespace's results object store.

Every time a tool starts it prints "RAN <call_id> attempt=<n> worker=<id>"; every call it settles without
running prints "SKIP <call_id> <why>". It prints "READY <worker_id>" once it pulls. SIGTERM or SIGINT stops it
(its heartbeat deleted); SIGKILL is a crash.

    python3 worker.py --url nats://127.0.0.1:4222 --user worker_demo --password ... --namespace demo
"""
import argparse
import json
import signal
import sys
import threading
import time

import msgpack_mini as mp
import objstore_mini
from natsmini import add_connection_args, connect, nuid

VERSION = {"Toolbus-Version": "3"}

# The max_result_size of <ns>-repeat, in bytes of content.
MAX_RESULT_SIZE = 4096


def say(*parts):
    print(*parts, flush=True)


def tool_definitions(ns):
    def define(method, description, schema, delivery="at_least_once", **metadata):
        return {"name": ns + "-" + method, "namespace": ns, "method": method,
                "description": description, "input_schema": schema,
                "metadata": {"tags": ["read_only"], **metadata}, "source": {"kind": "go"}, "delivery": delivery}
    seconds = {"type": "object", "properties": {"seconds": {"type": "number", "minimum": 0, "maximum": 120}},
               "required": ["seconds"], "additionalProperties": False}
    return {
        "upper": define("upper", "Upper-cases a text.", {
            "type": "object", "properties": {"text": {"type": "string"}},
            "required": ["text"], "additionalProperties": False}),
        "slow": define("slow", "Sleeps for the given seconds, reporting progress; stops when cancelled.", seconds),
        "once": define("once", "Sleeps for the given seconds; never run twice.", seconds, "at_most_once"),
        "repeat": define("repeat", "Repeats a text the given number of times.", {
            "type": "object", "properties": {"text": {"type": "string"}, "times": {"type": "integer", "minimum": 1, "maximum": 100000}},
            "required": ["text", "times"], "additionalProperties": False}, max_result_size=MAX_RESULT_SIZE),
    }


def seconds_of(ts):
    return ts.seconds + ts.nanos / 1e9


def past(deadline):
    return deadline is not None and time.time() >= seconds_of(deadline)


OUTCOME_UNKNOWN = "the tool may or may not have run: its worker stopped before reporting"
EXHAUSTED = "the call was delivered %d times and no attempt finished: the workers that took it stopped, lost their lease, or do not serve the tool"


# --- large results: the content's size, and how a result is cut to the tool's max_result_size
def block_size(b):
    n = len(b.get("text", "").encode()) + len(b.get("data", b""))
    return n + (len(json.dumps(b["json"]).encode()) if "json" in b else 0)


def content_size(result):
    n = sum(block_size(b) for b in result.get("content") or [])
    if result.get("structured_content") is not None:
        n += len(json.dumps(result["structured_content"]).encode())
    return n


def clip(b, n):
    """The longest prefix of the UTF-8 bytes b of at most n bytes that ends on a character boundary."""
    return b[:n].decode("utf-8", "ignore")


def cut_middle(text, limit, where):
    """Keeps the head and the tail of text around a marker saying how much is missing: at most limit bytes."""
    b = text.encode()
    marker = lambda n: "\n…[%d bytes cut%s]…\n" % (n, where)
    keep = limit - len(marker(len(b)).encode())
    if keep <= 0:
        return clip(marker(len(b)).encode(), limit)
    head = clip(b, keep * 6 // 10)
    tail = b[len(b) - (keep - len(head.encode())):].decode("utf-8", "ignore")
    return head + marker(len(b) - len(head.encode()) - len(tail.encode())) + tail


def cut(result, limit, ref):
    """The result with its content cut to limit bytes, marked truncated, naming ref (where the whole is) if set."""
    where = "; the whole result is object %s in bucket %s" % (ref["name"], ref["bucket"]) if ref else ""
    result = dict(result)
    budget = limit
    if result.get("structured_content") is not None and len(json.dumps(result["structured_content"]).encode()) > budget // 2:
        del result["structured_content"]
    if result.get("structured_content") is not None:
        budget -= len(json.dumps(result["structured_content"]).encode())
    blocks = list(result["content"])
    for i, b in enumerate(blocks):
        share = budget // (len(blocks) - i)
        if block_size(b) > share:
            if "text" in b or "json" in b:
                text = b["text"] if "text" in b else json.dumps(b["json"])
                blocks[i] = {"type": "text", "text": cut_middle(text, share, where)}
            else:
                note = "[%s of %d bytes left out: too large%s]" % (b["type"], block_size(b), where)
                blocks[i] = {"type": "text", "text": clip(note.encode(), share)}
        budget -= block_size(blocks[i])
    result["content"] = blocks
    result["truncated"] = True
    if ref:
        result["full_result"] = ref
    return result


class Delivery:
    """One delivered call: its message and what its subject and acknowledgement subject say."""

    def __init__(self, msg, ns):
        self.msg = msg
        acks = msg.reply.split(".")
        # $JS.ACK.<stream>.<consumer>.<delivered>.… (9 tokens), or with a domain and an account hash (11+).
        self.attempt = int(acks[4]) if len(acks) == 9 else int(acks[6])
        tokens = msg.subject.split(".")  # toolbus.events.<bucket>.<call_id>.queued.<turn or ~>.<ns>
        self.bucket, self.call_id = tokens[2], tokens[3]
        self.prefix = tokens[0]
        self.ns = ns
        self.request = None

    def subject(self, kind):
        return "%s.events.%s.%s.%s.%s" % (self.prefix, self.bucket, self.call_id, kind, self.ns)


class Worker:
    def __init__(self, args):
        self.args = args
        self.ns = args.namespace
        self.prefix = args.prefix
        self.nc = connect(args, "python-worker")
        self.id = args.worker_id or "py-" + nuid(10)
        self.tools = tool_definitions(self.ns)
        self.notices = {}  # call ID -> the cancel of its notice
        self.lock = threading.Lock()
        self.busy = 0
        self.stopping = threading.Event()

    # --- the catalog: KV puts and deletes are JetStream publishes to $KV.<bucket>.<key>
    def kv(self, key, value=None, delete=False):
        subject = "$KV.%s_catalog.%s" % (self.prefix, key)
        if delete:
            ack = self.nc.request(subject, b"", headers={"KV-Operation": "DEL"}, timeout=5)
        else:
            ack = self.nc.request(subject, json.dumps(value).encode(), timeout=5)
        reply = json.loads(ack.data or b"{}")
        if ack.status or "error" in reply:
            raise RuntimeError("catalog write %s: %s %s" % (key, ack.status, reply))

    def heartbeat(self):
        with self.lock:
            busy = self.busy
        self.kv("workers.%s.%s" % (self.ns, self.id), {
            "worker_id": self.id, "namespace": self.ns, "slots": self.args.slots, "busy": busy,
            "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "interval_ms": self.args.heartbeat_ms})

    def heartbeats(self):
        while not self.stopping.wait(self.args.heartbeat_ms / 1000):
            try:
                self.heartbeat()
            except Exception as e:
                say("heartbeat failed:", e)

    def on_notice(self, m):
        call_id = m.subject.rsplit(".", 1)[1]
        cancel = mp.unpackb(m.data) if m.data else {}
        with self.lock:
            self.notices[call_id] = cancel

    def notice(self, call_id):
        with self.lock:
            return self.notices.get(call_id)

    def start(self):
        # 1. Notices first, so that none sent from now on is missed.
        self.nc.subscribe("%s.cancel.%s.*" % (self.prefix, self.ns), cb=self.on_notice)
        self.nc.flush()
        # 2, 3. Tools and a heartbeat.
        for method, definition in self.tools.items():
            self.kv("tools.%s.%s" % (self.ns, method), definition)
        self.heartbeat()
        threading.Thread(target=self.heartbeats, daemon=True).start()
        # 4. The namespace's consumer.
        body = {"max_concurrency": 64, "ack_wait_ms": self.args.ack_wait_ms,
                "max_attempts": self.args.max_attempts, "worker_id": self.id}
        m = self.nc.request("%s.consumers.%s" % (self.prefix, self.ns), json.dumps(body).encode(),
                            headers={"Content-Type": "application/json", **VERSION}, timeout=10)
        if m.status == "503":
            raise RuntimeError("no coordinator answers %s.consumers.%s" % (self.prefix, self.ns))
        if m.header("Nats-Service-Error-Code"):
            raise RuntimeError("consumer refused: %s" % m.data.decode())
        self.consumer = json.loads(m.data)["consumer"]
        say("READY", self.id, self.consumer)

    # --- 5. pulling
    def free(self):
        with self.lock:
            return self.args.slots - self.busy

    def run(self):
        pull = "$JS.API.CONSUMER.MSG.NEXT.%s_EVENTS.%s" % (self.prefix.upper(), self.consumer)
        while not self.stopping.is_set():
            n = self.free()
            if n <= 0:
                time.sleep(0.01)
                continue
            body = json.dumps({"batch": n, "expires": 2_000_000_000, "idle_heartbeat": 1_000_000_000}).encode()
            got = 0
            for m in self.nc.request_many(pull, body, timeout=4, until=lambda m: m.status not in (None, "100")):
                if m.status == "100":
                    continue
                if m.status:
                    if m.status not in ("404", "408"):
                        time.sleep(0.2)  # 409, 503, or a request the server refused (400): ask again after a pause
                    break
                with self.lock:
                    self.busy += 1
                threading.Thread(target=self.handle, args=(m,), daemon=True).start()
                got += 1
                if got == n:
                    break

    # --- 6, 7. one delivered call
    def handle(self, msg):
        try:
            self.settle(Delivery(msg, self.ns))
        except Exception as e:
            say("ERROR handling", msg.subject, repr(e))
        finally:
            with self.lock:
                self.busy -= 1

    def last(self, d, kind):
        m = self.nc.request("$JS.API.DIRECT.GET.%s_EVENTS.%s" % (self.prefix.upper(), d.subject(kind)), b"", timeout=5)
        if m.status == "404":
            return None
        if m.status:
            raise RuntimeError("direct get %s: %s %s" % (kind, m.status, m.description))
        return mp.unpackb(m.data)

    def settle(self, d):
        msg = d.msg
        if msg.header("Toolbus-Awaiting") == "approval":
            self.nc.publish(msg.reply, b"+ACK")
            say("SKIP", d.call_id, "awaiting approval")
            return
        d.request = mp.unpackb(msg.data)["request"]
        at_most_once = self.tools.get(d.request["method"], {}).get("delivery") == "at_most_once"
        if d.attempt > self.args.max_attempts:
            # The extra delivery, past the namespace's attempts: it records the failure if an attempt started.
            started = self.last(d, "started")
            if started is not None and self.last(d, "result") is None:
                if at_most_once:
                    self.outcome_unknown(d, started)
                else:
                    self.finish(d, None, "failed", ("max_attempts", EXHAUSTED % (d.attempt - 1)), attempt=d.attempt - 1)
                say("SKIP", d.call_id, "attempts exhausted")
                return
        cancel = self.notice(d.call_id)
        if cancel is not None:
            self.finish(d, None, "cancelled", ("cancelled", cancel.get("reason") or "cancelled by request"))
            say("SKIP", d.call_id, "cancel notice")
            return
        if self.last(d, "result") is not None:
            self.nc.publish(msg.reply, b"+ACK")
            say("SKIP", d.call_id, "has a result")
            return
        if d.attempt > 1 and at_most_once:
            started = self.last(d, "started")
            if started is not None:
                self.outcome_unknown(d, started)
                say("SKIP", d.call_id, "an earlier attempt started it")
                return
        if d.attempt > 1:
            ev = self.last(d, "cancel")
            if ev is not None:
                self.finish(d, None, "cancelled", ("cancelled", ev["cancel"].get("reason") or "cancelled by request"))
                say("SKIP", d.call_id, "cancelled before this attempt")
                return
        if past(d.request.get("deadline")):
            self.finish(d, None, "timed_out", ("timed_out", "the call's deadline passed before a worker could start it"))
            say("SKIP", d.call_id, "deadline passed")
            return
        method = d.request["method"]
        if method not in self.tools:
            self.nc.publish(msg.reply, b"-NAK")
            say("SKIP", d.call_id, "tool not served")
            return
        self.run_tool(d, method)

    # --- 8. running, with events
    def event(self, d, kind, body, headers=None, wait=False):
        ev = {"call_id": d.call_id, "kind": kind, "time": mp.Timestamp.now(), "attempt": d.attempt, "worker": self.id}
        ev.update(body)
        h = dict(VERSION)
        h.update(headers or {})
        if not wait:
            self.nc.publish(d.subject(kind), mp.packb(ev), headers=h)
            return None
        m = self.nc.request(d.subject(kind), mp.packb(ev), headers=h, timeout=5)
        return json.loads(m.data or b"{}"), m.status

    def run_tool(self, d, method):
        started = mp.Timestamp.now()
        if self.tools[method]["delivery"] == "at_most_once":
            # The start is stored, and acknowledged, before the tool runs, and only if no attempt started it.
            ack, status = self.event(d, "started", {}, {"Nats-Expected-Last-Subject-Sequence": "0",
                                                        "Nats-Msg-Id": "%s.started.%d" % (d.call_id, d.attempt)}, wait=True)
            if status or "error" in ack:
                if ack.get("error", {}).get("err_code") == 10071:
                    self.outcome_unknown(d, self.last(d, "started"))
                    say("SKIP", d.call_id, "another attempt started it")
                else:
                    self.nc.publish(d.msg.reply, b"-NAK")
                    say("SKIP", d.call_id, "start not stored", status, ack)
                return
        else:
            self.event(d, "started", {}, {"Nats-Expected-Last-Subject-Sequence": "0",
                                          "Nats-Expected-Last-Subject-Sequence-Subject": d.subject("result")})
        say("RAN", d.call_id, "attempt=%d" % d.attempt, "worker=%s" % self.id)
        args = d.request.get("arguments") or {}
        if method == "upper":
            self.event(d, "progress", {"progress": {"progress": 1, "total": 2, "message": "upper-casing"}})
            text = args["text"].upper()
            self.finish(d, started, "completed", None, content=[{"type": "text", "text": text}])
            return
        if method == "repeat":
            self.finish(d, started, "completed", None, content=[{"type": "text", "text": args["text"] * args["times"]}])
            return
        seconds = float(args["seconds"])
        renew = self.args.ack_wait_ms / 3000
        began = last_renewal = time.time()
        step = 0
        while time.time() - began < seconds:
            cancel = self.notice(d.call_id)
            if cancel is not None:
                self.finish(d, started, "cancelled", ("cancelled", "call cancelled: " + (cancel.get("reason") or "cancelled by request")))
                return
            if past(d.request.get("deadline")):
                self.finish(d, started, "timed_out", ("timed_out", "the call's deadline passed while the tool ran"))
                return
            time.sleep(0.05)
            if time.time() - last_renewal >= renew:
                self.nc.publish(d.msg.reply, b"+WPI")
                last_renewal = time.time()
            if time.time() - began >= (step + 1) * 0.25:
                step += 1
                self.event(d, "progress", {"progress": {"progress": min(step * 0.25, seconds), "total": seconds,
                                                        "message": "slept %.2fs" % (step * 0.25)}})
        self.finish(d, started, "completed", None, content=[{"type": "text", "text": "slept %gs" % seconds}])

    def outcome_unknown(self, d, started):
        """Ends an at-most-once call that an attempt started and did not finish: the result names that
        attempt (its number and start), and the tool is not run again."""
        text = OUTCOME_UNKNOWN
        at, attempt = None, None
        if started is not None:
            text += " (attempt %d, on worker %s)" % (started["attempt"], started["worker"])
            at, attempt = started["time"], started["attempt"]
        self.finish(d, at, "failed", ("outcome_unknown", text + "; an at-most-once tool is not run again"), attempt=attempt)

    # --- 9, 10. the result, then the acknowledgement
    def finish(self, d, started, status, error, content=None, attempt=None):
        result = {"call_id": d.call_id, "tool": d.request["tool"], "status": status, "is_error": error is not None,
                  "attempt": d.attempt if attempt is None else attempt, "worker": self.id,
                  "queued_at": d.request.get("queued_at"), "finished_at": mp.Timestamp.now()}
        if started is not None:
            result["started_at"] = started
        if error is not None:
            code, text = error
            result["content"] = [{"type": "text", "text": text}]
            result["error"] = {"code": code, "message": text}
        else:
            result["content"] = content
            limit = self.tools[d.request["method"]]["metadata"].get("max_result_size")
            if limit and content_size(result) > limit:
                result = cut(result, limit, self.store_whole(d, result))
        headers = {"Nats-Expected-Last-Subject-Sequence": "0"}
        if status == "cancelled":
            headers["Nats-Msg-Id"] = d.call_id + ".cancelled"
        body = {"result": result}
        if attempt is not None:
            body["attempt"] = attempt
        for _ in range(50):
            try:
                ack, status_line = self.event(d, "result", body, headers, wait=True)
            except TimeoutError:
                self.nc.publish(d.msg.reply, b"+WPI")
                continue
            err = ack.get("error", {}).get("err_code")
            if not status_line and "error" not in ack:
                # Ours, or a duplicate: another's (a cancelled result of the same ID) stands.
                self.nc.publish(d.msg.reply, b"+TERM" if ack.get("duplicate") else b"+ACK")
                return
            if err in (10071, 10158):
                self.nc.publish(d.msg.reply, b"+TERM")  # another result stands
                return
            self.nc.publish(d.msg.reply, b"+WPI")
            time.sleep(0.1)
        say("ERROR result of", d.call_id, "not stored; handing the call back")
        self.nc.publish(d.msg.reply, b"-NAK")

    def store_whole(self, d, result):
        """Stores the whole result, its JSON encoding, in the namespace's results store under the call ID, and
        returns the result's full_result; None if it could not be stored (the result is then cut without a copy)."""
        bucket = "%s_results_%s" % (self.prefix, self.ns)
        whole = json.dumps(mp.to_jsonable(result)).encode()
        try:
            info = objstore_mini.put(self.nc, bucket, d.call_id, whole)
        except Exception as e:
            say("whole result of", d.call_id, "not stored; cut without a copy:", e)
            return None
        say("STORED", d.call_id, "bytes=%d" % info["size"], "chunks=%d" % info["chunks"])
        return {"bucket": bucket, "name": d.call_id, "size": info["size"]}

    # --- 11. stopping
    def stop(self):
        self.stopping.set()
        self.kv("workers.%s.%s" % (self.ns, self.id), delete=True)
        say("STOPPED", self.id)


def main():
    p = argparse.ArgumentParser()
    add_connection_args(p)
    p.add_argument("--prefix", default="toolbus")
    p.add_argument("--namespace", default="demo")
    p.add_argument("--worker-id")
    p.add_argument("--slots", type=int, default=4)
    p.add_argument("--ack-wait-ms", type=int, default=30000)
    p.add_argument("--max-attempts", type=int, default=3)
    p.add_argument("--heartbeat-ms", type=int, default=1000)
    args = p.parse_args()
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    w = Worker(args)
    w.start()
    threading.Thread(target=w.run, daemon=True).start()
    while not stop.wait(0.2):
        pass
    w.stop()
    sys.exit(0)


if __name__ == "__main__":
    main()
