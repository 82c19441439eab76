# Copyright: xdpfleet developers
# GNU General Public License v2.0 only (see COPYING or https://www.gnu.org/licenses/gpl-2.0.txt)
"""A binding to the system's libbpf.so.1 through ctypes.

Modules stay pure Python on the host: the only native dependency is the libbpf that iproute2, bpftool and
xdp-tools use. Every failing call raises LibbpfError, which names the call and the meaning of its errno.
Object handles (BpfObject, pinned fds) are closed explicitly or by their context managers; nothing here relies
on garbage collection to release kernel objects.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
from dataclasses import dataclass

from ansible_collections.xdpfleet.fabric.plugins.module_utils.common import kill_points

# uapi constants (linux/bpf.h, linux/if_link.h)
BPF_XDP = 37
BPF_TCX_INGRESS = 46
BPF_XDP_DEVMAP = 33
BPF_F_REPLACE = 1 << 2
BPF_F_RDONLY_PROG = 1 << 7
BPF_F_TEST_XDP_LIVE_FRAMES = 1 << 1
BPF_ANY = 0
BPF_NOEXIST = 1
BPF_EXIST = 2
XDP_FLAGS_SKB_MODE = 1 << 1
XDP_FLAGS_DRV_MODE = 1 << 2
BPF_LINK_TYPE_XDP = 6
BPF_LINK_TYPE_TCX = 11
BPF_PROG_TYPE_SCHED_CLS = 3
BPF_PROG_TYPE_XDP = 6
BPF_MAP_TYPE_DEVMAP = 14
BPF_MAP_TYPE_DEVMAP_HASH = 25
BPF_TAG_SIZE = 8
ENOTSUPP = 524  # the kernel's internal "operation not supported", which BPF syscalls leak
BPF_OBJ_NAME_LEN = 16

XDP_MODE_FLAGS = {"native": XDP_FLAGS_DRV_MODE, "generic": XDP_FLAGS_SKB_MODE}
XDP_ATTACH_MODES = {0: "none", 1: "native", 2: "generic", 3: "offload", 4: "multi"}

# The binding follows libbpf 1.0's conventions (int calls return -errno, pointer calls NULL with errno set); 0.x
# returned error pointers and, before 0.6, had another bpf_prog_load under the same name.
LIBBPF_MIN_VERSION = (1, 0)
VERIFIER_LOG_SIZE = 1 << 20  # the kernel keeps the log's tail when it overflows, and the tail names the error


class LibbpfError(OSError):
    """A libbpf call failed: the message names the call, the errno's meaning, and what libbpf or the verifier said."""

    def __init__(self, call: str, err: int, detail: str = ""):
        self.call = call
        name = errno.errorcode.get(err, str(err))
        message = f"{call}: {os.strerror(err)} ({name})"
        if detail:
            message += "\n" + detail.rstrip()
        super().__init__(err, message)

    def __str__(self) -> str:
        return str(self.strerror)


class LibbpfUnsupported(OSError):
    """The host's libbpf is older than the binding needs, or lacks functions it calls: nothing was called."""

    def __str__(self) -> str:
        return str(self.strerror)


def _mapped_path(fragment: str) -> str:
    """The file of a shared library this process has mapped, by part of its name ('' when none is)."""
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.split(maxsplit=5)[-1].strip()
                if fragment in os.path.basename(path):
                    return path
    except OSError:
        pass
    return ""


def _file_version(path: str) -> tuple[int, ...]:
    """libbpf.so.0.5.0 -> (0, 5, 0); () when the name carries no version."""
    tail = os.path.basename(path).partition(".so.")[2]
    return tuple(int(p) for p in tail.split(".") if p.isdigit())


class _LinkCreateOpts(ctypes.Structure):
    _fields_ = [
        ("sz", ctypes.c_size_t),
        ("flags", ctypes.c_uint32),
        ("iter_info", ctypes.c_void_p),
        ("iter_info_len", ctypes.c_uint32),
        ("target_btf_id", ctypes.c_uint32),
        ("union_space", ctypes.c_uint64 * 5),
    ]


class _LinkUpdateOpts(ctypes.Structure):
    _fields_ = [("sz", ctypes.c_size_t), ("flags", ctypes.c_uint32), ("old_prog_fd", ctypes.c_uint32)]


class _TestRunOpts(ctypes.Structure):
    _fields_ = [
        ("sz", ctypes.c_size_t),
        ("data_in", ctypes.c_void_p),
        ("data_out", ctypes.c_void_p),
        ("data_size_in", ctypes.c_uint32),
        ("data_size_out", ctypes.c_uint32),
        ("ctx_in", ctypes.c_void_p),
        ("ctx_out", ctypes.c_void_p),
        ("ctx_size_in", ctypes.c_uint32),
        ("ctx_size_out", ctypes.c_uint32),
        ("retval", ctypes.c_uint32),
        ("repeat", ctypes.c_int),
        ("duration", ctypes.c_uint32),
        ("flags", ctypes.c_uint32),
        ("cpu", ctypes.c_uint32),
        ("batch_size", ctypes.c_uint32),
    ]


class _XdpAttachOpts(ctypes.Structure):
    _fields_ = [("sz", ctypes.c_size_t), ("old_prog_fd", ctypes.c_int), ("pad", ctypes.c_int)]


