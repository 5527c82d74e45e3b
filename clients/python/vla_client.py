"""Python client for vla-server (and vla.cpp servers): ZeroMQ + the protobuf messages of
proto/vla.proto. Dependencies: pyzmq, protobuf (>= 4.21), numpy. `pip install ./clients/python`
(from the repository root) installs it as the module `vla_client`; or copy this one file anywhere.

    from vla_client import VlaClient
    c = VlaClient("tcp://127.0.0.1:5555", timeout_ms=10_000)
    print(c.info())                       # arch, cameras, image size, dims, backend
    chunk = c.predict(images=[img0, img1],  # HxWx3 uint8 (or float32 in [0, 1])
                      state=np.zeros(6, np.float32),
                      prompt="pick up the red cube")
    chunk.shape                            # (chunk_size, action_dim)

    from vla_client import wait_for_server
    wait_for_server("tcp://127.0.0.1:5555", timeout=60)  # e.g. right after starting vla-server

Addresses are tcp://HOST:PORT, ipc://PATH or inproc://NAME (anything else: ValueError). Errors
from the server raise VlaError(code, message); no reply within timeout_ms raises
VlaError("TIMEOUT", ...). Before its first request a client checks that something listens at
the address (a TCP connect, or the ipc socket file), so a missing server raises NoServerError
(a VlaError with code "NO_SERVER", and a ConnectionError) at once instead of a TIMEOUT. The
socket is a DEALER framed like REQ, so a timed-out request never wedges the client: a late
reply to it is recognised by its request id and skipped.
"""

from __future__ import annotations

import itertools
import json
import re
import socket
import time
import warnings

import numpy as np
import zmq
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

__all__ = ["VlaClient", "VlaError", "VlaWarning", "NoServerError", "wait_for_server", "check_address",
           "PredictRequest", "PredictResponse", "Image"]
__version__ = "0.1.0"

PROBE_TIMEOUT_S = 1.0  # the TCP connect that tells "no server" apart from a slow one

_F = descriptor_pb2.FieldDescriptorProto


def _file_descriptor() -> descriptor_pb2.FileDescriptorProto:
    """proto/vla.proto, spelled out (tests check the numbers against the file)."""
    fd = descriptor_pb2.FileDescriptorProto(name="vla_client/vla.proto", package="vla", syntax="proto3")

    def message(name, fields, enums=()):
        m = fd.message_type.add(name=name)
        for ename, values in enums:
            e = m.enum_type.add(name=ename)
            for vname, number in values:
                e.value.add(name=vname, number=number)
        for fname, number, ftype, repeated, type_name in fields:
            f = m.field.add(name=fname, number=number, type=ftype)
            f.label = _F.LABEL_REPEATED if repeated else _F.LABEL_OPTIONAL
            if type_name:
                f.type_name = type_name
        return m

    message(
        "Image",
        [
            ("encoding", 1, _F.TYPE_ENUM, False, ".vla.Image.Encoding"),
            ("height", 2, _F.TYPE_UINT32, False, None),
            ("width", 3, _F.TYPE_UINT32, False, None),
            ("data", 4, _F.TYPE_BYTES, False, None),
        ],
        [("Encoding", [("JPEG", 0), ("RGB_U8", 1), ("F32_RGB_01", 2)])],
    )
    message(
        "PredictRequest",
        [
            ("images", 1, _F.TYPE_MESSAGE, True, ".vla.Image"),
            ("lang_tokens", 2, _F.TYPE_INT32, True, None),
            ("state", 3, _F.TYPE_FLOAT, True, None),
            ("noise", 4, _F.TYPE_FLOAT, True, None),
            ("request_id", 5, _F.TYPE_UINT64, False, None),
            ("precomputed_img_emb", 6, _F.TYPE_FLOAT, True, None),
            ("precomputed_img_emb_n_views", 7, _F.TYPE_UINT32, False, None),
            ("attention_mask", 8, _F.TYPE_UINT32, True, None),
            ("reset_memory", 9, _F.TYPE_BOOL, False, None),
            ("prompt", 16, _F.TYPE_STRING, False, None),
            ("control", 17, _F.TYPE_ENUM, False, ".vla.PredictRequest.Control"),
            ("image_names", 18, _F.TYPE_STRING, True, None),
        ],
        [("Control", [("PREDICT", 0), ("PING", 1), ("INFO", 2)])],
    )
    message(
        "PredictResponse",
        [
            ("request_id", 1, _F.TYPE_UINT64, False, None),
            ("action_chunk", 2, _F.TYPE_FLOAT, True, None),
            ("chunk_size", 3, _F.TYPE_UINT32, False, None),
            ("action_dim", 4, _F.TYPE_UINT32, False, None),
            ("latency_ms_total", 5, _F.TYPE_FLOAT, False, None),
            ("latency_ms_inference", 6, _F.TYPE_FLOAT, False, None),
            ("error", 7, _F.TYPE_STRING, False, None),
            ("latency_ms_prefill", 8, _F.TYPE_FLOAT, False, None),
            ("latency_ms_denoise", 9, _F.TYPE_FLOAT, False, None),
            ("latency_ms_vision", 10, _F.TYPE_FLOAT, False, None),
            ("error_code", 11, _F.TYPE_ENUM, False, ".vla.PredictResponse.ErrorCode"),
            ("info_json", 12, _F.TYPE_STRING, False, None),
            ("warnings", 13, _F.TYPE_STRING, True, None),
        ],
        [
            (
                "ErrorCode",
                [("OK", 0), ("BAD_REQUEST", 1), ("UNSUPPORTED", 2), ("SUPERSEDED", 3),
                 ("QUEUE_FULL", 4), ("INTERNAL", 5), ("SHUTTING_DOWN", 6)],
            )
        ],
    )
    return fd


