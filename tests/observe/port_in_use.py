"""A server must refuse a port another process listens on (ADDRESS_IN_USE):
this script listens on a port the way cpp-httplib's servers do by default
(SO_REUSEADDR and SO_REUSEPORT, with which a second such socket of the same
user could bind it too, and the kernel would split the connections between
them), runs the command given with {port} replaced by that port, and passes
where the command exits with a failure within 30 seconds and its standard
error matches the pattern given.

    python3 tests/observe/port_in_use.py 'cannot listen' build/uvm-lab --serve {port}
"""
import re
import socket
import subprocess
import sys


def main():
    if len(sys.argv) < 3:
        print(__doc__)
        return 2
    pattern, command = sys.argv[1], sys.argv[2:]
    holder = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    port = holder.getsockname()[1]
    argv = [a.replace("{port}", str(port)) for a in command]
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    except subprocess.TimeoutExpired:
        print("FAILED: %s served port %d, which another socket listens on" % (argv[0], port))
        return 1
    if r.returncode == 0 or not re.search(pattern, r.stderr):
        print("FAILED: exit status %d; standard error:\n%s" % (r.returncode, r.stderr))
        return 1
    print("ok: refused port %d (exit status %d): %s" % (port, r.returncode, r.stderr.strip()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
