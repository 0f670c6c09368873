"""A minimal NATS client over a TCP socket, standard library only.

CONNECT (headers:true), PUB/HPUB, SUB/UNSUB, INFO/MSG/HMSG/PING/PONG/+OK/-ERR, and request/reply over
an inbox (one wildcard subscription, one unguessable token per request).
"""
import json
import queue
import secrets
import socket
import string
import threading
import time
import urllib.parse

_ALPHA = string.ascii_letters + string.digits


def nuid(n=22):
    return "".join(secrets.choice(_ALPHA) for _ in range(n))


class Msg:
    def __init__(self, subject, sid, reply, headers, data, status=None, description=None):
        self.subject = subject
        self.sid = sid
        self.reply = reply
        self.headers = headers or {}
        self.data = data
        self.status = status          # e.g. "503" from a "NATS/1.0 503" status line
        self.description = description

    def header(self, name, default=None):
        v = self.headers.get(name)
        return v[0] if v else default

    def __repr__(self):
        return "Msg(%s, status=%s, headers=%s, %d bytes)" % (self.subject, self.status, self.headers, len(self.data))


def encode_headers(headers):
    out = "NATS/1.0\r\n"
    for k, v in (headers or {}).items():
        vals = v if isinstance(v, (list, tuple)) else [v]
        for x in vals:
            out += "%s: %s\r\n" % (k, x)
    out += "\r\n"
    return out.encode()


def parse_headers(raw):
    text = raw.decode("utf-8", "replace")
    lines = text.split("\r\n")
    first = lines[0]
    status = description = None
    rest = first[len("NATS/1.0"):].strip()
    if rest:
        parts = rest.split(" ", 1)
        status = parts[0]
        description = parts[1] if len(parts) > 1 else None
    headers = {}
    for line in lines[1:]:
        if not line:
            continue
        k, _, v = line.partition(":")
        headers.setdefault(k.strip(), []).append(v.strip())
    return headers, status, description


class NatsError(Exception):
    pass


class Subscription:
    def __init__(self, nc, sid, subject, cb=None):
        self.nc, self.sid, self.subject, self.cb = nc, sid, subject, cb
        self.q = queue.Queue()

    def next(self, timeout=5.0):
        try:
            return self.q.get(timeout=timeout)
        except queue.Empty:
            raise TimeoutError("no message on %s within %.1fs" % (self.subject, timeout))

    def unsubscribe(self):
        self.nc.unsubscribe(self)


def add_connection_args(parser):
    """The flags of a connection: server URL, user, password and inbox prefix."""
    parser.add_argument("--url", required=True)
    parser.add_argument("--user")
    parser.add_argument("--password")
    parser.add_argument("--inbox-prefix", default="_INBOX")


def connect(args, name):
    """A client connected as add_connection_args's flags say."""
    return Client(args.url, name=name, inbox_prefix=args.inbox_prefix, user=args.user, password=args.password)


