#!/usr/bin/env python3
"""The failure paths of the daemon and the CLI, each case of issue 46 as a
user meets it: no silent stall, no hang, nothing left behind.

1. A publisher whose gossip record is full: the publish that cannot be
   announced fails naming the limit; what fits still reaches the workers;
   the daemon does not spin. Sixteen unreleased versions and a 128-byte
   name: the newest go in, the oldest drop out of the record.
2. A fetch into a full file system (a 1 MiB tmpfs, where one can be
   mounted) fails at once naming ENOSPC, and leaves the file system empty.
3. A failed fetch retried at once fails again promptly, then succeeds once
   a holder exists again; SIGTERM then ends the daemon within seconds.
4. --out refuses a FIFO, a symbolic link, a directory and a device.
5. A hold directory another user may write, or that another user owns, is
   refused at start; a new one is made mode 0700.
6. A daemon killed mid-fetch leaves a temporary file; the restarted daemon
   removes it.
7. Model names and paths that are not UTF-8: a one-line refusal for the
   name, and paths that work.
9. fetch --timeout through the daemon: exits in time, the fetch is
   cancelled, no temporary file stays.
10. The control protocol answers oversized, unterminated and idle requests
   with a line, refuses NUL bytes and relative paths; --listen on port
   65535 is refused; exit codes follow docs/cli.md; a 250-byte output name
   works; a worker whose only source sends bad shards names that holder.
(8, Python's options, is in tests/python.)

Usage: test_failure_paths.py PATH/TO/tensorhub [CASE...]   (default: every case)
"""
import os
import signal
import stat
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peer_processes import Swarm, control_raw, cpu_seconds, wait_for  # noqa: E402

LONG = "model-0{}-abcdefghijklmnopqrstuvwxyz0123"


def verified_head(swarm, name, model):
    """The newest version of `model` whose manifest the daemon verified."""
    s = swarm.status(name)
    return s["heads"].get(model, {}).get("version") if s else None


def partials(directory):
    return [n for n in os.listdir(directory) if ".partial-" in n]


def case_record_full(swarm, small):
    pub, worker = "pub", "w1"
    published = []
    for n in range(1, 7):
        out = swarm.publish(pub, LONG.format(n), small)
        if out.returncode != 0:
            assert out.returncode == 2, (out.returncode, out.stderr)
            assert "resource exhausted" in out.stderr and "1100 bytes" in out.stderr, out.stderr
            print(f"1. the publish of model {n} is refused: {out.stderr.strip()}")
            break
        published.append(LONG.format(n))
    assert len(published) == 5, published
    wait_for("the worker to learn the five heads that fit",
             lambda: all(swarm.head(worker, m) == 1 for m in published), 20)
    record = swarm.status(pub)["self"]["record"]
    assert record["bytes"] <= record["limit_bytes"] == 1100, record
    before, t0 = cpu_seconds(swarm.procs[pub].pid), time.monotonic()
    time.sleep(2)
    share = (cpu_seconds(swarm.procs[pub].pid) - before) / (time.monotonic() - t0)
    assert share < 0.3, f"the publisher uses {share:.0%} of a core with a full record"
    print(f"1. five heads reached the worker; the record holds {record['bytes']} bytes; the publisher uses "
          f"{share:.0%} of a core")
    # Sixteen unreleased versions and a 128-byte name, from another publisher.
    for _ in range(16):
        out = swarm.publish("pub2", "m", small)
        assert out.returncode == 0, out.stderr
    long_name = "n" * 128
    out = swarm.publish("pub2", long_name, small)
    assert out.returncode == 0, out.stderr
    wait_for("the worker to learn the 128-byte model and m v16",
             lambda: swarm.head(worker, long_name) == 1 and swarm.head(worker, "m") == 16, 20)
    record = swarm.status("pub2")["self"]["record"]
    assert record["holdings_left_out"] > 0 and record["heads_left_out"] == 0, record
    print(f"1. sixteen versions and a 128-byte name: the heads go out, {record['holdings_left_out']} old "
          f"versions are left out of the record")