class _ProgLoadOpts(ctypes.Structure):
    """struct bpf_prog_load_opts as of libbpf 1.1 (newer libbpf appends fields; sz tells it which we pass)."""

    _fields_ = [
        ("sz", ctypes.c_size_t),
        ("attempts", ctypes.c_int),
        ("expected_attach_type", ctypes.c_int),
        ("prog_btf_fd", ctypes.c_uint32),
        ("prog_flags", ctypes.c_uint32),
        ("prog_ifindex", ctypes.c_uint32),
        ("kern_version", ctypes.c_uint32),
        ("attach_btf_id", ctypes.c_uint32),
        ("attach_prog_fd", ctypes.c_uint32),
        ("attach_btf_obj_fd", ctypes.c_uint32),
        ("fd_array", ctypes.c_void_p),
        ("func_info", ctypes.c_void_p),
        ("func_info_cnt", ctypes.c_uint32),
        ("func_info_rec_size", ctypes.c_uint32),
        ("line_info", ctypes.c_void_p),
        ("line_info_cnt", ctypes.c_uint32),
        ("line_info_rec_size", ctypes.c_uint32),
        ("log_level", ctypes.c_uint32),
        ("log_size", ctypes.c_uint32),
        ("log_buf", ctypes.c_void_p),
    ]


class _MapBatchOpts(ctypes.Structure):
    _fields_ = [("sz", ctypes.c_size_t), ("elem_flags", ctypes.c_uint64), ("flags", ctypes.c_uint64)]


class _MapCreateOpts(ctypes.Structure):
    _fields_ = [
        ("sz", ctypes.c_size_t),
        ("btf_fd", ctypes.c_uint32),
        ("btf_key_type_id", ctypes.c_uint32),
        ("btf_value_type_id", ctypes.c_uint32),
        ("btf_vmlinux_value_type_id", ctypes.c_uint32),
        ("inner_map_fd", ctypes.c_uint32),
        ("map_flags", ctypes.c_uint32),
        ("map_extra", ctypes.c_uint64),
        ("numa_node", ctypes.c_uint32),
        ("map_ifindex", ctypes.c_uint32),
    ]


class _XdpQueryOpts(ctypes.Structure):
    _fields_ = [
        ("sz", ctypes.c_size_t),
        ("prog_id", ctypes.c_uint32),
        ("drv_prog_id", ctypes.c_uint32),
        ("hw_prog_id", ctypes.c_uint32),
        ("skb_prog_id", ctypes.c_uint32),
        ("attach_mode", ctypes.c_uint8),
        ("pad", ctypes.c_uint8 * 7),
    ]


class _ProgInfo(ctypes.Structure):
    """The prefix of struct bpf_prog_info that we read; the kernel accepts a shorter info_len."""

    _fields_ = [
        ("type", ctypes.c_uint32),
        ("id", ctypes.c_uint32),
        ("tag", ctypes.c_uint8 * BPF_TAG_SIZE),
        ("jited_prog_len", ctypes.c_uint32),
        ("xlated_prog_len", ctypes.c_uint32),
        ("jited_prog_insns", ctypes.c_uint64),
        ("xlated_prog_insns", ctypes.c_uint64),
        ("load_time", ctypes.c_uint64),
        ("created_by_uid", ctypes.c_uint32),
        ("nr_map_ids", ctypes.c_uint32),
        ("map_ids", ctypes.c_uint64),
        ("name", ctypes.c_char * BPF_OBJ_NAME_LEN),
        ("ifindex", ctypes.c_uint32),
        ("gpl_compatible", ctypes.c_uint32),
        ("netns_dev", ctypes.c_uint64),
        ("netns_ino", ctypes.c_uint64),
    ]


class _MapInfo(ctypes.Structure):
    _fields_ = [
        ("type", ctypes.c_uint32),
        ("id", ctypes.c_uint32),
        ("key_size", ctypes.c_uint32),
        ("value_size", ctypes.c_uint32),
        ("max_entries", ctypes.c_uint32),
        ("map_flags", ctypes.c_uint32),
        ("name", ctypes.c_char * BPF_OBJ_NAME_LEN),
        ("ifindex", ctypes.c_uint32),
        ("btf_vmlinux_value_type_id", ctypes.c_uint32),
        ("netns_dev", ctypes.c_uint64),
        ("netns_ino", ctypes.c_uint64),
        ("btf_id", ctypes.c_uint32),
        ("btf_key_type_id", ctypes.c_uint32),
        ("btf_value_type_id", ctypes.c_uint32),
        ("pad", ctypes.c_uint32),
        ("map_extra", ctypes.c_uint64),
    ]


class _LinkInfo(ctypes.Structure):
    """struct bpf_link_info up to its union (which starts 8-aligned at offset 16); the XDP and the tcx members both
    start with the ifindex."""

    _fields_ = [
        ("type", ctypes.c_uint32),
        ("id", ctypes.c_uint32),
        ("prog_id", ctypes.c_uint32),
        ("pad", ctypes.c_uint32),
        ("union_space", ctypes.c_uint64 * 4),
    ]

    @property
    def target_ifindex(self) -> int:
        return ctypes.c_uint32.from_buffer(self, _LinkInfo.union_space.offset).value


_PRINT_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p)


@dataclass(frozen=True)
class ProgInfo:
    id: int
    tag: str
    name: str
    type: int
    map_ids: tuple[int, ...]


@dataclass(frozen=True)
class MapInfo:
    id: int
    name: str
    type: int
    key_size: int
    value_size: int
    max_entries: int
    map_flags: int
    btf_id: int
    btf_key_type_id: int
    btf_value_type_id: int


