"""Network block devices for the integration tests (test_nbd, test_rbd, test_model --device):
real servers, started and torn down here, and the helpers those tests share.

  Nbdkit        nbdkit (Debian's) serving a plugin through filters on a unix socket or on
                127.0.0.1:PORT, as a child process that can be killed (SIGKILL: the server gone
                mid-request) and started again on the same socket and backing file
  QemuNbd       qemu-nbd serving a raw image file on a unix socket (persistent: reconnects work)
  CephCluster   a one-node Ceph cluster in a private directory (ceph-mon, ceph-mgr, one ceph-osd
                on memstore, pool "rbd"), its own ceph.conf and keyring, on 127.0.0.1 only
  NbdDevice, QemuNbdDevice, RbdDevice
                what test_model --device uses: attach(img) serves a freshly made image and gives
                the IMAGE argument for f2fuse, sync_back(img) brings the device's bytes back into
                img for fsck.f2fs, close() stops everything

Everything listens on loopback or a unix socket; every server is stopped by close(), and the
children die with the test (nbdkit --exit-with-parent; the Ceph daemons are killed by pid).
"""
import os
import shutil
import signal
import socket
import subprocess
import hashlib
import re
import threading
import time

import f2test as T


def have(*tools):
    return all(shutil.which(t) for t in tools)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def _wait_socket(path, proc, timeout=20):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        if os.path.exists(path):
            try:
                s = socket.socket(socket.AF_UNIX)
                s.connect(path)
                s.close()
                return True
            except OSError:
                pass
        time.sleep(0.02)
    return False


def _wait_tcp(port, proc, timeout=20):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return True
        except OSError:
            time.sleep(0.02)
    return False


class ServerFailed(Exception):
    pass


class Nbdkit:
    """nbdkit PLUGIN ARGS... with --filter=F for each filter, on a unix socket in wd (or TCP)."""

    def __init__(self, wd, plugin, args=(), filters=(), tcp=False, extra=(), name="nbdkit"):
        self.wd, self.plugin, self.args, self.filters = wd, plugin, list(args), list(filters)
        self.tcp, self.extra, self.name = tcp, list(extra), name
        self.sock = os.path.join(wd, name + ".sock")
        self.port = free_port() if tcp else None
        self.log = os.path.join(wd, name + ".log")
        self.proc = None

    def uri(self, export=""):
        if self.tcp:
            return "nbd://127.0.0.1:%d/%s" % (self.port, export)
        return "nbd+unix:///%s?socket=%s" % (export, self.sock)

    def start(self):
        if os.path.exists(self.sock):
            os.unlink(self.sock)
        where = ["-i", "127.0.0.1", "-p", str(self.port)] if self.tcp else ["-U", self.sock]
        argv = (["nbdkit", "-f", "--exit-with-parent"] + where + self.extra +
                ["--filter=" + f for f in self.filters] + [self.plugin] + self.args)
        with open(self.log, "ab") as lf:
            self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=lf, stderr=lf)
        ok = _wait_tcp(self.port, self.proc) if self.tcp else _wait_socket(self.sock, self.proc)
        if not ok:
            self.stop()
            raise ServerFailed("nbdkit did not start: %s\n%s" % (" ".join(argv),
                                                                T.tail(T._read(self.log), 8)))
        return self

    def kill(self):
        """The server dies at once (SIGKILL), with whatever is in flight."""
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)
        self.proc = None

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.send_signal(signal.SIGKILL)
                self.proc.wait(10)
        self.proc = None

    def restart(self):
        self.kill()
        return self.start()

    def __enter__(self):
        return self.start()

    def __exit__(self, *a):
        self.stop()


class QemuNbd:
    """qemu-nbd serving a raw file on a unix socket; persistent, so a client may reconnect."""

    def __init__(self, wd, img, name="qemu-nbd", export="f2fs"):
        self.wd, self.img, self.name, self.export = wd, img, name, export
        self.sock = os.path.join(wd, name + ".sock")
        self.log = os.path.join(wd, name + ".log")
        self.proc = None

    def uri(self):
        return "nbd+unix:///%s?socket=%s" % (self.export, self.sock)

    def start(self):
        if os.path.exists(self.sock):
            os.unlink(self.sock)
        argv = ["qemu-nbd", "-f", "raw", "-k", self.sock, "-x", self.export, "-t",
                "--cache=writeback", "--discard=unmap", self.img]
        with open(self.log, "ab") as lf:
            self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=lf, stderr=lf)
        if not _wait_socket(self.sock, self.proc):
            self.stop()
            raise ServerFailed("qemu-nbd did not start:\n%s" % T.tail(T._read(self.log), 8))
        return self

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.send_signal(signal.SIGKILL)
                self.proc.wait(10)
        self.proc = None