def case_full_disk(swarm, big, workdir):
    mount = os.path.join(workdir, "tiny")
    os.mkdir(mount)
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", mount], capture_output=True).returncode != 0:
        print("2. skipped: no tmpfs can be mounted here")
        return
    try:
        out = swarm.publish("pub", "big", big)
        assert out.returncode == 0, out.stderr
        wait_for("the worker to learn big", lambda: swarm.head("w1", "big") == 1, 20)
        t0 = time.monotonic()
        out = swarm.fetch("w1", os.path.join(mount, "big.safetensors"), model="big", timeout=60,
                          extra=("--timeout", "30"))
        took = time.monotonic() - t0
        assert out.returncode == 2, (out.returncode, out.stderr)
        assert "No space left on device" in out.stderr, out.stderr
        assert took < 10, f"the fetch into a full file system took {took:.1f} s to fail"
        assert os.listdir(mount) == [], os.listdir(mount)
        free = os.statvfs(mount)
        assert free.f_bfree == free.f_blocks, "the failed fetch keeps the file system full"
        served = [v["bytes_served"] for v in swarm.status("pub")["versions"] if v["model"] == "big"][0]
        assert served < 3 * os.path.getsize(big), f"the publisher served {served} bytes for a failed fetch"
        print(f"2. a fetch into a full tmpfs failed in {took:.1f} s: {out.stderr.strip()}; "
              f"{served} bytes served, nothing left")
    finally:
        subprocess.run(["umount", "-l", mount], capture_output=True)


def case_retry(swarm, small, workdir):
    out = swarm.publish("pub3", "retry", small)
    assert out.returncode == 0, out.stderr
    wait_for("the worker to learn retry", lambda: swarm.head("w1", "retry") == 1, 20)
    swarm.procs["pub3"].kill()
    swarm.procs["pub3"].wait()
    target = os.path.join(workdir, "retry.safetensors")
    for attempt in (1, 2):
        t0 = time.monotonic()
        out = swarm.fetch("w1", target, model="retry", timeout=60)
        took = time.monotonic() - t0
        assert out.returncode == 2, (attempt, out.returncode, out.stderr)
        assert took < 30, f"attempt {attempt} took {took:.1f} s"
        print(f"3. fetch {attempt} with no holder failed in {took:.1f} s: {out.stderr.strip()}")
    assert partials(workdir) == [], partials(workdir)
    # A holder again: the same publisher, restarted, publishes the next version.
    swarm.publisher = "pub3"
    swarm.start("pub3", seeds=["w1"])
    swarm.publisher = "pub"
    wait_for("the restarted publisher to learn retry v1", lambda: swarm.head("pub3", "retry") == 1, 20)
    out = swarm.publish("pub3", "retry", small)
    assert out.returncode == 0, out.stderr
    wait_for("the worker to learn retry v2", lambda: swarm.head("w1", "retry") == 2, 20)
    out = swarm.fetch("w1", target, model="retry", timeout=60)
    assert out.returncode == 0, out.stderr
    assert os.path.getsize(target) == os.path.getsize(small)
    print("3. once a holder exists again, the same fetch succeeds")


def publish_and_learn(swarm, model, path, publisher="pub2", worker="w1"):
    out = swarm.publish(publisher, model, path)
    assert out.returncode == 0, out.stderr
    wait_for(f"{worker} to verify {model}", lambda: verified_head(swarm, worker, model) is not None, 20)


def case_outputs_refused(swarm, small, workdir):
    publish_and_learn(swarm, "outs", small)
    fifo = os.path.join(workdir, "fifo")
    os.mkfifo(fifo)
    target = os.path.join(workdir, "target")
    with open(target, "wb") as f:
        f.write(b"keep me")
    link = os.path.join(workdir, "link")
    os.symlink(target, link)
    refused = {"a FIFO": fifo, "a symbolic link": link, "a directory": os.path.join(workdir, "hold-w1")}
    if os.geteuid() == 0:
        device = os.path.join(workdir, "null")
        os.mknod(device, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        refused["a character device"] = device
    for what, path in refused.items():
        out = swarm.fetch("w1", path, model="outs", timeout=60)
        assert out.returncode == 2 and "refusing to replace" in out.stderr and what in out.stderr, (what, out.stderr)
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode) and os.path.islink(link)
    with open(target, "rb") as f:
        assert f.read() == b"keep me"
    if "a character device" in refused:
        assert stat.S_ISCHR(os.lstat(refused["a character device"]).st_mode)
    print("4. --out refuses " + ", ".join(refused) + ", and leaves each as it was")


