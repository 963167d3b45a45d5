#!/usr/bin/env python3
"""Minimal TFTP and FTP peers for the connection-tracking helper tests.

Each server serves one transfer of N bytes and exits; each client prints
"received N". The servers answer the way real ones do: TFTP from a fresh
UDP port, FTP passive data on a fresh listening port (227 reply), FTP active
data by connecting back to the client's PORT.

usage: alg_peers.py tftp-server IP SIZE READYFILE
       alg_peers.py tftp-client SERVER
       alg_peers.py ftp-server IP SIZE READYFILE
       alg_peers.py ftp-client SERVER passive|active
"""
import ftplib
import socket
import struct
import sys

TIMEOUT = 8


def ready(path):
    open(path, "w").close()


def tftp_server(ip, size, readyfile):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind((ip, 69))
    s.settimeout(TIMEOUT * 2)
    ready(readyfile)
    req, peer = s.recvfrom(1500)
    assert struct.unpack("!H", req[:2])[0] == 1, "RRQ"
    data = bytes(i % 251 for i in range(size))
    t = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    t.bind((ip, 0))  # a fresh port, as TFTP servers answer
    t.settimeout(2)
    block = 1
    while True:
        chunk = data[(block - 1) * 512 : block * 512]
        for _ in range(5):
            t.sendto(struct.pack("!HH", 3, block) + chunk, peer)
            try:
                ack, _ = t.recvfrom(1500)
            except socket.timeout:
                continue
            if struct.unpack("!HH", ack[:4]) == (4, block):
                break
        else:
            sys.exit("no ack for block %d" % block)
        if len(chunk) < 512:
            return
        block += 1


def tftp_client(server):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(TIMEOUT / 2)
    s.sendto(struct.pack("!H", 1) + b"file\0octet\0", (server, 69))
    got, block = 0, 1
    while True:
        try:
            pkt, peer = s.recvfrom(1500)
        except socket.timeout:
            break
        op, n = struct.unpack("!HH", pkt[:4])
        if op != 3:
            break
        if n == block:
            got += len(pkt) - 4
            block += 1
        s.sendto(struct.pack("!HH", 4, n), peer)
        if len(pkt) - 4 < 512:
            break
    print("received %d" % got)


def ftp_server(ip, size, readyfile):
    ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind((ip, 21))
    ls.listen(1)
    ls.settimeout(TIMEOUT * 2)
    ready(readyfile)
    c, _ = ls.accept()
    c.settimeout(TIMEOUT)
    f = c.makefile("rwb")

    def say(line):
        f.write(line.encode() + b"\r\n")
        f.flush()

    say("220 xvs test ftp")
    pasv = None
    active = None
    while True:
        line = f.readline().decode().strip()
        if not line:
            return
        cmd, _, arg = line.partition(" ")
        cmd = cmd.upper()
        if cmd == "USER":
            say("331 password")
        elif cmd == "PASS":
            say("230 in")
        elif cmd == "TYPE":
            say("200 ok")
        elif cmd == "PASV":
            pasv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            pasv.bind((ip, 0))
            pasv.listen(1)
            pasv.settimeout(TIMEOUT)
            p = pasv.getsockname()[1]
            say("227 Entering Passive Mode (%s,%d,%d)." % (ip.replace(".", ","), p >> 8, p & 255))
        elif cmd == "PORT":
            n = [int(x) for x in arg.split(",")]
            active = (".".join(map(str, n[:4])), n[4] * 256 + n[5])
            say("200 port ok")
        elif cmd == "RETR":
            say("150 sending")
            if pasv is not None:
                d, _ = pasv.accept()
            else:
                d = socket.create_connection(active, timeout=TIMEOUT)
            d.sendall(bytes(i % 251 for i in range(size)))
            d.close()
            say("226 done")
        elif cmd == "QUIT":
            say("221 bye")
            return
        else:
            say("502 no")


def ftp_client(server, mode):
    ftp = ftplib.FTP()
    ftp.connect(server, 21, timeout=TIMEOUT)
    ftp.login("test", "test")
    ftp.set_pasv(mode == "passive")
    got = [0]

    def take(b):
        got[0] += len(b)

    try:
        ftp.retrbinary("RETR file", take)
        ftp.quit()
    except (OSError, ftplib.Error) as e:
        print("error %s" % e)
    print("received %d" % got[0])


if __name__ == "__main__":
    a = sys.argv
    {
        "tftp-server": lambda: tftp_server(a[2], int(a[3]), a[4]),
        "tftp-client": lambda: tftp_client(a[2]),
        "ftp-server": lambda: ftp_server(a[2], int(a[3]), a[4]),
        "ftp-client": lambda: ftp_client(a[2], a[3]),
    }[a[1]]()
