# Make `import tierfs` find python/ without installing it.
import os
import subprocess
import sys
import time

import pytest

TOP = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
sys.path.insert(0, os.path.join(TOP, "python"))


def mounted(path):
    """path is a mount point here, whether or not its daemon still answers
    (os.path.ismount stats it, and a dead FUSE mount says ENOTCONN)."""
    with open("/proc/self/mountinfo") as f:
        return any(line.split()[4] == str(path) for line in f)


@pytest.fixture
def tierfs_mount(tmp_path):
    """A real tierfs of its own (TIERFS_BIN, as tests/run sets it, or
    build/fs/tierfs) on tmp_path/mnt: sim device, 64M device and host
    limits, the disk tier in tmp_path/spill. Unmounted afterwards. A missing
    daemon fails the test; a machine without FUSE skips it."""
    binary = os.environ.get("TIERFS_BIN") or os.path.join(TOP, "build", "fs", "tierfs")
    assert os.access(binary, os.X_OK), \
        f"no tierfs at {binary}: build it, or set TIERFS_BIN"
    if not os.path.exists("/dev/fuse"):
        pytest.skip("no /dev/fuse on this machine")
    mnt, spill = tmp_path / "mnt", tmp_path / "spill"
    mnt.mkdir()
    spill.mkdir()
    log_path = tmp_path / "tierfs.log"
    opts = f"disk_path={spill},device_backend=sim,device_limit=64M,host_limit=64M"
    with open(log_path, "w") as log:
        daemon = subprocess.Popen([binary, str(mnt), "-f", "-o", opts], stderr=log)
    try:
        deadline = time.monotonic() + 10
        while not os.path.ismount(mnt) and daemon.poll() is None \
                and time.monotonic() < deadline:
            time.sleep(0.05)
        assert os.path.ismount(mnt), \
            "tierfs did not mount: " + log_path.read_text()
        yield str(mnt)
    finally:
        if mounted(mnt):
            if subprocess.run(["fusermount3", "-u", str(mnt)]).returncode:
                subprocess.run(["fusermount3", "-uz", str(mnt)])
        try:
            daemon.wait(timeout=60)
        except subprocess.TimeoutExpired:
            daemon.kill()
            daemon.wait()