def case_hold_directory(swarm, workdir):
    def start_fails(hold, reason):
        cmd = swarm.command("h", extra=())
        cmd[cmd.index("--hold-dir") + 1] = hold
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
        assert out.returncode == 2 and reason in out.stderr, (hold, out.returncode, out.stderr)
        return out.stderr.strip().splitlines()[-1]

    shared = os.path.join(workdir, "shared-hold")
    os.mkdir(shared)
    os.chmod(shared, 0o777)
    print("5. " + start_fails(shared, "writable by other users"))
    if os.geteuid() == 0:
        theirs = os.path.join(workdir, "their-hold")
        os.mkdir(theirs, 0o700)
        os.chown(theirs, 65534, 65534)
        print("5. " + start_fails(theirs, "belongs to uid 65534"))
    made = os.path.join(workdir, "hold-w1")
    assert stat.S_IMODE(os.stat(made).st_mode) == 0o700, oct(os.stat(made).st_mode)
    print("5. a new hold directory is made mode 0700")


def case_killed_mid_fetch(swarm, small, workdir):
    out = swarm.publish("pub2", "killed", small)
    assert out.returncode == 0, out.stderr
    wait_for("w2 to learn killed", lambda: swarm.head("w2", "killed") == 1, 20)
    os.kill(swarm.procs["pub2"].pid, signal.SIGSTOP)  # the only holder answers nothing
    try:
        target = os.path.join(workdir, "killed.safetensors")
        client = subprocess.Popen([swarm.binary, "fetch", "--control", swarm.control("w2"), "--model", "killed",
                                   "--out", target], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for("the temporary file", lambda: partials(workdir) != [], 10)
        swarm.procs["w2"].kill()
        swarm.procs["w2"].wait()
        client.wait(10)
        left = partials(workdir)
        assert left, "the killed daemon left nothing to clean"
        swarm.start("w2", seeds=["w1"], extra=("--trust", swarm.pubkeys["pub2"], "--trust", swarm.pubkeys["pub3"]))
        wait_for("the restarted daemon to remove " + left[0], lambda: partials(workdir) == [], 10)
        print(f"6. a daemon SIGKILLed mid-fetch left {left[0]}; its restart removed it")
    finally:
        os.kill(swarm.procs["pub2"].pid, signal.SIGCONT)


def case_timeout(swarm, small, workdir):
    publish_and_learn(swarm, "stalled", small, worker="w2")
    os.kill(swarm.procs["pub2"].pid, signal.SIGSTOP)  # the only holder answers nothing
    try:
        target = os.path.join(workdir, "stalled.safetensors")
        t0 = time.monotonic()
        out = swarm.fetch("w2", target, model="stalled", timeout=60, extra=("--timeout", "2"))
        took = time.monotonic() - t0
        assert out.returncode == 2 and "timeout" in out.stderr, (out.returncode, out.stderr)
        assert took < 6, f"fetch --timeout 2 took {took:.1f} s"
        wait_for("the cancelled fetch's temporary file to go", lambda: partials(workdir) == [], 5)
        assert swarm.status("w2") is not None
        print(f"9. fetch --timeout 2 through the daemon returned in {took:.1f} s ({out.stderr.strip()}); "
              "the fetch was cancelled, nothing left")
    finally:
        os.kill(swarm.procs["pub2"].pid, signal.SIGCONT)


def case_not_utf8(swarm, small, workdir):
    binary = os.fsencode(swarm.binary)
    control = os.fsencode(swarm.control("w1"))
    out = subprocess.run([binary, b"fetch", b"--control", control, b"--model", b"bad\xff", b"--out", b"/tmp/x"],
                         capture_output=True, timeout=30)
    assert out.returncode == 2 and b"model name" in out.stderr, (out.returncode, out.stderr)
    odd = os.path.join(os.fsencode(workdir), b"in-\xff.safetensors")
    with open(small, "rb") as src, open(odd, "wb") as dst:
        dst.write(src.read())
    out = subprocess.run([binary, b"publish", b"--control", os.fsencode(swarm.control("pub2")), b"--model", b"odd",
                          odd], capture_output=True, timeout=30)
    assert out.returncode == 0, out.stderr
    wait_for("w1 to learn odd", lambda: swarm.head("w1", "odd") == 1, 20)
    result = os.path.join(os.fsencode(workdir), b"out-\xfe.safetensors")
    out = subprocess.run([binary, b"fetch", b"--control", control, b"--model", b"odd", b"--out", result],
                         capture_output=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert os.path.getsize(result) == os.path.getsize(small)
    print("7. a model name with byte 0xff is refused in one line; a file named with 0xff publishes, and one "
          "named with 0xfe is written")


def case_bad_shards(swarm, small, workdir):
    """A worker whose only source sends shards that fail verification says
    which holder sent them, not only that nobody holds the version."""
    out = swarm.publish("pub3", "mutated", small)
    assert out.returncode == 0, out.stderr
    swarm.publisher = "pub3"
    swarm.start("liar", seeds=["pub3"], extra=("--test-corrupt-serving",))
    swarm.publisher = "pub"
    wait_for("the liar to verify mutated", lambda: verified_head(swarm, "liar", "mutated") == 1, 20)
    got = swarm.fetch("liar", os.path.join(workdir, "liar.safetensors"), model="mutated", timeout=60)
    assert got.returncode == 0, got.stderr
    out = swarm.run("release", "--control", swarm.control("pub3"), "--model", "mutated", "--version", "1", "--now")
    assert out.returncode == 0, out.stderr
    wait_for("w1 to verify mutated", lambda: verified_head(swarm, "w1", "mutated") == 1, 20)
    out = swarm.fetch("w1", os.path.join(workdir, "mutated.safetensors"), model="mutated", timeout=120)
    assert out.returncode == 2, (out.returncode, out.stderr)
    liar = swarm.pubkeys["liar"][:12]
    assert f"holder {liar} sent" in out.stderr and "failed verification" in out.stderr, out.stderr
    print(f"10. a fetch whose only holder sends bad shards names it: {out.stderr.strip()}")


def case_control_protocol(swarm, small, workdir):
    publish_and_learn(swarm, "long-out", small)
    sock = swarm.control("w1")
    big = b'{"cmd":"status","pad":"' + b"x" * (3 << 19)
    answer = control_raw(sock, big, newline=False)
    assert answer and answer[-1]["ok"] is False and "at most 1048576 bytes" in answer[-1]["error"], answer
    answer = control_raw(sock, b'{"cmd":"status"}', newline=False, shut_write=True)
    assert answer and "without a newline" in answer[-1]["error"], answer
    t0 = time.monotonic()
    answer = control_raw(sock, b'{"cmd"', timeout=30, newline=False)
    took = time.monotonic() - t0
    assert answer and answer[-1]["code"] == "timeout" and 9 < took < 20, (answer, took)
    for request, reason in ((b'{"cmd":"fetch","model":"m","out":"/tmp/a\\u0000b"}', "NUL byte"),
                            (b'{"cmd":"fetch","model":"m","out":"relative.bin"}', "absolute path"),
                            (b'{"cmd":"publish","model":"m","file":"x.safetensors"}', "absolute path")):
        answer = control_raw(sock, request)
        assert answer[-1]["ok"] is False and reason in answer[-1]["error"], (request, answer)
        assert answer[-1]["code"] == "invalid_argument"
    print(f"10. oversized, unterminated and idle ({took:.1f} s) requests each got an error line; NUL bytes "
          "and relative paths are refused")
    cmd = swarm.command("high")
    cmd[cmd.index("--listen") + 1] = "127.0.0.1:65535"
    del cmd[cmd.index("--data-listen"):cmd.index("--data-listen") + 2]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    assert out.returncode == 2 and "65535" in out.stderr, (out.returncode, out.stderr)
    # Exit codes: what is not there exits 2 through the daemon and through --join alike.
    via_daemon = swarm.fetch("w1", os.path.join(workdir, "nothing"), model="nothing", timeout=60)
    via_join = swarm.run("fetch", "--join", f"127.0.0.1:{swarm.ports['w1']}", "--key", swarm.keygen("joiner"),
                         "--swarm-key", swarm.swarm_key, "--trust", swarm.pubkeys["pub"], "--model", "nothing",
                         "--out", os.path.join(workdir, "nothing"), "--timeout", "3")
    assert via_daemon.returncode == 2 and via_join.returncode == 2, (via_daemon.stderr, via_join.stderr)
    gone = swarm.run("status", "--control", os.path.join(workdir, "nobody.sock"))
    assert gone.returncode == 2, gone.stderr
    bad = swarm.run("fetch", "--control", sock, "--model", "m", "--out", "x", "--timeout", "-1")
    assert bad.returncode == 2 and "--timeout" in bad.stderr, bad.stderr
    cmd = swarm.command("nan") + ["--max-release-deferral", "nan"]
    bad = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    assert bad.returncode == 2 and "--max-release-deferral" in bad.stderr, bad.stderr
    # A legal 250-byte name, though its temporary name's suffix would pass 255.
    long_out = os.path.join(workdir, "o" * 250)
    out = swarm.fetch("w1", long_out, model="long-out", timeout=60)
    assert out.returncode == 0, out.stderr
    print("10. --listen :65535 is refused; not found exits 2 through the daemon and --join; a 250-byte output "
          "name works")


def main():
    binary = os.path.abspath(sys.argv[1])
    with tempfile.TemporaryDirectory(prefix="tensorhub-failures-") as workdir:
        swarm = Swarm(binary, workdir)
        small = os.path.join(workdir, "small.safetensors")
        big = os.path.join(workdir, "big-model.safetensors")
        assert swarm.run("synth-model", "--out", small, "--size", "256KiB", "--tensor-size", "64KiB").returncode == 0
        assert swarm.run("synth-model", "--out", big, "--size", "4MiB", "--tensor-size", "256KiB").returncode == 0
        try:
            swarm.publisher = None
            swarm.start("pub")
            swarm.publisher = "pub"
            for name in ("pub2", "pub3"):  # publishers too: they trust pub, so their own keys are added below
                swarm.keygen(name)
            trust_all = ["--trust", swarm.pubkeys["pub2"], "--trust", swarm.pubkeys["pub3"]]
            swarm.start("w1", seeds=["pub"], extra=trust_all)
            swarm.start("w2", seeds=["pub"], extra=trust_all)
            swarm.publisher = "pub2"
            swarm.start("pub2", seeds=["pub"])
            swarm.publisher = "pub3"
            swarm.start("pub3", seeds=["pub"])
            swarm.publisher = "pub"
            cases = {"1": lambda: case_record_full(swarm, small), "2": lambda: case_full_disk(swarm, big, workdir),
                     "3": lambda: case_retry(swarm, small, workdir), "4": lambda: case_outputs_refused(swarm, small, workdir),
                     "5": lambda: case_hold_directory(swarm, workdir),
                     "6": lambda: case_killed_mid_fetch(swarm, small, workdir),
                     "7": lambda: case_not_utf8(swarm, small, workdir),
                     "9": lambda: case_timeout(swarm, small, workdir),
                     "10": lambda: case_control_protocol(swarm, small, workdir),
                     "10b": lambda: case_bad_shards(swarm, small, workdir)}
            for name in sys.argv[2:] or cases:  # some cases by name, or all
                cases[name]()
            # SIGTERM ends every daemon within seconds, fetches or not.
            for name in ("w1", "w2"):
                t0 = time.monotonic()
                swarm.procs[name].send_signal(signal.SIGTERM)
                swarm.procs[name].wait(10)
                print(f"SIGTERM ended {name} in {time.monotonic() - t0:.1f} s")
        finally:
            swarm.stop_all()


if __name__ == "__main__":
    main()
