"""A small MessagePack codec (standard library only), with the timestamp extension (-1)."""
import datetime
import struct

UTC = datetime.timezone.utc


class Timestamp:
    """A MessagePack timestamp; kept as seconds + nanoseconds so nothing is rounded."""
    def __init__(self, seconds, nanos=0):
        self.seconds, self.nanos = seconds, nanos

    @classmethod
    def from_datetime(cls, dt):
        if dt.tzinfo is None:
            dt = dt.replace(tzinfo=UTC)
        epoch = datetime.datetime(1970, 1, 1, tzinfo=UTC)
        delta = dt - epoch
        secs = delta.days * 86400 + delta.seconds
        return cls(secs, delta.microseconds * 1000)

    @classmethod
    def now(cls):
        import time
        ns = time.time_ns()
        return cls(ns // 10**9, ns % 10**9)

    def isoformat(self):
        dt = datetime.datetime(1970, 1, 1, tzinfo=UTC) + datetime.timedelta(seconds=self.seconds)
        frac = ("%09d" % self.nanos).rstrip("0")
        return dt.strftime("%Y-%m-%dT%H:%M:%S") + ("." + frac if frac else "") + "Z"

    def __repr__(self):
        return "Timestamp(%s)" % self.isoformat()

    def to_json(self):
        return self.isoformat()


class ExtType:
    def __init__(self, code, data):
        self.code, self.data = code, data

    def __repr__(self):
        return "ExtType(%d, %r)" % (self.code, self.data)


def packb(obj):
    out = bytearray()
    _pack(obj, out)
    return bytes(out)


def _pack(o, out):
    if o is None:
        out.append(0xC0)
    elif o is True:
        out.append(0xC3)
    elif o is False:
        out.append(0xC2)
    elif isinstance(o, int):
        if 0 <= o <= 0x7F:
            out.append(o)
        elif -32 <= o < 0:
            out += struct.pack(">b", o)
        elif 0 <= o <= 0xFF:
            out += b"\xcc" + struct.pack(">B", o)
        elif 0 <= o <= 0xFFFF:
            out += b"\xcd" + struct.pack(">H", o)
        elif 0 <= o <= 0xFFFFFFFF:
            out += b"\xce" + struct.pack(">I", o)
        elif 0 <= o <= 0xFFFFFFFFFFFFFFFF:
            out += b"\xcf" + struct.pack(">Q", o)
        elif -128 <= o:
            out += b"\xd0" + struct.pack(">b", o)
        elif -32768 <= o:
            out += b"\xd1" + struct.pack(">h", o)
        elif -2**31 <= o:
            out += b"\xd2" + struct.pack(">i", o)
        else:
            out += b"\xd3" + struct.pack(">q", o)
    elif isinstance(o, float):
        out += b"\xcb" + struct.pack(">d", o)
    elif isinstance(o, str):
        b = o.encode()
        n = len(b)
        if n < 32:
            out.append(0xA0 | n)
        elif n <= 0xFF:
            out += b"\xd9" + struct.pack(">B", n)
        elif n <= 0xFFFF:
            out += b"\xda" + struct.pack(">H", n)
        else:
            out += b"\xdb" + struct.pack(">I", n)
        out += b
    elif isinstance(o, (bytes, bytearray)):
        n = len(o)
        if n <= 0xFF:
            out += b"\xc4" + struct.pack(">B", n)
        elif n <= 0xFFFF:
            out += b"\xc5" + struct.pack(">H", n)
        else:
            out += b"\xc6" + struct.pack(">I", n)
        out += o
    elif isinstance(o, (list, tuple)):
        n = len(o)
        if n < 16:
            out.append(0x90 | n)
        elif n <= 0xFFFF:
            out += b"\xdc" + struct.pack(">H", n)
        else:
            out += b"\xdd" + struct.pack(">I", n)
        for x in o:
            _pack(x, out)
    elif isinstance(o, dict):
        n = len(o)
        if n < 16:
            out.append(0x80 | n)
        elif n <= 0xFFFF:
            out += b"\xde" + struct.pack(">H", n)
        else:
            out += b"\xdf" + struct.pack(">I", n)
        for k, v in o.items():
            _pack(k, out)
            _pack(v, out)
    elif isinstance(o, datetime.datetime):
        _pack(Timestamp.from_datetime(o), out)
    elif isinstance(o, Timestamp):
        if o.nanos == 0 and 0 <= o.seconds <= 0xFFFFFFFF:
            out += b"\xd6\xff" + struct.pack(">I", o.seconds)
        elif 0 <= o.seconds < 2**34:
            out += b"\xd7\xff" + struct.pack(">Q", (o.nanos << 34) | o.seconds)
        else:
            out += b"\xc7\x0c\xff" + struct.pack(">Iq", o.nanos, o.seconds)
    else:
        raise TypeError("cannot pack %r" % type(o))


def unpackb(data):
    obj, i = _unpack(memoryview(data), 0)
    if i != len(data):
        raise ValueError("extra bytes after the value: %d of %d read" % (i, len(data)))
    return obj


def _ext(code, b):
    if code == -1:
        if len(b) == 4:
            return Timestamp(struct.unpack(">I", b)[0], 0)
        if len(b) == 8:
            v = struct.unpack(">Q", b)[0]
            return Timestamp(v & ((1 << 34) - 1), v >> 34)
        if len(b) == 12:
            ns, s = struct.unpack(">Iq", b)
            return Timestamp(s, ns)
    return ExtType(code, bytes(b))


def _unpack(d, i):
    c = d[i]
    i += 1
    if c <= 0x7F:
        return c, i
    if 0x80 <= c <= 0x8F:
        return _map(d, i, c & 0x0F)
    if 0x90 <= c <= 0x9F:
        return _arr(d, i, c & 0x0F)
    if 0xA0 <= c <= 0xBF:
        n = c & 0x1F
        return bytes(d[i:i + n]).decode(), i + n
    if c >= 0xE0:
        return c - 256, i
    if c == 0xC0:
        return None, i
    if c == 0xC2:
        return False, i
    if c == 0xC3:
        return True, i
    fmt = {0xCC: ">B", 0xCD: ">H", 0xCE: ">I", 0xCF: ">Q", 0xD0: ">b", 0xD1: ">h", 0xD2: ">i", 0xD3: ">q",
           0xCA: ">f", 0xCB: ">d"}
    if c in fmt:
        sz = struct.calcsize(fmt[c])
        return struct.unpack(fmt[c], d[i:i + sz])[0], i + sz
    if c in (0xD9, 0xDA, 0xDB):
        sz = {0xD9: 1, 0xDA: 2, 0xDB: 4}[c]
        n = int.from_bytes(d[i:i + sz], "big")
        i += sz
        return bytes(d[i:i + n]).decode(), i + n
    if c in (0xC4, 0xC5, 0xC6):
        sz = {0xC4: 1, 0xC5: 2, 0xC6: 4}[c]
        n = int.from_bytes(d[i:i + sz], "big")
        i += sz
        return bytes(d[i:i + n]), i + n
    if c in (0xDC, 0xDD):
        sz = 2 if c == 0xDC else 4
        n = int.from_bytes(d[i:i + sz], "big")
        return _arr(d, i + sz, n)
    if c in (0xDE, 0xDF):
        sz = 2 if c == 0xDE else 4
        n = int.from_bytes(d[i:i + sz], "big")
        return _map(d, i + sz, n)
    if c in (0xD4, 0xD5, 0xD6, 0xD7, 0xD8):
        n = {0xD4: 1, 0xD5: 2, 0xD6: 4, 0xD7: 8, 0xD8: 16}[c]
        code = struct.unpack(">b", d[i:i + 1])[0]
        return _ext(code, d[i + 1:i + 1 + n]), i + 1 + n
    if c in (0xC7, 0xC8, 0xC9):
        sz = {0xC7: 1, 0xC8: 2, 0xC9: 4}[c]
        n = int.from_bytes(d[i:i + sz], "big")
        i += sz
        code = struct.unpack(">b", d[i:i + 1])[0]
        return _ext(code, d[i + 1:i + 1 + n]), i + 1 + n
    raise ValueError("bad msgpack byte 0x%02x at %d" % (c, i - 1))


def _arr(d, i, n):
    out = []
    for _ in range(n):
        v, i = _unpack(d, i)
        out.append(v)
    return out, i


def _map(d, i, n):
    out = {}
    for _ in range(n):
        k, i = _unpack(d, i)
        v, i = _unpack(d, i)
        out[k] = v
    return out, i


def to_jsonable(o):
    if isinstance(o, dict):
        return {k: to_jsonable(v) for k, v in o.items()}
    if isinstance(o, list):
        return [to_jsonable(v) for v in o]
    if isinstance(o, Timestamp):
        return o.isoformat()
    if isinstance(o, bytes):
        import base64
        return base64.b64encode(o).decode()
    return o
