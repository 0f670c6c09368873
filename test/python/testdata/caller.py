"""A Toolbus caller written from docs/protocol.md, standard library only: plain NATS requests in JSON.

Each command checks what it names and exits non-zero, saying what differed, when a check fails:

  basic                   the worker's tools are available; a call with wait, a routed call and a refusal
  cancel-running          a slow call followed through calls.events and cancelled once it reports progress
  full-result TOOL ARGS   a call whose result is cut to the tool's max_result_size, with wait, then its whole
                          result read a page at a time through calls.full_result; prints "CALL <call_id>",
                          "PAGES <n>" and "WHOLE <size> <digest>"
  submit TOOL ARGS        submits a call and prints "CALL <call_id>" (and "APPROVAL <approval_id>" when held)
  cancel CALL_ID          cancels a call and prints "OUTCOME <outcome>"
  result CALL_ID          waits for the call's result and prints it as "RESULT <json>"
  started CALL_ID         follows the call's events until its started event and prints "STARTED <event json>"
  approve APPROVAL_ID     approves a pending approval (as an operator) and prints "STATE <approval state>"
"""
import argparse
import base64
import hashlib
import json
import sys
import threading
import time

import msgpack_mini as mp
from natsmini import add_connection_args, connect, nuid

JSON = {"Content-Type": "application/json", "Toolbus-Version": "3"}


class Refused(Exception):
    def __init__(self, err):
        super().__init__("%s: %s" % (err.get("code"), err.get("message")))
        self.code = err.get("code")


def fail(*what):
    print("FAIL", *what, flush=True)
    sys.exit(1)


def check(cond, *what):
    if not cond:
        fail(*what)


class Caller:
    def __init__(self, args):
        self.nc = connect(args, "python-caller")
        self.agent, self.route, self.ns = args.agent, args.route, args.namespace
        self.routed = {}
        self.cv = threading.Condition()
        if self.route:
            self.nc.subscribe("toolbus.results.%s.>" % self.route, cb=self.on_routed)
            self.nc.flush()

    def api(self, endpoint, body, timeout=30.0):
        headers = dict(JSON, **{"Toolbus-Reply-Token": nuid(24)})
        m = self.nc.request("toolbus.api." + endpoint, json.dumps(body).encode(), headers=headers, timeout=timeout)
        check(m.status != "503", "no coordinator answers", endpoint)
        if m.header("Nats-Service-Error-Code"):
            raise Refused(json.loads(m.data))
        return json.loads(m.data)

    def on_routed(self, m):
        tokens = m.subject.split(".")  # toolbus.results.<route>.<rest of call_id>.<namespace>
        if tokens[-1] != self.ns:
            return  # written by another namespace: not the call's
        with self.cv:
            self.routed[self.route + tokens[3]] = mp.unpackb(m.data)
            self.cv.notify_all()

    def routed_result(self, call_id, timeout=60.0):
        end = time.time() + timeout
        with self.cv:
            while call_id not in self.routed:
                left = end - time.time()
                check(left > 0, "no routed result for", call_id)
                self.cv.wait(left)
            return self.routed[call_id]["result"]

    def submit(self, tool, arguments, **more):
        body = {"tool": tool, "arguments": arguments}
        if self.agent:
            body["agent"] = self.agent
        body.update(more)
        return self.api("calls.submit", body)

    def result(self, call_id):
        while True:
            info = self.api("calls.get", {"call_id": call_id, "wait_ms": 20000})
            if info.get("result"):
                return info["result"]


def basic(c):
    tools = {t["name"]: t for t in c.api("tools.list", {"agent": c.agent, "namespace": c.ns})["tools"]}
    for name in (c.ns + "-upper", c.ns + "-slow"):
        check(name in tools, "tools.list lacks", name, sorted(tools))
        check(tools[name].get("available"), name, "is not available:", tools[name])
    reply = c.submit(c.ns + "-upper", {"text": "hello from python"}, wait=True)
    res = reply.get("result") or {}
    check(res.get("status") == "completed", "a call with wait:", reply)
    check(res["content"] == [{"type": "text", "text": "HELLO FROM PYTHON"}], "the tool's output:", res["content"])
    check(res.get("worker", "").startswith("py-"), "not run by the Python worker:", res)
    call_id = c.route + nuid(22)
    c.submit(c.ns + "-upper", {"text": "routed"}, route=c.route, call_id=call_id)
    routed = c.routed_result(call_id)
    check(routed["content"][0]["text"] == "ROUTED", "the routed result:", routed)
    try:
        c.submit(c.ns + "-upper", {"text": 5})
        fail("arguments against the tool's schema were accepted")
    except Refused as e:
        check(e.code == "invalid_arguments", "refusal of invalid arguments:", e)
    print("OK basic", flush=True)