def _classes():
    pool = descriptor_pool.DescriptorPool()
    pool.Add(_file_descriptor())
    get = getattr(message_factory, "GetMessageClass", None)
    if get is None:  # protobuf < 4.22
        factory = message_factory.MessageFactory(pool)
        get = factory.GetPrototype
    return tuple(get(pool.FindMessageTypeByName(f"vla.{n}")) for n in ("Image", "PredictRequest", "PredictResponse"))


Image, PredictRequest, PredictResponse = _classes()
_ERROR_NAMES = {v.number: v.name for v in PredictResponse.DESCRIPTOR.enum_types_by_name["ErrorCode"].values}


class VlaWarning(UserWarning):
    """How the server read a request, where it differs from what was sent (a prompt cut
    where the model's reference cuts it)."""


class VlaError(Exception):
    """An error reply (code: "BAD_REQUEST", "QUEUE_FULL", ...) or "TIMEOUT"."""

    def __init__(self, code: str, message: str):
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


class NoServerError(VlaError, ConnectionError):
    """Nothing answers at the address (code "NO_SERVER"); `address` and `reason` as attributes."""

    def __init__(self, address: str, reason: str, waited: float | None = None):
        what = f"no server at {address}" if waited is None else f"no server answered at {address} within {waited:g} s"
        super().__init__(
            "NO_SERVER",
            f"{what} (is vla-server running? start it with `vla-server MODEL.gguf --bind {address}`): {reason}",
        )
        self.address = address
        self.reason = reason


_ADDRESS_FORMS = "tcp://HOST:PORT (e.g. tcp://127.0.0.1:5555), ipc://PATH or inproc://NAME"
_HOST_PORT = re.compile(r"[\w.\-\[\]:]+:\d+")


def check_address(address: str) -> str:
    """`address` if a client can connect to it, else ValueError saying what to write instead."""
    scheme, sep, rest = address.partition("://")
    if scheme == "tcp":
        _host_port(address)
        return address
    if sep and scheme in ("ipc", "inproc") and rest:
        return address
    what = "has no scheme" if not sep else "names nothing" if scheme in ("ipc", "inproc") else f"has an unknown scheme {scheme!r}"
    hostport = rest if sep else address
    guess = f" (here: tcp://{hostport}?)" if _HOST_PORT.fullmatch(hostport) else ""
    raise ValueError(f"address {address!r} {what}: a vla-server address is {_ADDRESS_FORMS}{guess}")


def _host_port(address: str) -> tuple[str, int]:
    host, sep, port = address[len("tcp://"):].rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"address {address!r}: expected tcp://HOST:PORT, e.g. tcp://127.0.0.1:5555")
    if host == "*":
        raise ValueError(f"address {address!r} is a bind address: connect to the server's host, e.g. tcp://127.0.0.1:{port}")
    return host.strip("[]"), int(port)  # [::1] -> ::1


def _probe(address: str, timeout: float = PROBE_TIMEOUT_S):
    """NoServerError unless something accepts a connection at a tcp:// or ipc:// address (ZeroMQ
    connects lazily, so without this a missing server shows only as a TIMEOUT)."""
    scheme, _, rest = address.partition("://")
    try:
        if scheme == "tcp":
            socket.create_connection(_host_port(address), timeout=timeout).close()
        elif scheme == "ipc" and not rest.startswith("@"):  # @NAME: Linux abstract namespace, no file
            if not hasattr(socket, "AF_UNIX"):
                return
            with socket.socket(socket.AF_UNIX) as s:
                s.settimeout(timeout)
                s.connect(rest)
    except socket.gaierror as e:
        raise NoServerError(address, f"cannot resolve the host: {e.strerror}") from None
    except FileNotFoundError:
        raise NoServerError(address, f"no socket file {rest}") from None
    except socket.timeout:
        raise NoServerError(address, f"no answer to a connect within {timeout:g} s") from None
    except OSError as e:
        raise NoServerError(address, e.strerror or str(e)) from None


def wait_for_server(address: str, timeout: float = 30.0, context: zmq.Context | None = None) -> None:
    """Returns once a server answers a PING at `address` (any reply counts: a vla.cpp server
    answers it with an error); NoServerError naming the address after `timeout` seconds."""
    check_address(address)
    deadline = time.monotonic() + timeout
    reason = "nothing tried"
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise NoServerError(address, reason, waited=timeout)
        try:
            _probe(address, min(left, PROBE_TIMEOUT_S))
        except NoServerError as e:
            reason = e.reason
            time.sleep(max(0.0, min(0.1, deadline - time.monotonic())))
            continue
        with VlaClient(address, timeout_ms=max(1, int(left * 1000)), context=context, probe=False) as c:
            try:
                c.call(PredictRequest(control=PredictRequest.PING))
                return
            except VlaError:
                reason = "something listens there but sent no reply"