# ------------------------------------------------------------------------------------------------
# Ceph

CEPH_TOOLS = ("ceph-mon", "ceph-mgr", "ceph-osd", "ceph", "ceph-authtool", "monmaptool", "rbd")
CEPH_CONF = """[global]
fsid = {fsid}
mon host = v1:127.0.0.1:{port}
public network = 127.0.0.0/8
auth cluster required = cephx
auth service required = cephx
auth client required = cephx
osd pool default size = 1
osd pool default min size = 1
osd crush chooseleaf type = 0
mon allow pool size one = true
mon allow pool delete = true
mon warn on pool no redundancy = false
mon data avail warn = 1
mon data avail crit = 0
{store}
run dir = {d}/run
admin socket = {d}/run/$name.asok
log file = {d}/log/$name.log
pid file = {d}/run/$name.pid
keyring = {d}/keyring
ms bind ipv6 = false
ms bind msgr2 = false
[mon]
mon data = {d}/mon/$cluster-$id
[osd]
osd data = {d}/osd/$cluster-$id
keyring = {d}/osd/$cluster-$id/keyring
osd max object name len = 460
osd max object namespace len = 64
[mgr]
mgr data = {d}/mgr/$cluster-$id
keyring = {d}/mgr/$cluster-$id/keyring
"""


# memstore keeps the OSD's objects in its memory (fast to start, gone with the process);
# bluestore on a file survives an OSD restart (what the fault tests need), ~4 s slower to start.
STORES = {
    "memstore": "osd objectstore = memstore\nmemstore device bytes = {osd_bytes}",
    "bluestore": "osd objectstore = bluestore\nbluestore block path = {d}/osd/$cluster-$id/block.file\n"
                 "bluestore block create = true\nbluestore block size = {osd_bytes}\n"
                 "bluestore fsck on mkfs = false\nbluestore cache size = 134217728",
}