class Client:
    def __init__(self, url="nats://127.0.0.1:4222", name="pyclient", inbox_prefix="_INBOX", verbose=False,
                 user=None, password=None):
        u = urllib.parse.urlparse(url)
        self.sock = socket.create_connection((u.hostname, u.port or 4222), timeout=10)
        self.sock.settimeout(None)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.wlock = threading.Lock()
        self.subs = {}
        self.next_sid = 1
        self.errors = []
        self.pongs = queue.Queue()
        self.closed = False
        self.verbose = verbose
        self.buf = b""
        line = self._readline()
        if not line.startswith(b"INFO "):
            raise NatsError("expected INFO, got %r" % line)
        self.info = json.loads(line[5:])
        options = {"verbose": False, "pedantic": False, "headers": True, "no_responders": True,
                   "lang": "python-mini", "version": "0.1", "protocol": 1, "name": name}
        user, password = user or u.username, password or u.password
        if user:
            options["user"], options["pass"] = user, password
        self._write(b"CONNECT " + json.dumps(options).encode() + b"\r\nPING\r\n")
        # The first PONG confirms CONNECT was accepted (an -ERR would come first).
        while True:
            line = self._readline()
            if line == b"PONG":
                break
            if line.startswith(b"-ERR"):
                raise NatsError(line.decode())
            if line == b"PING":
                self._write(b"PONG\r\n")
        self.inbox_prefix = inbox_prefix + "." + nuid()
        self.resp_map = {}
        self.resp_lock = threading.Lock()
        self.resp_sub = self.subscribe(self.inbox_prefix + ".*", cb=self._on_response)
        self.reader = threading.Thread(target=self._read_loop, daemon=True)
        self.reader.start()
        self.flush()

    # --- low level I/O
    def _fill(self):
        chunk = self.sock.recv(65536)
        if not chunk:
            raise ConnectionError("connection closed by server")
        self.buf += chunk

    def _readline(self):
        while b"\r\n" not in self.buf:
            self._fill()
        line, _, self.buf = self.buf.partition(b"\r\n")
        return line

    def _readn(self, n):
        while len(self.buf) < n + 2:
            self._fill()
        data, self.buf = self.buf[:n], self.buf[n + 2:]
        return data

    def _write(self, b):
        with self.wlock:
            self.sock.sendall(b)

    def _read_loop(self):
        try:
            while not self.closed:
                line = self._readline()
                if self.verbose:
                    print("<<", line[:200])
                if line.startswith(b"MSG "):
                    parts = line.split()
                    subj, sid = parts[1].decode(), int(parts[2])
                    reply = parts[3].decode() if len(parts) == 5 else None
                    n = int(parts[-1])
                    data = self._readn(n)
                    self._dispatch(Msg(subj, sid, reply, {}, data))
                elif line.startswith(b"HMSG "):
                    parts = line.split()
                    subj, sid = parts[1].decode(), int(parts[2])
                    reply = parts[3].decode() if len(parts) == 6 else None
                    hlen, tlen = int(parts[-2]), int(parts[-1])
                    raw = self._readn(tlen)
                    headers, status, desc = parse_headers(raw[:hlen])
                    self._dispatch(Msg(subj, sid, reply, headers, raw[hlen:], status, desc))
                elif line == b"PING":
                    self._write(b"PONG\r\n")
                elif line == b"PONG":
                    self.pongs.put(True)
                elif line == b"+OK":
                    pass
                elif line.startswith(b"-ERR"):
                    self.errors.append(line.decode())
                    print("NATS", line.decode())
                elif line.startswith(b"INFO "):
                    self.info.update(json.loads(line[5:]))
                elif line:
                    print("unknown protocol line", line)
        except (ConnectionError, OSError) as e:
            if not self.closed:
                print("reader stopped:", e)
            self.closed = True

    def _dispatch(self, msg):
        sub = self.subs.get(msg.sid)
        if sub is None:
            return
        if sub.cb:
            try:
                sub.cb(msg)
            except Exception as e:  # a callback must not kill the reader
                print("callback error:", repr(e))
        else:
            sub.q.put(msg)

    # --- API
    def publish(self, subject, data=b"", reply=None, headers=None):
        if isinstance(data, str):
            data = data.encode()
        r = (" " + reply) if reply else ""
        if headers:
            h = encode_headers(headers)
            self._write(b"HPUB %s%s %d %d\r\n" % (subject.encode(), r.encode(), len(h), len(h) + len(data)) + h + data + b"\r\n")
        else:
            self._write(b"PUB %s%s %d\r\n" % (subject.encode(), r.encode(), len(data)) + data + b"\r\n")

    def subscribe(self, subject, queue_group=None, cb=None):
        sid = self.next_sid
        self.next_sid += 1
        sub = Subscription(self, sid, subject, cb)
        self.subs[sid] = sub
        q = (" " + queue_group) if queue_group else ""
        self._write(("SUB %s%s %d\r\n" % (subject, q, sid)).encode())
        return sub

    def unsubscribe(self, sub, max_msgs=None):
        if max_msgs:
            self._write(("UNSUB %d %d\r\n" % (sub.sid, max_msgs)).encode())
        else:
            self._write(("UNSUB %d\r\n" % sub.sid).encode())
            self.subs.pop(sub.sid, None)

    def flush(self, timeout=5.0):
        self._write(b"PING\r\n")
        self.pongs.get(timeout=timeout)

    def new_inbox(self):
        return self.inbox_prefix + "." + nuid()

    def _on_response(self, msg):
        token = msg.subject.rsplit(".", 1)[1]
        with self.resp_lock:
            q = self.resp_map.get(token)
        if q is not None:
            q.put(msg)

    def request(self, subject, data=b"", headers=None, timeout=5.0):
        """One request, one answer (the first). Raises TimeoutError; a no-responders status
        (NATS/1.0 503, empty body) is returned as a Msg with status '503'."""
        token = nuid()
        q = queue.Queue()
        with self.resp_lock:
            self.resp_map[token] = q
        try:
            self.publish(subject, data, reply=self.inbox_prefix + "." + token, headers=headers)
            try:
                return q.get(timeout=timeout)
            except queue.Empty:
                raise TimeoutError("request to %s: no answer within %.1fs" % (subject, timeout))
        finally:
            with self.resp_lock:
                self.resp_map.pop(token, None)

    def request_many(self, subject, data=b"", headers=None, timeout=5.0, until=None):
        """A request whose answer is several messages on one inbox (a JetStream pull request):
        yields each message until `until(msg)` is true or the timeout passes."""
        inbox = self.new_inbox()
        sub = self.subscribe(inbox)
        try:
            self.publish(subject, data, reply=inbox, headers=headers)
            deadline = time.time() + timeout
            while True:
                left = deadline - time.time()
                if left <= 0:
                    return
                try:
                    m = sub.next(left)
                except TimeoutError:
                    return
                yield m
                if until and until(m):
                    return
        finally:
            self.unsubscribe(sub)

    def close(self):
        self.closed = True
        try:
            self.sock.close()
        except OSError:
            pass
