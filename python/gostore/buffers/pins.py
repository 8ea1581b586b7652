"""Zero-copy access to Python buffers for the native calls.

The copying API (``put``, ``put_parts``, ``put_batch``) hands Go the address of
the caller's own memory: :class:`BufferPins` takes a buffer-protocol view of
each value with ``PyObject_GetBuffer`` (so the exporter cannot move or free the
memory) and releases it with ``PyBuffer_Release`` once the native call has
returned. Nothing is copied unless the value is not C-contiguous, in which
case one C-ordered copy is made and pinned instead.

``get`` goes the other way: :func:`new_bytes` allocates an uninitialized
``bytes`` object and returns its data address so that Go writes the value into
it directly -- one copy from the store into the object Python receives.

The C-API functions are bound through private ``PYFUNCTYPE`` prototypes rather
than by setting ``argtypes`` on ``ctypes.pythonapi`` attributes, which are
shared with every other module of the process.
"""

from __future__ import annotations

import ctypes
import sys
import threading
from typing import Any, List, Optional, Sequence, Tuple

__all__ = ["BufferPins", "pin_buffer", "new_bytes", "packed_hits", "scratch_buffer", "PRIVATE_SCRATCH", "SCRATCH_BYTES", "Py_buffer"]

# Flags of PyObject_GetBuffer (Include/pybuffer.h).
PyBUF_WRITABLE = 0x0001
PyBUF_FORMAT = 0x0004
PyBUF_ND = 0x0008
PyBUF_STRIDES = 0x0010 | PyBUF_ND
PyBUF_C_CONTIGUOUS = 0x0020 | PyBUF_STRIDES


class Py_buffer(ctypes.Structure):
    """``Py_buffer`` as declared in CPython 3.3+ (layout unchanged since)."""

    _fields_ = [
        ("buf", ctypes.c_void_p),
        ("obj", ctypes.c_void_p),  # PyObject*; owned by the view, never touched here
        ("len", ctypes.c_ssize_t),
        ("itemsize", ctypes.c_ssize_t),
        ("readonly", ctypes.c_int),
        ("ndim", ctypes.c_int),
        ("format", ctypes.c_char_p),
        ("shape", ctypes.POINTER(ctypes.c_ssize_t)),
        ("strides", ctypes.POINTER(ctypes.c_ssize_t)),
        ("suboffsets", ctypes.POINTER(ctypes.c_ssize_t)),
        ("internal", ctypes.c_void_p),
    ]


# PYFUNCTYPE: the GIL stays held and a set Python error is raised after the call.
_PyObject_GetBuffer = ctypes.PYFUNCTYPE(
    ctypes.c_int, ctypes.py_object, ctypes.POINTER(Py_buffer), ctypes.c_int
)(("PyObject_GetBuffer", ctypes.pythonapi))
_PyBuffer_Release = ctypes.PYFUNCTYPE(None, ctypes.POINTER(Py_buffer))(
    ("PyBuffer_Release", ctypes.pythonapi)
)
_PyBytes_FromStringAndSize = ctypes.PYFUNCTYPE(
    ctypes.py_object, ctypes.c_void_p, ctypes.c_ssize_t
)(("PyBytes_FromStringAndSize", ctypes.pythonapi))
_PyBytes_AsString = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object)(
    ("PyBytes_AsString", ctypes.pythonapi)
)


def _type_error(obj: Any, writable: bool) -> TypeError:
    kind = "a writable bytes-like object" if writable else "a bytes-like object"
    return TypeError(
        f"{kind} (buffer protocol: bytes, bytearray, memoryview, numpy array) "
        f"is required, not {type(obj).__name__!r}"
    )


class BufferPins:
    """Holds buffer views open until :meth:`release` (or the ``with`` exit).

    >>> with BufferPins() as pins:
    ...     addr, n = pins.pin(b"abc")   # address valid inside the block
    """

    __slots__ = ("_views", "_keep")

    def __init__(self) -> None:
        self._views: List[Py_buffer] = []
        self._keep: List[Any] = []  # fallback copies of non-contiguous values

    def pin(self, obj: Any, writable: bool = False) -> Tuple[int, int]:
        """``(address, nbytes)`` of ``obj``'s C-contiguous bytes.

        Read-only pins of non-contiguous buffers pin a C-ordered copy. Raises
        ``TypeError`` for objects without the buffer protocol (``str``,
        ``int``, ``None``, ``list``…) and, for writable pins, for read-only or
        non-contiguous buffers.
        """
        if isinstance(obj, str):  # str never exports a buffer; clearer message
            raise _type_error(obj, writable)
        flags = PyBUF_C_CONTIGUOUS | (PyBUF_WRITABLE if writable else 0)
        view = Py_buffer()
        try:
            _PyObject_GetBuffer(obj, ctypes.byref(view), flags)
        except TypeError:
            raise _type_error(obj, writable) from None
        except (BufferError, ValueError):
            # Exporter refused a C-contiguous (or writable) view: numpy raises
            # ValueError, memoryview BufferError.
            if writable:
                raise _type_error(obj, writable) from None
            try:
                copy = memoryview(obj).tobytes()
            except TypeError:
                raise _type_error(obj, writable) from None
            self._keep.append(copy)
            return self.pin(copy)
        self._views.append(view)
        return (view.buf or 0), view.len

    def release(self) -> None:
        views, self._views = self._views, []
        for view in views:
            _PyBuffer_Release(ctypes.byref(view))
        self._keep.clear()

    def __enter__(self) -> "BufferPins":
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def __del__(self) -> None:  # never leak an exporter's export count
        if self._views:
            self.release()