class CephCluster:
    """A one-node cluster under d: start() raises ServerFailed (with the reason) when it does not
    come up within timeout seconds; stop() kills the daemons and removes everything."""

    def __init__(self, d, osd_bytes=1 << 30, timeout=90, store="memstore"):
        self.d, self.osd_bytes, self.timeout, self.store = d, osd_bytes, timeout, store
        self.conf = os.path.join(d, "ceph.conf")
        self.keyring = os.path.join(d, "keyring")
        self.port = free_port()
        self.started = []

    def _run(self, argv, timeout=None):
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise ServerFailed("the cluster did not come up within %ds" % self.timeout)
        try:
            p = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, timeout=min(left, timeout or left))
        except subprocess.TimeoutExpired:
            raise ServerFailed("%s did not finish within the time limit (%ds)" %
                               (" ".join(argv[:3]), self.timeout))
        out = p.stdout.decode("utf-8", "replace")
        if p.returncode != 0:
            raise ServerFailed("%s exited %d: %s" % (" ".join(argv[:4]), p.returncode,
                                                     T.tail(out, 6)))
        return out.strip()

    def ceph(self, *args):
        return self._run(["ceph", "-c", self.conf] + list(args), timeout=60)

    def rbd(self, *args, timeout=120):
        self.deadline = max(self.deadline, time.monotonic() + timeout)
        quiet = ["--no-progress"] if args[0] in ("import", "export") else []
        return self._run(["rbd", "-c", self.conf] + quiet + list(args), timeout=timeout)

    def start(self):
        t0 = time.monotonic()
        self.deadline = t0 + self.timeout
        d = self.d
        for sub in ("mon", "osd/ceph-0", "mgr/ceph-x", "run", "log"):
            os.makedirs(os.path.join(d, sub), exist_ok=True)
        fsid = open("/proc/sys/kernel/random/uuid").read().strip()
        store = STORES[self.store].format(d=d, osd_bytes=self.osd_bytes)
        with open(self.conf, "w") as f:
            f.write(CEPH_CONF.format(fsid=fsid, port=self.port, d=d, store=store))
        self._run(["ceph-authtool", "--create-keyring", self.keyring, "--gen-key", "-n", "mon.",
                   "--cap", "mon", "allow *"])
        self._run(["ceph-authtool", self.keyring, "--gen-key", "-n", "client.admin",
                   "--cap", "mon", "allow *", "--cap", "osd", "allow *", "--cap", "mgr", "allow *"])
        monmap = os.path.join(d, "monmap")
        self._run(["monmaptool", "--create", "--addv", "a", "[v1:127.0.0.1:%d]" % self.port,
                   "--fsid", fsid, monmap])
        self._run(["ceph-mon", "-c", self.conf, "--mkfs", "-i", "a", "--monmap", monmap,
                   "--keyring", self.keyring])
        self._daemon(["ceph-mon", "-c", self.conf, "-i", "a"], "mon.a")
        self.ceph("auth", "get-or-create", "mgr.x", "mon", "allow profile mgr", "osd", "allow *",
                  "-o", os.path.join(d, "mgr/ceph-x/keyring"))
        self._daemon(["ceph-mgr", "-c", self.conf, "-i", "x"], "mgr.x")
        uuid = open("/proc/sys/kernel/random/uuid").read().strip()
        osd = self.ceph("osd", "new", uuid)
        self.ceph("auth", "get-or-create", "osd." + osd, "mon", "allow profile osd", "mgr",
                  "allow profile osd", "osd", "allow *", "-o",
                  os.path.join(d, "osd/ceph-%s/keyring" % osd))
        self._run(["ceph-osd", "-c", self.conf, "-i", osd, "--mkfs", "--osd-uuid", uuid])
        self.osd = osd
        self._daemon(["ceph-osd", "-c", self.conf, "-i", osd], "osd." + osd)
        self.ceph("osd", "pool", "create", "rbd", "8")
        self._run(["rbd", "-c", self.conf, "pool", "init", "rbd"])
        self.secs = time.monotonic() - t0
        return self

    def _daemon(self, argv, name):
        self._run(argv)  # forks into the background once it is up
        self.started.append(os.path.join(self.d, "run", name + ".pid"))

    def kill_osd(self):
        """The OSD dies at once (SIGKILL) with whatever is in flight."""
        pidfile = os.path.join(self.d, "run", "osd.%s.pid" % self.osd)
        pid = int(open(pidfile).read().strip())
        os.kill(pid, signal.SIGKILL)
        for _ in range(200):
            try:
                os.kill(pid, 0)
            except OSError:
                return
            time.sleep(0.05)

    def start_osd(self):
        self.deadline = time.monotonic() + self.timeout
        self._run(["ceph-osd", "-c", self.conf, "-i", self.osd])

    def stop(self):
        for pidfile in reversed(self.started):
            try:
                pid = int(open(pidfile).read().strip())
                os.kill(pid, signal.SIGKILL)
            except (OSError, ValueError):
                pass
        self.started = []
        shutil.rmtree(self.d, ignore_errors=True)

    def __enter__(self):
        try:
            return self.start()
        except Exception:
            self.stop()
            raise

    def __exit__(self, *a):
        self.stop()


# ------------------------------------------------------------------------------------------------
# devices for test_model --device

class NbdDevice:
    """nbdkit's file plugin serving the image file itself: fsck.f2fs reads the same file."""

    def __init__(self, wd):
        self.server = None
        self.wd = wd

    def attach(self, img):
        self.server = Nbdkit(self.wd, "file", [img], name="model-nbd").start()
        return self.server.uri()

    def opts(self):
        return ""

    def sync_back(self, img):
        pass

    def close(self):
        if self.server:
            self.server.stop()


class QemuNbdDevice(NbdDevice):
    def attach(self, img):
        self.server = QemuNbd(self.wd, img, name="model-qemu").start()
        return self.server.uri()


class RbdDevice:
    """The image imported into a one-node cluster (one per device); exported back for fsck."""

    def __init__(self, wd):
        self.wd = wd
        self.cluster = CephCluster(os.path.join(wd, "ceph"))

    def attach(self, img):
        self.cluster.__enter__()
        self.cluster.rbd("import", img, "rbd/model")
        return "rbd:rbd/model"

    def opts(self):
        return "conf=" + self.cluster.conf

    def sync_back(self, img):
        os.unlink(img)
        self.cluster.rbd("export", "rbd/model", img)

    def close(self):
        self.cluster.stop()


DEVICES = {"nbd": NbdDevice, "qemu-nbd": QemuNbdDevice, "rbd": RbdDevice}
DEVICE_TOOLS = {"nbd": ("nbdkit",), "qemu-nbd": ("qemu-nbd",), "rbd": CEPH_TOOLS}


# ------------------------------------------------------------------------------------------------
# what test_nbd and test_rbd share

