# Traffic with content checks for the defaults matrix (tests/defaults_matrix.rs).
# Run inside a namespace:
#   tcprecv BIND PORT READY        -> "tcp BYTES SHA256"
#   tcpsend DST PORT BYTES SEED    -> "tcp BYTES SHA256" (what was sent)
#   udprecv BIND PORT COUNT READY  -> "udp good G bad B dup D"
#   udpsend DST PORT COUNT MAXLEN  -> "udp sent N"
#   udpreflect DST PORT COUNT MAXLEN -> "udp good G bad B dup D": sends to
#       DST:PORT from PORT and checks what a reflector (testpmd 5tswap)
#       sends back to the same socket
# UDP datagrams are a 4-byte sequence number followed by a pattern that
# depends on it and on the length, so the receiver checks every byte.
import hashlib
import random
import socket
import sys
import time

PAT = bytes(range(251)) * 40


def fam(addr):
    return socket.AF_INET6 if ":" in addr else socket.AF_INET


def datagram(seq, n):
    o = (seq * 7 + n) % 251
    return (seq.to_bytes(4, "big") + PAT[o:o + n - 4])[:n]


def sizes(maxlen):
    s = [4, 5, 17, 64, 100, 333, 512, 1000, 1200, 1400, 1472, 2000, 4000, 8000, maxlen - 1, maxlen]
    return sorted(set(x for x in s if 4 <= x <= maxlen))


def main():
    mode, addr, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
    if mode == "tcprecv":
        s = socket.socket(fam(addr), socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((addr, port))
        s.listen(1)
        open(sys.argv[4], "w").close()
        s.settimeout(15)
        h = hashlib.sha256()
        n = 0
        try:
            c, _ = s.accept()
            c.settimeout(8)
            while True:
                b = c.recv(1 << 16)
                if not b:
                    break
                h.update(b)
                n += len(b)
            c.close()
            print("tcp", n, h.hexdigest())
        except OSError as e:
            print("tcp", n, h.hexdigest(), "error", e)
    elif mode == "tcpsend":
        data = random.Random(int(sys.argv[5])).randbytes(int(sys.argv[4]))
        try:
            c = socket.create_connection((addr, port), timeout=5)
            c.settimeout(8)
            c.sendall(data)
            c.shutdown(socket.SHUT_WR)
            c.recv(1)
            print("tcp", len(data), hashlib.sha256(data).hexdigest())
        except OSError as e:
            print("tcp", len(data), hashlib.sha256(data).hexdigest(), "error", e)
    elif mode == "udprecv":
        count = int(sys.argv[4])
        s = socket.socket(fam(addr), socket.SOCK_DGRAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
        s.bind((addr, port))
        s.settimeout(0.2)
        open(sys.argv[5], "w").close()
        seen = set()
        bad = dup = 0
        t0 = time.time()
        last = None
        while len(seen) < count and time.time() - t0 < 20:
            try:
                b = s.recv(1 << 16)
            except socket.timeout:
                if last is not None and time.time() - last > 1.5:
                    break
                continue
            last = time.time()
            seq = int.from_bytes(b[:4], "big") if len(b) >= 4 else -1
            if seq < 0 or seq >= count or b != datagram(seq, len(b)):
                bad += 1
            elif seq in seen:
                dup += 1
            else:
                seen.add(seq)
        print("udp good", len(seen), "bad", bad, "dup", dup)
    elif mode == "udpsend":
        count, maxlen = int(sys.argv[4]), int(sys.argv[5])
        sz = sizes(maxlen)
        s = socket.socket(fam(addr), socket.SOCK_DGRAM)
        s.connect((addr, port))
        for i in range(count):
            n = sz[i % len(sz)]
            s.send(datagram(i, n))
            if i % 10 == 9:
                time.sleep(0.003)
        print("udp sent", count)
    elif mode == "udpreflect":
        count, maxlen = int(sys.argv[4]), int(sys.argv[5])
        sz = sizes(maxlen)
        s = socket.socket(fam(addr), socket.SOCK_DGRAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
        s.bind(("::" if fam(addr) == socket.AF_INET6 else "0.0.0.0", port))
        s.setblocking(False)
        seen = set()
        bad = dup = 0

        def drain():
            nonlocal bad, dup
            while True:
                try:
                    b = s.recv(1 << 16)
                except BlockingIOError:
                    return
                seq = int.from_bytes(b[:4], "big") if len(b) >= 4 else -1
                if seq < 0 or seq >= count or b != datagram(seq, len(b)):
                    bad += 1
                elif seq in seen:
                    dup += 1
                else:
                    seen.add(seq)
        for i in range(count):
            s.sendto(datagram(i, sz[i % len(sz)]), (addr, port))
            if i % 10 == 9:
                time.sleep(0.003)
                drain()
        t0 = time.time()
        while len(seen) < count and time.time() - t0 < 2:
            time.sleep(0.05)
            drain()
        print("udp good", len(seen), "bad", bad, "dup", dup)


main()