class pin_buffer:
    """Context manager for one value: ``with pin_buffer(v) as (addr, n): ...``."""

    __slots__ = ("_obj", "_writable", "_pins")

    def __init__(self, obj: Any, writable: bool = False) -> None:
        self._obj = obj
        self._writable = writable
        self._pins = BufferPins()

    def __enter__(self) -> Tuple[int, int]:
        return self._pins.pin(self._obj, self._writable)

    def __exit__(self, *exc: object) -> None:
        self._pins.release()


# Where a bytes object's data starts, from the object's address (CPython:
# the header, then ob_sval); checked against the C API once, at import.
_BYTES_DATA = sys.getsizeof(b"") - 1
_probe = _PyBytes_FromStringAndSize(None, 16)
if _PyBytes_AsString(_probe) != id(_probe) + _BYTES_DATA:  # not the layout assumed
    _BYTES_DATA = -1
del _probe

# Up to this size ``bytes(n)`` (zero-filled, one interpreter call) is
# cheaper than a ctypes call: 0.1 us against 0.5 us for 4 KiB, 13 us of a
# 32-object get_batch. Above it the zero-filling costs more than it saves.
_SMALL_BYTES = 64 << 10


# Each thread's scratch buffer: small reads land in it in the call that
# looks them up (get(), get_batch()), and are copied out, which costs less
# than a second call and an object allocated for each value. (Standalone
# mode takes the scratch of a batch from shared memory instead:
# gostore.standalone.RemoteLibrary.packed_scratch.)
SCRATCH_BYTES = 256 * 1024
_tls = threading.local()


def scratch_buffer() -> int:
    """The address of this thread's scratch buffer (``SCRATCH_BYTES``)."""
    buf = getattr(_tls, "scratch", None)
    if buf is None:
        buf = _tls.scratch = (ctypes.c_char * SCRATCH_BYTES)()
    return ctypes.addressof(buf)


class _PrivateScratch:
    """The context :meth:`gostore.store.distributed_store.MooncakeDistributedStore._scratch`
    gives in process: this thread's scratch buffer, kept for its next call."""

    def __enter__(self) -> int:
        return scratch_buffer()

    def __exit__(self, *_exc: Any) -> None:
        return None


PRIVATE_SCRATCH = _PrivateScratch()


def packed_hits(sizes: Sequence[int], results: Sequence[int]) -> List[Optional[Tuple[int, int]]]:
    """Where ``gs_get_packed`` left each key's value in the scratch buffer,
    from its ``sizes`` and ``results``: ``(offset, size)`` for a value read
    whole, None for a miss or a failed read. The values lie back to back
    in key order; a failed read keeps its room."""
    out: List[Optional[Tuple[int, int]]] = []
    off = 0
    for size, got in zip(sizes, results):
        if size <= 0:
            out.append(None)
            continue
        out.append((off, size) if got == size else None)
        off += size
    return out


def new_bytes(n: int) -> Tuple[bytes, int]:
    """An uninitialized ``bytes`` of ``n`` > 0 bytes and its data address.

    The object is new and private to the caller, so filling it in place
    before handing it out is safe (``n == 0`` would return the shared empty
    singleton, hence the check; ``bytes(n)`` is used only from 2 bytes up,
    where CPython never shares the object).
    """
    if n <= 0:
        raise ValueError("new_bytes needs n > 0")
    if _BYTES_DATA < 0:
        obj = _PyBytes_FromStringAndSize(None, n)
        return obj, _PyBytes_AsString(obj)
    obj = bytes(n) if 2 <= n <= _SMALL_BYTES else _PyBytes_FromStringAndSize(None, n)
    return obj, id(obj) + _BYTES_DATA