@dataclass(frozen=True)
class LinkInfo:
    id: int
    type: int
    prog_id: int
    ifindex: int


@dataclass(frozen=True)
class XdpState:
    """What bpf_xdp_query reports for one interface."""

    mode: str
    prog_id: int
    drv_prog_id: int
    skb_prog_id: int


@dataclass(frozen=True)
class TestRunResult:
    retval: int
    duration_ns: int
    data_out: bytes | None
    ctx_out: bytes | None = None  # the context after the run, when one was given (XDP: data is the metadata length)


class _Lib:
    """The loaded libbpf with argument and return types declared once."""

    def __init__(self, soname: str = "libbpf.so.1") -> None:
        try:
            self.so = ctypes.CDLL(soname, use_errno=True)
        except OSError:  # not under its soname: wherever the linker's cache has it
            self.so = ctypes.CDLL(ctypes.util.find_library("bpf") or "libbpf.so", use_errno=True)
        self.libc = ctypes.CDLL(None, use_errno=True)
        self.messages: list[str] = []
        self._print_cb = _PRINT_FN(self._on_print)  # kept alive for as long as libbpf may call it
        vp, cp, i, u32, sz = ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int, ctypes.c_uint32, ctypes.c_size_t
        u32p = ctypes.POINTER(ctypes.c_uint32)
        decl = {
            "libbpf_set_print": (vp, [_PRINT_FN]),
            "libbpf_major_version": (u32, []),
            "libbpf_minor_version": (u32, []),
            "libbpf_num_possible_cpus": (i, []),
            "bpf_object__open_file": (vp, [cp, vp]),
            "bpf_object__load": (i, [vp]),
            "bpf_object__close": (None, [vp]),
            "bpf_object__btf": (vp, [vp]),
            "bpf_object__next_program": (vp, [vp, vp]),
            "bpf_object__next_map": (vp, [vp, vp]),
            "bpf_object__find_map_by_name": (vp, [vp, cp]),
            "bpf_program__name": (cp, [vp]),
            "bpf_program__section_name": (cp, [vp]),
            "bpf_program__fd": (i, [vp]),
            "bpf_program__set_log_buf": (i, [vp, vp, sz]),
            "bpf_program__expected_attach_type": (i, [vp]),
            "bpf_map__name": (cp, [vp]),
            "bpf_map__fd": (i, [vp]),
            "bpf_map__type": (i, [vp]),
            "bpf_map__key_size": (u32, [vp]),
            "bpf_map__value_size": (u32, [vp]),
            "bpf_map__max_entries": (u32, [vp]),
            "bpf_map__map_flags": (u32, [vp]),
            "bpf_map__is_internal": (ctypes.c_bool, [vp]),
            "bpf_map__btf_key_type_id": (u32, [vp]),
            "bpf_map__btf_value_type_id": (u32, [vp]),
            "bpf_map__initial_value": (vp, [vp, ctypes.POINTER(sz)]),
            "bpf_map__set_initial_value": (i, [vp, vp, sz]),
            "bpf_map__set_max_entries": (i, [vp, u32]),
            "bpf_map__reuse_fd": (i, [vp, i]),
            "bpf_map__set_inner_map_fd": (i, [vp, i]),
            "bpf_map_create": (i, [i, cp, u32, u32, u32, ctypes.POINTER(_MapCreateOpts)]),
            "bpf_map_lookup_elem": (i, [i, vp, vp]),
            "bpf_map_update_elem": (i, [i, vp, vp, ctypes.c_uint64]),
            "bpf_map_delete_elem": (i, [i, vp]),
            "bpf_map_get_next_key": (i, [i, vp, vp]),
            "bpf_map_lookup_batch": (i, [i, vp, vp, vp, vp, u32p, ctypes.POINTER(_MapBatchOpts)]),
            "bpf_map_update_batch": (i, [i, vp, vp, u32p, ctypes.POINTER(_MapBatchOpts)]),
            "bpf_map_delete_batch": (i, [i, vp, u32p, ctypes.POINTER(_MapBatchOpts)]),
            "bpf_obj_pin": (i, [i, cp]),
            "bpf_obj_get": (i, [cp]),
            "bpf_obj_get_info_by_fd": (i, [i, vp, u32p]),
            "bpf_prog_get_fd_by_id": (i, [u32]),
            "bpf_map_get_fd_by_id": (i, [u32]),
            "bpf_link_get_fd_by_id": (i, [u32]),
            "bpf_link_create": (i, [i, i, i, ctypes.POINTER(_LinkCreateOpts)]),
            "bpf_link_update": (i, [i, i, ctypes.POINTER(_LinkUpdateOpts)]),
            "bpf_link_detach": (i, [i]),
            "bpf_prog_test_run_opts": (i, [i, ctypes.POINTER(_TestRunOpts)]),
            "bpf_prog_load": (i, [i, cp, cp, vp, sz, ctypes.POINTER(_ProgLoadOpts)]),
            "bpf_xdp_query": (i, [i, i, ctypes.POINTER(_XdpQueryOpts)]),
            "bpf_xdp_attach": (i, [i, i, u32, ctypes.POINTER(_XdpAttachOpts)]),
            "bpf_xdp_detach": (i, [i, u32, ctypes.POINTER(_XdpAttachOpts)]),
            "btf__load_from_kernel_by_id": (vp, [u32]),
            "btf__free": (None, [vp]),
            "btf__type_by_id": (vp, [vp, u32]),
            "btf__type_cnt": (u32, [vp]),
            "btf__name_by_offset": (cp, [vp, u32]),
            "btf__find_by_name_kind": (i, [vp, cp, u32]),
        }
        self.path = soname if os.sep in soname else _mapped_path("libbpf.so")
        self._refuse_unsupported(decl)
        for name, (restype, argtypes) in decl.items():
            fn = getattr(self.so, name)
            fn.restype = restype
            fn.argtypes = argtypes
            setattr(self, name, fn)
        self.libc.vsnprintf.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_char_p, ctypes.c_void_p]
        self.libc.vsnprintf.restype = ctypes.c_int
        self._print_buf = ctypes.create_string_buffer(16384)
        self.libbpf_set_print(self._print_cb)

    def _refuse_unsupported(self, decl: dict) -> None:
        """Raise LibbpfUnsupported, naming the version found and the one needed, before any call into a libbpf
        older than LIBBPF_MIN_VERSION or without a function the binding calls."""
        missing = [name for name in decl if not hasattr(self.so, name)]
        if hasattr(self.so, "libbpf_major_version"):  # libbpf 0.6 and newer say their version
            self.so.libbpf_major_version.restype = self.so.libbpf_minor_version.restype = ctypes.c_uint32
            version: tuple[int, ...] = (self.so.libbpf_major_version(), self.so.libbpf_minor_version())
        else:
            version = _file_version(self.path)
        if version >= LIBBPF_MIN_VERSION and not missing:
            return
        found = ".".join(map(str, version)) or "of unknown version"
        needed = ".".join(map(str, LIBBPF_MIN_VERSION))
        lacks = f"; it lacks {', '.join(missing)}" if missing else ""
        raise LibbpfUnsupported(
            errno.ENOSYS,
            f"libbpf {found} ({self.path or 'libbpf.so'}) cannot be used: xdpfleet needs libbpf {needed} or newer"
            f"{lacks}. Install libbpf1 (Debian 12 and later, Ubuntu 24.04) or libbpf (EL9); Ubuntu 22.04 ships 0.5",
        )

    def _on_print(self, level: int, fmt: bytes, va_list: int) -> int:
        # libbpf passes a format and a va_list: let the C library format it. Debug chatter (level 2) is dropped.
        if level < 2:
            self.libc.vsnprintf(self._print_buf, len(self._print_buf), fmt, va_list)
            self.messages.append(self._print_buf.value.decode(errors="replace"))
        return 0

    def take_messages(self) -> str:
        text = "".join(self.messages)
        self.messages.clear()
        return text