def run(argv, timeout=120, env=None):
    try:
        p = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, timeout=timeout, env=env)
        return p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")
    except subprocess.TimeoutExpired:
        return None, "", "timed out after %ds" % timeout


def stats(binary, mnt):
    rc, out, _ = run([binary, "stat", mnt], timeout=20)
    res = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit():
            res[parts[0]] = int(parts[1])
    return res


def sha(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def fsck_clean(chk, img, what):
    clean, rc, out = T.fsck(img)
    chk.check(clean, "%s: fsck.f2fs -f is not clean (exit %s):\n    %s" %
              (what, rc, "\n    ".join(T.fsck_odd_lines(out, 10))))
    return clean


def make_tree(root, rng, nfiles=24):
    """A small tree: files of 0 B to 300 KiB, nested directories, a symlink; {rel: bytes}."""
    files = {}
    for d in ("a", "a/b", "c"):
        os.makedirs(os.path.join(root, d), exist_ok=True)
    for i in range(nfiles):
        rel = "%s/f%02d" % (rng.choice(["a", "a/b", "c", "."]), i)
        data = rng.randbytes(rng.choice([0, 1, 100, 4096, 5000, 65536, 300 * 1024]))
        with open(os.path.join(root, rel), "wb") as f:
            f.write(data)
        files[os.path.normpath(rel)] = data
    os.symlink("a/b", os.path.join(root, "link"))
    return files


def check_files(chk, mnt, files, what):
    bad = 0
    for rel, data in sorted(files.items()):
        try:
            with open(os.path.join(mnt, rel), "rb") as f:
                got = f.read()
        except OSError as e:
            got = e
        if got != data:
            bad += 1
            if bad <= 5:
                chk.fail("%s: %s: %s" % (what, rel, got if isinstance(got, OSError) else
                                         "%d bytes differ from the %d written" % (len(got), len(data))))
    return bad == 0


def write_files(mnt, files, fsync=True):
    for rel, data in files.items():
        os.makedirs(os.path.dirname(os.path.join(mnt, rel)), exist_ok=True)
        fd = os.open(os.path.join(mnt, rel), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, data)
            if fsync:
                os.fsync(fd)
        finally:
            os.close(fd)


class KilledMount(T.Mount):
    """A mount whose daemon the test kills on purpose (a power cut): that death is no failure."""

    def _fail(self, msg):
        if "signal 9" not in msg:
            T.Mount._fail(self, msg)


class Writer(threading.Thread):
    """Creates, writes and fsyncs files until a call fails; durable = what fsync returned 0 for."""

    def __init__(self, mnt, rng):
        threading.Thread.__init__(self, daemon=True)
        self.mnt, self.rng = mnt, rng
        self.durable, self.error, self.count = {}, None, 0
        self.stop = False

    def run(self):
        try:
            i = 0
            while i < 100000 and not self.stop:
                rel = "w%d/f%05d" % (i % 4, i)
                data = self.rng.randbytes(self.rng.choice([100, 4096, 40000, 300000]))
                os.makedirs(os.path.join(self.mnt, os.path.dirname(rel)), exist_ok=True)
                fd = os.open(os.path.join(self.mnt, rel), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                try:
                    os.write(fd, data)
                    if i % 3 == 2:
                        # a directory fsync: a checkpoint, so later files fsync the fast way
                        dfd = os.open(os.path.join(self.mnt, os.path.dirname(rel)), os.O_RDONLY)
                        try:
                            os.fsync(dfd)
                        finally:
                            os.close(dfd)
                    os.fsync(fd)
                finally:
                    os.close(fd)
                self.durable[rel] = data
                self.count = i = i + 1
        except OSError as e:
            self.error = e


def refused(c, argv, want, what, timeout=60):
    for a in argv[2:]:
        if a.startswith(c.wd) and os.path.basename(a).startswith("mnt"):
            os.makedirs(a, exist_ok=True)
    t0 = time.monotonic()
    rc, out, err = run(argv, timeout=timeout)
    secs = time.monotonic() - t0
    ok = rc not in (0, None) and re.search(want, err) is not None and "Sanitizer" not in err
    c.chk.check(ok, "%s: exit %s after %.1fs, expected /%s/ in:\n    %s" %
                (what, rc, secs, want, "\n    ".join(err.strip().splitlines()[-4:])))
    if ok:
        line = [l for l in err.strip().splitlines() if re.search(want, l)] or [err.strip()]
        T.log("   %-27s %.1fs: %s" % (what, secs, line[0][:160]))
