"""Runs inside a unit: tries each step of argv[1] (JSON) and prints one JSON line per step.

Steps: {"run": argv} runs a program (result: rc and output, or the errno of a refused exec);
{"fexec": path} execs an O_PATH descriptor of path (execveat(fd, "", AT_EMPTY_PATH));
{"procfd": path} execs /proc/self/fd/N of an O_PATH descriptor; {"read": path} opens and
reads a file; {"write": path} creates and writes one; {"memfd": true} calls memfd_create;
{"tmpfile_exec": dir, "bytes": file} writes the bytes of file into an O_TMPFILE in dir and
execs its descriptor;
{"memfd_exec": file} copies file's bytes into a memfd and execs it; {"loop": paths,
"count": n} runs the paths in turn n times and counts what each run printed (or its errno);
{"syscall": name} tries unshare(CLONE_NEWUSER) / mount of a tmpfs.
{"map_files_exec": file, "kind": "anon" | "sysv"} fills anonymous shared memory (or a SysV
segment) with file's bytes, reopens it through /proc/self/map_files and execs that;
{"shm_exec": file} writes file's bytes to a new POSIX shared memory object (/dev/shm) and
execs it; {"getfd_exec": pid, "fd": n} takes descriptor n of process pid (pidfd_getfd) and
execs it; {"fd_exec": n} execs the inherited descriptor n.
Results that fail before the exec name their "stage". A file of bytes whose name ends in
".hex" holds them as hex: how bytes a guard denies reach a unit that cannot open them.
"""

from __future__ import annotations

import ctypes
import json
import mmap
import os
import subprocess
import sys

_libc = ctypes.CDLL(None, use_errno=True)


def _fork_exec(target: object, argv: list[str], keep: int) -> dict[str, object]:
    """Exec ``target`` (a path or a descriptor) in a child; its output or the errno."""
    r, w = os.pipe()
    out_r, out_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        os.close(out_r)
        os.dup2(out_w, 1)
        try:
            os.execve(target, argv, dict(os.environ))  # type: ignore[arg-type]
        except OSError as exc:
            os.write(w, str(exc.errno).encode())
        os._exit(127)
    os.close(w)
    os.close(out_w)
    err = os.read(r, 64)
    out = b""
    while chunk := os.read(out_r, 65536):
        out += chunk
    os.close(r)
    os.close(out_r)
    _, status = os.waitpid(pid, 0)
    if err:
        return {"errno": int(err)}
    return {"rc": os.waitstatus_to_exitcode(status), "out": out.decode()}


def _data(path: object) -> bytes:
    """The bytes a step names (see the module docstring for ``.hex``)."""
    with open(str(path), "rb") as f:
        raw = f.read()
    return bytes.fromhex(raw.decode()) if str(path).endswith(".hex") else raw


def _map_files_exec(data: bytes, kind: str) -> dict[str, object]:
    """Shared memory holding ``data`` (never a file of any mount), reopened through
    /proc/self/map_files and executed."""
    size = (len(data) + 4095) // 4096 * 4096
    if kind == "anon":
        region = mmap.mmap(-1, size, flags=mmap.MAP_SHARED | mmap.MAP_ANONYMOUS)
        region[:len(data)] = data
        addr = ctypes.addressof(ctypes.c_char.from_buffer(region))
    else:
        _libc.shmat.restype = ctypes.c_void_p
        _libc.shmat.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_int]
        shm = _libc.shmget(0, size, 0o1000 | 0o700)  # IPC_PRIVATE, IPC_CREAT
        if shm < 0:
            return {"errno": ctypes.get_errno(), "stage": "shmget"}
        addr = _libc.shmat(shm, None, 0)
        ctypes.memmove(addr, data, len(data))
        _libc.shmctl(shm, 0, None)  # IPC_RMID: gone once detached
    with open("/proc/self/maps") as f:
        for line in f:
            lo, hi = (int(x, 16) for x in line.split()[0].split("-"))
            if lo <= addr < hi:
                break
    try:
        fd = os.open(f"/proc/self/map_files/{lo:x}-{hi:x}", os.O_RDONLY)
    except OSError as exc:
        return {"errno": exc.errno, "stage": "map_files"}
    res = _fork_exec(fd, ["shared-memory"], fd)
    os.close(fd)
    return res