_lib: _Lib | None = None


def lib() -> _Lib:
    global _lib
    if _lib is None:
        _lib = _Lib()
    return _lib


def _check(call: str, ret: int, detail: str = "") -> int:
    """libbpf 1.x returns -errno from int functions (and sets errno)."""
    if ret < 0:
        raise LibbpfError(call, -ret, detail or lib().take_messages())
    return ret


def _check_ptr(call: str, ptr: int | None) -> int:
    if not ptr:
        raise LibbpfError(call, ctypes.get_errno() or errno.EINVAL, lib().take_messages())
    return ptr


def libbpf_version() -> str:
    return f"{lib().libbpf_major_version()}.{lib().libbpf_minor_version()}"


def num_possible_cpus() -> int:
    return _check("libbpf_num_possible_cpus", lib().libbpf_num_possible_cpus())


def close_fd(fd: int) -> None:
    if fd >= 0:
        os.close(fd)


# ---- objects by fd: info, pins, ids -------------------------------------------------------------------------


def _info(fd: int, info: ctypes.Structure, what: str) -> ctypes.Structure:
    size = ctypes.c_uint32(ctypes.sizeof(info))
    _check(f"bpf_obj_get_info_by_fd({what})", lib().bpf_obj_get_info_by_fd(fd, ctypes.byref(info), ctypes.byref(size)))
    return info


def prog_info(fd: int) -> ProgInfo:
    info = _info(fd, _ProgInfo(), "prog")
    map_ids: tuple[int, ...] = ()
    if info.nr_map_ids:
        ids = (ctypes.c_uint32 * info.nr_map_ids)()
        with_ids = _ProgInfo(nr_map_ids=info.nr_map_ids, map_ids=ctypes.addressof(ids))
        _info(fd, with_ids, "prog map_ids")
        map_ids = tuple(ids[: with_ids.nr_map_ids])
    return ProgInfo(id=info.id, tag=bytes(info.tag).hex(), name=info.name.decode(), type=info.type, map_ids=map_ids)


def map_info(fd: int) -> MapInfo:
    info = _info(fd, _MapInfo(), "map")
    return MapInfo(
        id=info.id,
        name=info.name.decode(),
        type=info.type,
        key_size=info.key_size,
        value_size=info.value_size,
        max_entries=info.max_entries,
        map_flags=info.map_flags,
        btf_id=info.btf_id,
        btf_key_type_id=info.btf_key_type_id,
        btf_value_type_id=info.btf_value_type_id,
    )


def link_info(fd: int) -> LinkInfo:
    info = _info(fd, _LinkInfo(), "link")
    ifindex = info.target_ifindex if info.type in (BPF_LINK_TYPE_XDP, BPF_LINK_TYPE_TCX) else 0
    return LinkInfo(id=info.id, type=info.type, prog_id=info.prog_id, ifindex=ifindex)


def prog_fd_by_id(prog_id: int) -> int:
    return _check(f"bpf_prog_get_fd_by_id({prog_id})", lib().bpf_prog_get_fd_by_id(prog_id))