def encode_image(img) -> Image:
    """HxWx3 uint8 -> RGB_U8; HxWx3 float32 in [0, 1] -> F32_RGB_01; bytes -> JPEG."""
    if isinstance(img, (bytes, bytearray)):
        return Image(encoding=Image.JPEG, data=bytes(img))
    a = np.asarray(img)
    if a.ndim != 3 or a.shape[2] != 3:
        raise ValueError(f"image shape {a.shape}: expected (height, width, 3)")
    h, w = a.shape[:2]
    if a.dtype == np.uint8:
        return Image(encoding=Image.RGB_U8, height=h, width=w, data=np.ascontiguousarray(a).tobytes())
    if a.dtype in (np.float32, np.float64):
        data = np.ascontiguousarray(a, dtype="<f4").tobytes()
        return Image(encoding=Image.F32_RGB_01, height=h, width=w, data=data)
    raise ValueError(f"image dtype {a.dtype}: expected uint8 or float32")


def build_request(images, state, prompt=None, tokens=None, noise=None) -> PredictRequest:
    """The PredictRequest for one observation (no request id). `images`: a list in the model's
    camera order, or a dict of camera name (INFO's camera_names, or the part after
    "observation.images.") to image, which the server puts in the model's order."""
    req = PredictRequest()
    if isinstance(images, dict):
        req.image_names.extend(str(k) for k in images)
        images = list(images.values())
    req.images.extend(encode_image(i) for i in images)
    req.state.extend(np.asarray(state, dtype=np.float32).ravel().tolist())
    if prompt is not None:
        req.prompt = prompt
    if tokens is not None:
        req.lang_tokens.extend(int(t) for t in tokens)
    if noise is not None:
        req.noise.extend(np.asarray(noise, dtype=np.float32).ravel().tolist())
    return req


class VlaClient:
    """A connection to one server. `addr`: tcp://HOST:PORT, ipc://PATH or inproc://NAME.
    probe=True: before the first request, check that something listens at `addr` (NoServerError
    at once if not); probe=False keeps ZeroMQ's lazy connect (a missing server is a TIMEOUT)."""

    def __init__(self, addr: str, timeout_ms: int = 30_000, context: zmq.Context | None = None, probe: bool = True):
        self.addr = check_address(addr)
        self.timeout_ms = timeout_ms
        self._unprobed = probe
        self._ids = itertools.count(1)
        self._socket = (context or zmq.Context.instance()).socket(zmq.DEALER)
        self._socket.setsockopt(zmq.LINGER, 0)
        self._socket.connect(addr)

    def close(self):
        self._socket.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def call(self, req: PredictRequest) -> PredictResponse:
        """Sends one request and returns its reply, error replies included."""
        if self._unprobed:
            _probe(self.addr, min(PROBE_TIMEOUT_S, self.timeout_ms / 1000))
            self._unprobed = False
        if not req.request_id:
            req.request_id = next(self._ids)
        self._socket.send_multipart([b"", req.SerializeToString()])
        deadline = time.monotonic() + self.timeout_ms / 1000
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not self._socket.poll(int(left * 1000) + 1, zmq.POLLIN):
                raise VlaError("TIMEOUT", f"no reply from {self.addr} within {self.timeout_ms} ms")
            frames = self._socket.recv_multipart()
            resp = PredictResponse.FromString(frames[-1])
            # Request id 0: the server could not read the request, so could not echo its id.
            if resp.request_id == req.request_id or (resp.request_id == 0 and resp.error):
                return resp

    def _checked(self, req) -> PredictResponse:
        resp = self.call(req)
        if resp.error:
            raise VlaError(_ERROR_NAMES.get(resp.error_code, str(resp.error_code)), resp.error)
        return resp

    def ping(self) -> float:
        """Round trip in milliseconds."""
        t0 = time.monotonic()
        self._checked(PredictRequest(control=PredictRequest.PING))
        return (time.monotonic() - t0) * 1e3

    def info(self) -> dict:
        return json.loads(self._checked(PredictRequest(control=PredictRequest.INFO)).info_json)

    def predict(self, images, state, prompt=None, tokens=None, noise=None, return_response=False):
        """One action chunk as a (chunk_size, action_dim) float32 array; with
        return_response=True also the raw PredictResponse (latencies, warnings). The server's
        warnings (e.g. a prompt cut where the reference cuts it) are raised as Python
        warnings (VlaWarning)."""
        resp = self._checked(build_request(images, state, prompt, tokens, noise))
        for w in resp.warnings:
            warnings.warn(w, VlaWarning, stacklevel=2)
        chunk = np.asarray(resp.action_chunk, dtype=np.float32).reshape(resp.chunk_size, resp.action_dim)
        return (chunk, resp) if return_response else chunk