def _getfd(pid: int, n: int) -> int:
    """Descriptor ``n`` of process ``pid``, through a pidfd (pidfd_open, pidfd_getfd)."""
    nr = {"x86_64": (434, 438), "aarch64": (434, 438)}[os.uname().machine]
    pidfd = _libc.syscall(nr[0], pid, 0)
    if pidfd < 0:
        raise OSError(ctypes.get_errno(), "pidfd_open")
    fd = _libc.syscall(nr[1], pidfd, n, 0)
    os.close(pidfd)
    if fd < 0:
        raise OSError(ctypes.get_errno(), "pidfd_getfd")
    return fd


def step(s: dict[str, object]) -> dict[str, object]:
    if "run" in s:
        try:
            p = subprocess.run(s["run"], capture_output=True, text=True, timeout=30)  # type: ignore[arg-type]
        except OSError as exc:
            return {"errno": exc.errno}
        return {"rc": p.returncode, "out": p.stdout, "err": p.stderr}
    if "fexec" in s or "procfd" in s:
        path = str(s.get("fexec") or s.get("procfd"))
        fd = os.open(path, os.O_PATH)
        target: object = fd if "fexec" in s else f"/proc/self/fd/{fd}"
        res = _fork_exec(target, [path], fd)
        os.close(fd)
        return res
    if "read" in s:
        try:
            with open(str(s["read"]), "rb") as f:
                return {"read": len(f.read())}
        except OSError as exc:
            return {"errno": exc.errno}
    if "write" in s:
        try:
            with open(str(s["write"]), "w") as f:
                f.write("output\n")
            return {"ok": True}
        except OSError as exc:
            return {"errno": exc.errno}
    if "memfd" in s:
        try:
            os.close(os.memfd_create("x"))
            return {"ok": True}
        except OSError as exc:
            return {"errno": exc.errno}
    if "memfd_exec" in s:
        data = _data(s["memfd_exec"])
        try:
            fd = os.memfd_create("code", 0)
        except OSError as exc:
            return {"errno": exc.errno, "stage": "memfd_create"}
        os.write(fd, data)
        res = _fork_exec(fd, ["memfd"], fd)
        os.close(fd)
        return res
    if "loop" in s:
        counts: dict[str, int] = {}
        for i in range(int(s["count"])):  # type: ignore[call-overload]
            path = s["loop"][i % len(s["loop"])]  # type: ignore[index]
            try:
                p = subprocess.run([path], capture_output=True, text=True, timeout=30)
                key = p.stdout.strip() or f"rc={p.returncode}"
            except OSError as exc:
                key = f"errno={exc.errno}"
            counts[key] = counts.get(key, 0) + 1
        return {"counts": counts}
    if "tmpfile_exec" in s:
        data = _data(s["bytes"])
        fd = os.open(str(s["tmpfile_exec"]), os.O_TMPFILE | os.O_RDWR, 0o755)
        os.write(fd, data)
        # A descriptor open for writing cannot be executed (ETXTBSY): exec a path-only
        # descriptor of the same nameless file instead.
        path_fd = os.open(f"/proc/self/fd/{fd}", os.O_PATH)
        os.close(fd)
        res = _fork_exec(path_fd, ["tmpfile"], path_fd)
        os.close(path_fd)
        return res
    if "map_files_exec" in s:
        return _map_files_exec(_data(s["map_files_exec"]), str(s["kind"]))
    if "shm_exec" in s:
        data = _data(s["shm_exec"])
        path = f"/dev/shm/fleet-route-{os.getpid()}"
        try:
            fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o755)
            os.write(fd, data)
            os.close(fd)
        except OSError as exc:
            return {"errno": exc.errno, "stage": "shm_open"}
        try:
            return _fork_exec(path, [path], -1)
        finally:
            os.unlink(path)
    if "getfd_exec" in s:
        try:
            fd = _getfd(int(s["getfd_exec"]), int(s["fd"]))  # type: ignore[call-overload]
        except OSError as exc:
            return {"errno": exc.errno, "stage": "pidfd_getfd"}
        res = _fork_exec(fd, ["taken"], fd)
        os.close(fd)
        return res
    if "fd_exec" in s:
        return _fork_exec(int(s["fd_exec"]), ["inherited"], -1)  # type: ignore[call-overload]
    if "syscall" in s:
        libc = ctypes.CDLL(None, use_errno=True)
        if s["syscall"] == "unshare":
            rc = libc.unshare(0x10000000)  # CLONE_NEWUSER
        else:
            rc = libc.mount(b"x", b"/mnt", b"tmpfs", 0, None)
        return {"ok": True} if rc == 0 else {"errno": ctypes.get_errno()}
    raise ValueError(f"unknown step {s}")


if __name__ == "__main__":
    for s in json.loads(sys.argv[1]):
        print(json.dumps(step(s)), flush=True)