def cancel_running(c):
    call_id = c.submit(c.ns + "-slow", {"seconds": 20})["call_id"]
    after, kinds = 0, []
    while "progress" not in kinds:
        reply = c.api("calls.events", {"call_id": call_id, "after": after, "wait_ms": 10000})
        kinds += [e["kind"] for e in reply.get("events", [])]
        after = reply.get("last", after)
        check(not reply.get("finished"), "the call ended before it was cancelled:", kinds)
    cancel = c.api("calls.cancel", {"call_id": call_id, "reason": "enough"})
    check(cancel["outcome"] == "cancelling", "a running call's cancel:", cancel)
    res = c.result(call_id)
    check(res["status"] == "cancelled" and res["error"]["code"] == "cancelled", "the cancelled call's result:", res)
    check(res.get("worker", "").startswith("py-") and res.get("started_at"), "not the running worker's result:", res)
    check(c.api("calls.get", {"call_id": call_id})["state"] == "cancelled", "calls.get of the cancelled call")
    print("OK cancel-running", kinds, flush=True)


def content_size(res):
    """The size of a result's content, as max_result_size bounds it: the bytes of its blocks' text, json and
    data, and of its structured content."""
    n = 0
    for b in res.get("content") or []:
        n += len(b.get("text", "").encode()) + len(base64.b64decode(b.get("data", "")))
        n += len(json.dumps(b["json"]).encode()) if "json" in b else 0
    if res.get("structured_content") is not None:
        n += len(json.dumps(res["structured_content"]).encode())
    return n


def full_result(c, tool, arguments):
    tools = {t["name"]: t for t in c.api("tools.list", {"agent": c.agent, "namespace": c.ns})["tools"]}
    limit = tools[tool]["metadata"]["max_result_size"]
    reply = c.submit(tool, arguments, wait=True)
    call_id, res = reply["call_id"], reply.get("result") or {}
    print("CALL", call_id, flush=True)
    # The result the caller gets is the cut one, naming where the whole is.
    summary = dict({k: v for k, v in res.items() if k != "content"}, content_size=content_size(res))
    check(res.get("status") == "completed" and not res.get("is_error"), "the call's result:", summary)
    check(res.get("truncated") is True, "the result is not marked truncated:", summary)
    ref = res.get("full_result") or {}
    check(ref.get("bucket") == "toolbus_results_" + c.ns and ref.get("name") == call_id, "full_result:", ref)
    check(0 < content_size(res) <= limit, "the cut content's size", content_size(res), "is not within", limit)
    # The whole, a page at a time: the call ID alone, then each reply's next_cursor until none.
    whole, cursor, pages = b"", None, 0
    while True:
        body = {"call_id": call_id}
        if cursor:
            body["cursor"] = cursor
        page = c.api("calls.full_result", body)
        check(page["call_id"] == call_id and page.get("offset", 0) == len(whole), "page", pages + 1, "at offset",
              page.get("offset"), "after", len(whole), "bytes")
        whole += base64.b64decode(page["data"])
        pages += 1
        cursor = page.get("next_cursor")
        if not cursor:
            break
    digest = "SHA-256=" + base64.urlsafe_b64encode(hashlib.sha256(whole).digest()).decode()
    check(len(whole) == page["size"] == ref["size"], "the whole's size:", len(whole), page["size"], ref["size"])
    check(digest == page["digest"], "the whole's digest:", digest, page["digest"])
    full = json.loads(whole)
    check(full.get("call_id") == call_id and full.get("status") == "completed" and not full.get("truncated"),
          "the whole result:", {k: v for k, v in full.items() if k != "content"})
    want = [{"type": "text", "text": arguments["text"] * arguments["times"]}]
    check(full.get("content") == want, "the whole result's content is not the tool's output")
    print("PAGES", pages, flush=True)
    print("WHOLE", len(whole), digest, flush=True)
    print("OK full-result", flush=True)


def started(c, call_id):
    after = 0
    while True:
        reply = c.api("calls.events", {"call_id": call_id, "after": after, "wait_ms": 10000})
        for e in reply.get("events", []):
            if e["kind"] == "started":
                print("STARTED", json.dumps(e), flush=True)
                return
        check(not reply.get("finished"), "the call ended without a started event")
        after = reply.get("last", after)


def main():
    p = argparse.ArgumentParser()
    add_connection_args(p)
    p.add_argument("--agent", default="")
    p.add_argument("--route")
    p.add_argument("--namespace", default="demo")
    p.add_argument("command")
    p.add_argument("rest", nargs="*")
    args = p.parse_args()
    c = Caller(args)
    if args.command == "basic":
        basic(c)
    elif args.command == "cancel-running":
        cancel_running(c)
    elif args.command == "full-result":
        full_result(c, args.rest[0], json.loads(args.rest[1]))
    elif args.command == "started":
        started(c, args.rest[0])
    elif args.command == "submit":
        reply = c.submit(args.rest[0], json.loads(args.rest[1]))
        print("CALL", reply["call_id"], flush=True)
        if reply.get("approval"):
            print("APPROVAL", reply["approval"]["approval_id"], flush=True)
    elif args.command == "cancel":
        print("OUTCOME", c.api("calls.cancel", {"call_id": args.rest[0], "reason": "not wanted"})["outcome"], flush=True)
    elif args.command == "approve":
        reply = c.api("approvals.decide", {"approval_id": args.rest[0], "decision": "approve", "by": "python-operator"})
        print("STATE", reply["approval"]["state"], flush=True)
    elif args.command == "result":
        print("RESULT", json.dumps(mp.to_jsonable(c.result(args.rest[0]))), flush=True)
    else:
        fail("unknown command", args.command)


if __name__ == "__main__":
    main()