def map_fd_by_id(map_id: int) -> int:
    return _check(f"bpf_map_get_fd_by_id({map_id})", lib().bpf_map_get_fd_by_id(map_id))


def pin(fd: int, path: str) -> None:
    kill_points.step()
    _check(f"bpf_obj_pin({path})", lib().bpf_obj_pin(fd, path.encode()))


def unpin(path: str) -> None:
    """Remove a pin; the object lives on while other references (an attachment, an fd) hold it."""
    kill_points.step()
    try:
        os.unlink(path)
    except OSError as exc:
        raise LibbpfError(f"unpin({path})", exc.errno or errno.EIO) from None


def obj_get(path: str) -> int:
    """Open a pinned object; raises LibbpfError with ENOENT when nothing is pinned there."""
    return _check(f"bpf_obj_get({path})", lib().bpf_obj_get(path.encode()))


# ---- XDP attachment through bpf_link ------------------------------------------------------------------------


def xdp_link_create(prog_fd: int, ifindex: int, mode: str) -> int:
    """Attach an XDP program to an interface through a new bpf_link; returns the link fd."""
    kill_points.step()
    opts = _LinkCreateOpts(sz=ctypes.sizeof(_LinkCreateOpts), flags=XDP_MODE_FLAGS[mode])
    return _check(f"bpf_link_create(ifindex {ifindex}, {mode})", lib().bpf_link_create(prog_fd, ifindex, BPF_XDP, opts))


def tcx_link_create(prog_fd: int, ifindex: int) -> int:
    """Attach a tc (SCHED_CLS) program at the interface's tcx ingress through a new bpf_link; returns the link fd.
    tcx runs several programs in order: this one goes last, after any already attached."""
    kill_points.step()
    opts = _LinkCreateOpts(sz=ctypes.sizeof(_LinkCreateOpts))
    created = lib().bpf_link_create(prog_fd, ifindex, BPF_TCX_INGRESS, opts)
    return _check(f"bpf_link_create(ifindex {ifindex}, tcx ingress)", created)


def link_update(link_fd: int, new_prog_fd: int, old_prog_fd: int | None = None) -> None:
    """Swap the program behind a link atomically: the interface never runs without a program.

    With old_prog_fd the kernel refuses (EPERM) when the link no longer runs that program, so a concurrent
    change is never overwritten silently.
    """
    kill_points.step()
    opts = _LinkUpdateOpts(sz=ctypes.sizeof(_LinkUpdateOpts))
    if old_prog_fd is not None:
        opts.flags = BPF_F_REPLACE
        opts.old_prog_fd = old_prog_fd
    _check("bpf_link_update", lib().bpf_link_update(link_fd, new_prog_fd, opts))


def link_detach(link_fd: int) -> None:
    kill_points.step()
    _check("bpf_link_detach", lib().bpf_link_detach(link_fd))


def xdp_query(ifindex: int) -> XdpState:
    opts = _XdpQueryOpts(sz=ctypes.sizeof(_XdpQueryOpts))
    _check(f"bpf_xdp_query(ifindex {ifindex})", lib().bpf_xdp_query(ifindex, 0, opts))
    return XdpState(
        mode=XDP_ATTACH_MODES.get(opts.attach_mode, str(opts.attach_mode)),
        prog_id=opts.prog_id,
        drv_prog_id=opts.drv_prog_id,
        skb_prog_id=opts.skb_prog_id,
    )


def xdp_attach_netlink(ifindex: int, prog_fd: int, mode: str) -> None:
    """Attach without a link (how iproute2 and most tools attach); used only to give back a taken-over program."""
    kill_points.step()
    opts = _XdpAttachOpts(sz=ctypes.sizeof(_XdpAttachOpts))
    _check(
        f"bpf_xdp_attach(ifindex {ifindex}, {mode})", lib().bpf_xdp_attach(ifindex, prog_fd, XDP_MODE_FLAGS[mode], opts)
    )


def xdp_detach_netlink(ifindex: int, mode: str) -> None:
    """Detach a program attached through netlink; fails with EBUSY when a bpf_link owns the attachment."""
    kill_points.step()
    opts = _XdpAttachOpts(sz=ctypes.sizeof(_XdpAttachOpts))
    _check(f"bpf_xdp_detach(ifindex {ifindex}, {mode})", lib().bpf_xdp_detach(ifindex, XDP_MODE_FLAGS[mode], opts))


# ---- programs from raw instructions ------------------------------------------------------------------------

BPF_INSN_SIZE = 8


def prog_load(prog_type: int, insns: bytes, name: str, license: str = "GPL", expected_attach_type: int = 0) -> int:
    """Load a program from raw struct bpf_insn bytes (8 per instruction); returns the program fd.

    For small programs built in Python (no compiler on the host). On failure the verifier's log is in the error.
    """
    if not insns or len(insns) % BPF_INSN_SIZE:
        raise ValueError(f"prog_load({name}): {len(insns)} bytes is not a whole number of 8-byte instructions")
    so = lib()
    so.take_messages()
    code = ctypes.create_string_buffer(bytes(insns), len(insns))
    log = ctypes.create_string_buffer(VERIFIER_LOG_SIZE)
    opts = _ProgLoadOpts(sz=ctypes.sizeof(_ProgLoadOpts), expected_attach_type=expected_attach_type)
    ret = so.bpf_prog_load(prog_type, name.encode(), license.encode(), code, len(insns) // BPF_INSN_SIZE, opts)
    if ret < 0:
        # Load again with a verifier log only to explain the failure (a log on success costs time and memory).
        opts.log_level, opts.log_size, opts.log_buf = 1, len(log), ctypes.addressof(log)
        again = so.bpf_prog_load(prog_type, name.encode(), license.encode(), code, len(insns) // BPF_INSN_SIZE, opts)
        if again >= 0:
            os.close(again)
        detail = so.take_messages() + log.value.decode(errors="replace")
        raise LibbpfError(f"bpf_prog_load({name})", -ret, detail)
    return ret


# ---- running programs --------------------------------------------------------------------------------------


def prog_test_run(
    prog_fd: int,
    data: bytes,
    *,
    repeat: int = 1,
    flags: int = 0,
    batch_size: int = 0,
    ctx: bytes | None = None,
    data_out_size: int | None = None,
) -> TestRunResult:
    """BPF_PROG_RUN. With flags=BPF_F_TEST_XDP_LIVE_FRAMES the frames really go out (XDP_TX/REDIRECT)."""
    live = bool(flags & BPF_F_TEST_XDP_LIVE_FRAMES)
    data_in = ctypes.create_string_buffer(data, len(data))
    opts = _TestRunOpts(
        sz=ctypes.sizeof(_TestRunOpts),
        data_in=ctypes.addressof(data_in),
        data_size_in=len(data),
        repeat=repeat,
        flags=flags,
        batch_size=batch_size,
    )
    out = None
    if not live:  # live frames refuse data_out (EINVAL)
        out = ctypes.create_string_buffer(data_out_size or max(len(data) + 256, 4096))
        opts.data_out = ctypes.addressof(out)
        opts.data_size_out = len(out)
    ctx_buf = ctx_out = None
    if ctx is not None:
        ctx_buf = ctypes.create_string_buffer(ctx, len(ctx))
        opts.ctx_in = ctypes.addressof(ctx_buf)
        opts.ctx_size_in = len(ctx)
        if not live:
            ctx_out = ctypes.create_string_buffer(len(ctx))
            opts.ctx_out = ctypes.addressof(ctx_out)
            opts.ctx_size_out = len(ctx)
    # ctypes releases the GIL for the call, so sender threads run in parallel.
    _check("bpf_prog_test_run_opts", lib().bpf_prog_test_run_opts(prog_fd, opts))
    data_out = out.raw[: opts.data_size_out] if out is not None else None
    ctx_after = ctx_out.raw[: opts.ctx_size_out] if ctx_out is not None else None
    return TestRunResult(retval=opts.retval, duration_ns=opts.duration, data_out=data_out, ctx_out=ctx_after)


# ---- maps --------------------------------------------------------------------------------------------------


# Map types whose lookup_batch this kernel refused (devmaps have none): Map.dump() reads them one by one at once,
# without a failed syscall per map (a VTEP has thousands of member groups).
_NO_LOOKUP_BATCH: set[int] = set()


class Map:
    """A BPF map by fd, with raw-bytes access. Keys and values are bytes of exactly key_size / value_size
    (per-CPU maps: value_size rounded up to 8, times the number of possible CPUs)."""

    PERCPU_TYPES = frozenset({5, 6, 10, 21})  # PERCPU_HASH, PERCPU_ARRAY, LRU_PERCPU_HASH, PERCPU_CGROUP_STORAGE

    def __init__(self, fd: int, name: str, map_type: int, key_size: int, value_size: int, max_entries: int):
        self.fd = fd
        self.name = name
        self.type = map_type
        self.key_size = key_size
        self.value_size = value_size
        self.max_entries = max_entries

    @classmethod
    def from_fd(cls, fd: int) -> Map:
        info = map_info(fd)
        return cls(fd, info.name, info.type, info.key_size, info.value_size, info.max_entries)

    @property
    def percpu(self) -> bool:
        return self.type in self.PERCPU_TYPES

    @property
    def value_stride(self) -> int:
        return (self.value_size + 7) & ~7 if self.percpu else self.value_size

    @property
    def value_buffer_size(self) -> int:
        return self.value_stride * num_possible_cpus() if self.percpu else self.value_size

    def _key(self, key: bytes) -> ctypes.Array:
        if len(key) != self.key_size:
            raise ValueError(f"map {self.name}: key is {len(key)} bytes, the map's key_size is {self.key_size}")
        return ctypes.create_string_buffer(bytes(key), self.key_size)

    def _value(self, value: bytes) -> ctypes.Array:
        if len(value) != self.value_buffer_size:
            raise ValueError(f"map {self.name}: value is {len(value)} bytes, the map expects {self.value_buffer_size}")
        return ctypes.create_string_buffer(bytes(value), self.value_buffer_size)

    def lookup(self, key: bytes) -> bytes | None:
        value = ctypes.create_string_buffer(self.value_buffer_size)
        ret = lib().bpf_map_lookup_elem(self.fd, self._key(key), value)
        if ret == -errno.ENOENT:
            return None
        _check(f"bpf_map_lookup_elem({self.name})", ret)
        return value.raw

    def update(self, key: bytes, value: bytes, flags: int = BPF_ANY) -> None:
        kill_points.step()
        _check(
            f"bpf_map_update_elem({self.name})",
            lib().bpf_map_update_elem(self.fd, self._key(key), self._value(value), flags),
        )

    def delete(self, key: bytes) -> bool:
        """Delete one entry; False when it was not there."""
        kill_points.step()
        ret = lib().bpf_map_delete_elem(self.fd, self._key(key))
        if ret == -errno.ENOENT:
            return False
        _check(f"bpf_map_delete_elem({self.name})", ret)
        return True

    def keys(self):
        prev = None
        nxt = ctypes.create_string_buffer(self.key_size)
        while True:
            ret = lib().bpf_map_get_next_key(self.fd, prev, nxt)
            if ret == -errno.ENOENT:
                return
            _check(f"bpf_map_get_next_key({self.name})", ret)
            key = nxt.raw
            yield key
            prev = ctypes.create_string_buffer(key, self.key_size)

    def items(self):
        """Iterate (key, value); entries deleted concurrently are skipped."""
        for key in self.keys():
            value = self.lookup(key)
            if value is not None:
                yield key, value

    def lookup_batch(self, chunk: int = 256) -> list[tuple[bytes, bytes]]:
        """Read the whole map with BPF_MAP_LOOKUP_BATCH, chunk entries per syscall."""
        key_size, value_size = self.key_size, self.value_buffer_size  # once: a property per entry costs seconds
        keys = ctypes.create_string_buffer(key_size * chunk)
        values = ctypes.create_string_buffer(value_size * chunk)
        # The batch token is opaque; the kernel needs room for the largest of key and a u32 bucket index.
        token_size = max(self.key_size, 8)
        in_batch = None
        out_batch = ctypes.create_string_buffer(token_size)
        opts = _MapBatchOpts(sz=ctypes.sizeof(_MapBatchOpts))
        entries: list[tuple[bytes, bytes]] = []
        while True:
            count = ctypes.c_uint32(chunk)
            ret = lib().bpf_map_lookup_batch(self.fd, in_batch, out_batch, keys, values, ctypes.byref(count), opts)
            if ret < 0 and ret != -errno.ENOENT:
                _check(f"bpf_map_lookup_batch({self.name})", ret)
            raw_keys, raw_values = keys.raw, values.raw  # .raw copies the whole buffer: once per batch
            for n in range(count.value):
                key = raw_keys[n * key_size : (n + 1) * key_size]
                value = raw_values[n * value_size : (n + 1) * value_size]
                entries.append((key, value))
            if ret == -errno.ENOENT:  # the kernel's way of saying "that was the last batch"
                return entries
            in_batch = ctypes.create_string_buffer(out_batch.raw, token_size)

    def dump(self) -> list[tuple[bytes, bytes]]:
        """Every entry: in batches where the map type supports them, else one by one."""
        if self.type not in _NO_LOOKUP_BATCH:
            try:
                return self.lookup_batch()
            except LibbpfError as exc:
                if exc.errno not in (errno.EINVAL, errno.EOPNOTSUPP, ENOTSUPP):
                    raise
                _NO_LOOKUP_BATCH.add(self.type)
        return list(self.items())

    def update_batch(self, entries: list[tuple[bytes, bytes]], flags: int = BPF_ANY) -> None:
        if not entries:
            return
        kill_points.step()
        keys = b"".join(bytes(self._key(k).raw) for k, _v in entries)
        values = b"".join(bytes(self._value(v).raw) for _k, v in entries)
        count = ctypes.c_uint32(len(entries))
        opts = _MapBatchOpts(sz=ctypes.sizeof(_MapBatchOpts), elem_flags=flags)
        ret = lib().bpf_map_update_batch(self.fd, keys, values, ctypes.byref(count), opts)
        _check(f"bpf_map_update_batch({self.name}, {count.value} of {len(entries)} written)", ret)

    def delete_batch(self, keys: list[bytes]) -> None:
        if not keys:
            return
        kill_points.step()
        raw = b"".join(bytes(self._key(k).raw) for k in keys)
        count = ctypes.c_uint32(len(keys))
        opts = _MapBatchOpts(sz=ctypes.sizeof(_MapBatchOpts))
        ret = lib().bpf_map_delete_batch(self.fd, raw, ctypes.byref(count), opts)
        _check(f"bpf_map_delete_batch({self.name}, {count.value} of {len(keys)} deleted)", ret)

    def pin(self, path: str) -> None:
        pin(self.fd, path)


class PinnedMap(Map):
    """A map opened from a bpffs pin; owns its fd. Use as a context manager."""

    def __init__(self, path: str):
        fd = obj_get(path)
        try:
            info = map_info(fd)
        except LibbpfError:
            os.close(fd)
            raise
        super().__init__(fd, info.name, info.type, info.key_size, info.value_size, info.max_entries)
        self.info = info
        self.path = path

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> PinnedMap:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def map_create(
    map_type: int, name: str, key_size: int, value_size: int, max_entries: int, *, inner_map_fd: int = 0, flags: int = 0
) -> int:
    opts = _MapCreateOpts(sz=ctypes.sizeof(_MapCreateOpts), inner_map_fd=inner_map_fd, map_flags=flags)
    return _check(
        f"bpf_map_create({name})",
        lib().bpf_map_create(map_type, name.encode(), key_size, value_size, max_entries, opts),
    )


# ---- BPF objects (ELF files) -------------------------------------------------------------------------------


class Program:
    def __init__(self, obj: BpfObject, handle: int):
        self._obj = obj
        self.handle = handle
        self.name = lib().bpf_program__name(handle).decode()
        self.section = lib().bpf_program__section_name(handle).decode()
        self.log_buf = ctypes.create_string_buffer(VERIFIER_LOG_SIZE)
        # With a log buffer and log level 0 libbpf loads without a log and retries with one only on failure.
        lib().bpf_program__set_log_buf(handle, self.log_buf, len(self.log_buf))

    @property
    def fd(self) -> int:
        return _check(f"bpf_program__fd({self.name})", lib().bpf_program__fd(self.handle))

    def info(self) -> ProgInfo:
        return prog_info(self.fd)

    def verifier_log(self) -> str:
        return self.log_buf.value.decode(errors="replace")


class ObjectMap(Map):
    """A map of a BpfObject: its definition is readable after open, its fd after load."""

    def __init__(self, obj: BpfObject, handle: int):
        so = lib()
        self._obj = obj
        self.handle = handle
        super().__init__(
            -1,
            so.bpf_map__name(handle).decode(),
            so.bpf_map__type(handle),
            so.bpf_map__key_size(handle),
            so.bpf_map__value_size(handle),
            so.bpf_map__max_entries(handle),
        )
        self.internal = bool(so.bpf_map__is_internal(handle))
        self.map_flags = so.bpf_map__map_flags(handle)
        self.btf_key_type_id = so.bpf_map__btf_key_type_id(handle)
        self.btf_value_type_id = so.bpf_map__btf_value_type_id(handle)

    def loaded(self) -> None:
        self.fd = _check(f"bpf_map__fd({self.name})", lib().bpf_map__fd(self.handle))

    def reuse_fd(self, fd: int) -> None:
        """Make the object use an existing map (a pinned one) instead of creating its own at load."""
        _check(f"bpf_map__reuse_fd({self.name})", lib().bpf_map__reuse_fd(self.handle, fd))

    def initial_value(self) -> bytes:
        size = ctypes.c_size_t()
        ptr = _check_ptr(f"bpf_map__initial_value({self.name})", lib().bpf_map__initial_value(self.handle, size))
        return ctypes.string_at(ptr, size.value)

    def set_max_entries(self, max_entries: int) -> None:
        """Before load: size the map (e.g. to the data it will hold)."""
        _check(f"bpf_map__set_max_entries({self.name})", lib().bpf_map__set_max_entries(self.handle, max_entries))
        self.max_entries = max_entries

    def set_initial_value(self, data: bytes) -> None:
        buf = ctypes.create_string_buffer(data, len(data))
        _check(
            f"bpf_map__set_initial_value({self.name})", lib().bpf_map__set_initial_value(self.handle, buf, len(data))
        )


class BpfObject:
    """An ELF BPF object: open, adjust (.rodata constants, map reuse), load, then use programs and maps.

    Use as a context manager: closing unloads every program and map that nothing else (a pin, a link) holds.
    """

    def __init__(self, path: str):
        self.path = path
        so = lib()
        so.take_messages()
        self.handle = _check_ptr(f"bpf_object__open_file({path})", so.bpf_object__open_file(path.encode(), None))
        self.loaded = False
        self.programs: dict[str, Program] = {}
        prog = so.bpf_object__next_program(self.handle, None)
        while prog:
            p = Program(self, prog)
            self.programs[p.name] = p
            prog = so.bpf_object__next_program(self.handle, prog)
        self.maps: dict[str, ObjectMap] = {}
        m = so.bpf_object__next_map(self.handle, None)
        while m:
            om = ObjectMap(self, m)
            self.maps[om.name] = om
            m = so.bpf_object__next_map(self.handle, m)

    @property
    def btf(self) -> int:
        """The object's BTF (a libbpf struct btf *), owned by the object."""
        return _check_ptr(f"bpf_object__btf({self.path})", lib().bpf_object__btf(self.handle))

    def internal_map(self, section: str) -> ObjectMap:
        """The map libbpf made for a data section such as .rodata (named '<obj>.rodata', truncated)."""
        handle = lib().bpf_object__find_map_by_name(self.handle, section.encode())
        if not handle:
            raise LibbpfError(f"bpf_object__find_map_by_name({section})", errno.ENOENT, f"{self.path} has no {section}")
        return next(m for m in self.maps.values() if m.handle == handle)

    def load(self) -> None:
        so = lib()
        so.take_messages()
        ret = so.bpf_object__load(self.handle)
        if ret < 0:
            details = [so.take_messages().rstrip()]
            for p in self.programs.values():
                log = p.verifier_log().strip()
                if log:
                    details.append(f"verifier log of program {p.name}:\n{log}")
            raise LibbpfError(f"bpf_object__load({self.path})", -ret, "\n".join(d for d in details if d))
        self.loaded = True
        for m in self.maps.values():
            m.loaded()

    def program(self, name: str | None = None) -> Program:
        if name is None:
            if len(self.programs) != 1:
                raise ValueError(
                    f"{self.path} has {len(self.programs)} programs ({', '.join(self.programs)}): name one"
                )
            return next(iter(self.programs.values()))
        try:
            return self.programs[name]
        except KeyError:
            raise ValueError(f"{self.path} has no program {name!r}; it has: {', '.join(self.programs)}") from None

    def map(self, name: str) -> ObjectMap:
        try:
            return self.maps[name]
        except KeyError:
            raise ValueError(f"{self.path} has no map {name!r}; it has: {', '.join(self.maps)}") from None

    def close(self) -> None:
        if self.handle:
            lib().bpf_object__close(self.handle)
            self.handle = 0
            for m in self.maps.values():
                m.fd = -1

    def __enter__(self) -> BpfObject:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
